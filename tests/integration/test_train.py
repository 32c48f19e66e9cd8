"""Training one run: golden value, accumulation, bitwise resume, NaN handling, resume settings."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax import checkpoint as ckpt
from sbjax import configs
from sbjax.cli.data_note import data_note
from sbjax.model import Model
from sbjax.optim import make_optimizer
from sbjax.train import NonFiniteLossError, make_train_step, read_metrics, train
from tests._tiny import tiny_config, tiny_dataset, tiny_run_config


@pytest.fixture(scope="module")
def tiny_ds():
  return tiny_dataset()


# Golden value: the loss after one AdamW step of the `tiny` model (seed 0) on a fixed
# arithmetic batch. Re-record it only when a deliberate change alters the numerics of the
# forward pass, the initialisation or the optimizer (and say so in the commit message);
# a change anywhere else that moves it is a regression.
GOLDEN_LOSS_STEP0 = 4.1644802
GOLDEN_LOSS_STEP1 = 3.9008024


def test_golden_one_step_regression():
  cfg = tiny_config(warmup_steps=0)
  model = Model(cfg.model)
  # jitted init, as train() initialises (one compile instead of ~80 eager op compiles)
  params = jax.jit(model.init, static_argnums=(1, 2))(jax.random.key(cfg.train.seed), 1,
                                                     cfg.train.seq_len)
  tx = make_optimizer(cfg.train, cfg.model, params)
  opt = tx.init(params)
  step = jax.jit(make_train_step(model, tx, 1, False))
  batch = jnp.asarray((np.arange(8 * 33).reshape(8, 33) * 7 + 3) % 64, jnp.int32)
  params, opt, m0 = step(params, opt, batch)
  _, _, m1 = step(params, opt, batch)
  np.testing.assert_allclose(float(m0["loss"]), GOLDEN_LOSS_STEP0, rtol=2e-6)
  np.testing.assert_allclose(float(m1["loss"]), GOLDEN_LOSS_STEP1, rtol=2e-6)


def test_gradient_accumulation_equals_full_batch():
  cfg = tiny_config()
  model = Model(cfg.model)
  params = model.init(jax.random.key(0), 1, cfg.train.seq_len)
  batch = jnp.asarray(np.random.default_rng(0).integers(0, 64, (8, 33)), jnp.int32)
  outs = []
  for acc in (1, 4):
    # eps=1e-3: some gradients are analytically zero (the k_bias dims that rotary leaves
    # alone: q·b_k is the same for every key), i.e. ~1e-10 of rounding noise, which Adam
    # with eps=1e-8 would blow up into ±lr-sized, sign-random updates
    tc = dataclasses.replace(cfg.train, grad_accum=acc, warmup_steps=0, eps=1e-3)
    tx = make_optimizer(tc, cfg.model, params)
    p, _, m = jax.jit(make_train_step(model, tx, acc, False))(params, tx.init(params), batch)
    outs.append((p, float(m["loss"])))
  for p, loss in outs[1:]:
    assert abs(loss - outs[0][1]) < 1e-5
    for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(outs[0][0])):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-6)


def _losses(workdir):
  return {r["step"]: r["loss"] for r in read_metrics(workdir) if "loss" in r}


def test_stop_and_resume_equals_uninterrupted_run_bitwise(tmp_path, tiny_ds, tiny_run):
  cfg = tiny_config(steps=24, log_every=1, eval_every=12, ckpt_every=12)
  full = tiny_run  # the session's shared uninterrupted run of this config (tests/conftest.py)
  assert ckpt.load_config(full) == cfg
  part = train(cfg, tmp_path / "part", dataset=tiny_ds, stop_after=10, quiet=True)
  assert part["step"] == 10
  assert max(ckpt.list_steps(tmp_path / "part")) == 8  # log-spaced: 0,1,2,4,8
  resumed = train(cfg, tmp_path / "part", dataset=tiny_ds, quiet=True)
  assert resumed["start_step"] == 8
  a, b = _losses(full), _losses(tmp_path / "part")
  assert sorted(a) == list(range(24)) and sorted(b) == sorted(a)
  assert all(a[s] == b[s] for s in a), "resumed losses differ from the uninterrupted run"
  _, pa, _ = ckpt.load_params(full, 24)
  _, pb, _ = ckpt.load_params(tmp_path / "part", 24)
  for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  assert ckpt.list_steps(full) == [0, 1, 2, 4, 8, 12, 16, 24]


def test_nan_loss_stops_with_step_and_keeps_last_good_checkpoint(tmp_path, tiny_ds):
  # the tiny run's config (tests/_tiny.py); the run stops at 5 whatever steps is
  cfg = tiny_run_config()
  with pytest.raises(NonFiniteLossError, match=r"non-finite loss or gradient .* at step 5;") as e:
    train(cfg, tmp_path, dataset=tiny_ds, quiet=True, nan_at_step=5)
  assert "last good checkpoint is step 4" in str(e.value)
  assert "nan_at_step" not in (tmp_path / "config.json").read_text()  # a hook, not config
  assert ckpt.list_steps(tmp_path) == [0, 1, 2, 4]
  _, params, _ = ckpt.load_params(tmp_path, 4)
  assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(params))


def test_skip_nonfinite_steps_skips_and_finishes(tmp_path, tiny_ds):
  # checkpoints only at 0 and the end (ckpt_log_spaced, a loop-only field): the skip is the point
  cfg = tiny_config(steps=10, log_every=1, skip_nonfinite_steps=2, ckpt_log_spaced=False)
  out = train(cfg, tmp_path, dataset=tiny_ds, quiet=True, nan_at_step=5)
  assert out["skipped_steps"] == 1 and out["step"] == 10
  assert np.isfinite(out["eval_loss"])


def test_a_resume_accepts_other_optimizer_settings(tmp_path, tiny_ds):
  """Stopped at step 2 and resumed with lr / 3 and no weight decay (another model: the bad-input
  table)."""
  cfg = tiny_run_config()
  assert train(cfg, tmp_path, dataset=tiny_ds, stop_after=2, quiet=True)["step"] == 2
  more = cfg.replace(train=dataclasses.replace(cfg.train, lr=cfg.train.lr / 3, weight_decay=0.0))
  out = train(more, tmp_path, dataset=tiny_ds, stop_after=3, quiet=True)
  assert out["start_step"] == 2 and out["step"] == 3


def test_the_data_note_only_when_the_data_was_not_chosen():
  cfg = configs.load("pythia-70m")
  note = data_note("pythia-70m", cfg, [])
  assert note.startswith("data: --config=pythia-70m trains on data.source=planted (") \
      and "\n" not in note, note
  assert data_note("pythia-70m", cfg, ["train.steps"]) == note
  for chosen in (["data.source"], ["data.options.vocab"]):  # on the command line
    assert data_note("pythia-70m", cfg, chosen) is None
  assert data_note("my_config.json", cfg, []) is None  # in the user's own file
