"""The checkpoint analysis: every column for every step, the values against direct metric
calls, the figures, each step measured once per setting, and damaged checkpoints set aside
(the CKA reference falls back to the newest good step).

One tiny run (tests/_tiny.py's config stopped after 8 steps: checkpoints 0, 1, 2, 4, 8) on
the real data path is trained once per module and analysed once; the other tests reuse it.
"""

import dataclasses
import json
import logging
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax import checkpoint as ckpt
from sbjax import heads
from sbjax import metrics as M
from sbjax import optim
from sbjax import train as train_lib
from sbjax.analysis import Settings, analyze_run, figures, read_csv
from sbjax.model import Model
from tests._damage import MANIFEST, flip_one_byte, largest_data_file
from tests._tiny import tiny_run_config

pytestmark = [pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
              pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")]

STEPS = [0, 1, 2, 4, 8]
# 12 eval sequences in chunks of 8 (a padded chunk), groups of 3 checkpoints (a padded group)
SMALL = dict(eval_sequences=12, cka_sequences=12, anisotropy_tokens=0, collapse_sequences=12,
             batch_sequences=8, group_size=3, progress=False)
COLLAPSE_KEYS = ("nc1_cdnv", "nc1_log10_cdnv", "nc2_norm_cov", "nc2_log_norm_cov", "nc2_cos_mean",
                 "nc2_cos_std", "etf_error", "gnc2_log_kernel_mean", "gnc2_log_kernel_var",
                 "nc3_cos_mean", "unc3_cos_cov", "dual_error", "nc4_agreement", "n_classes")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
  # the session's tiny run config (tests/_tiny.py), stopped after step 8: its compiled
  # programs are the shared tiny_run's (no compile of its own), its log-spaced checkpoints
  # up to 8 are STEPS
  cfg = tiny_run_config()
  wd = tmp_path_factory.mktemp("analysis") / "run"
  train_lib.train(cfg, wd, stop_after=8, quiet=True)  # the real data path (make_dataset)
  assert ckpt.list_steps(wd) == STEPS
  return wd


@pytest.fixture(scope="module")
def analysed(run_dir, tmp_path_factory):
  """The analysis of ``run_dir``, whose step 2 has no checksum manifest, into an OUT whose
  metrics.csv is a link to a file elsewhere (replaced, its target left as it was)."""
  (run_dir / "checkpoints" / "2" / MANIFEST).unlink()
  elsewhere = tmp_path_factory.mktemp("elsewhere") / "metrics.csv"
  elsewhere.write_text("someone else's\n")
  (run_dir / "analysis").mkdir()
  (run_dir / "analysis" / "metrics.csv").symlink_to(elsewhere)
  rows = analyze_run(run_dir, Settings(**SMALL))
  assert elsewhere.read_text() == "someone else's\n"
  assert not (run_dir / "analysis" / "metrics.csv").is_symlink()
  return rows


def _required_columns(cfg):
  cols = ["step", "eval_loss", "eval_acc", "anisotropy_last", "head_kl_uniform", "head_erank",
          "head_stable_rank", *COLLAPSE_KEYS, "gamma", "head_kl_uniform_centred",
          "head_erank_centred"]
  cols += [f"head_w_error_{d}" for d in (1, 2, 4, 8, 16, 32)]  # 64 > d_model=32 is dropped
  cols += [f"head_w_error_centred_{d}" for d in (1, 2, 4, 8, 16, 32)]
  for i in range(cfg.model.n_layers):
    cols += [f"anisotropy_layer_{i}", f"cka_to_final_mlp_{i}", f"cka_to_final_attn_{i}",
             f"per_mlp_{i}", f"per_ov_{i}"]
  return cols


def test_csv_has_every_column_for_every_step(run_dir, analysed):
  rows = analysed
  cfg = ckpt.load_config(run_dir)
  csv_rows = read_csv(run_dir / "analysis" / "metrics.csv")
  assert [r["step"] for r in csv_rows] == STEPS == [r["step"] for r in rows]
  assert "head_w_error_64" not in csv_rows[0]
  for r in csv_rows:
    for c in _required_columns(cfg):
      assert c in r and np.isfinite(r[c]), (r["step"], c)
  for r, r2 in zip(rows, csv_rows):  # the CSV round-trips the returned rows exactly
    # (NaN == NaN here: a guarded UNC3 is NaN by design when the mean cosine is near 0)
    assert {k: float(v) for k, v in r.items()} == pytest.approx({k: float(v) for k, v in r2.items()},
                                                                 rel=0, abs=0, nan_ok=True)
  meta = json.loads((run_dir / "analysis" / "metrics.json").read_text())
  assert meta["samples"]["eval_tokens"] == 12 * 32 and meta["samples"]["cka_samples_per_layer"] == 12
  assert meta["samples"]["collapse_train_tokens"] == 12 * 32
  assert meta["settings"]["min_count"] == 1 and meta["variants"]["collapse"]["cdnv_exponent"] == 2.0
  assert "r = head_dim = 16" in meta["variants"]["per"]["ov"] and meta["unverified_steps"] == [2]
  with np.load(run_dir / "analysis" / "spectrum.npz") as z:
    assert z["steps"].tolist() == STEPS and z["normalized_top"].shape == (5, 100)
    top = z["normalized_top"]
  assert np.allclose(top[:, 0], 1.0) and np.all(np.isnan(top[:, 32:]))
  cka = {k: v for k, v in rows[-1].items() if k.startswith("cka_to_final_")}
  assert cka and all(abs(v - 1.0) < 1e-4 for v in cka.values()), cka  # the final step itself
  assert any(r["cka_to_final_mlp_0"] < 0.999 for r in rows[:-1])


def _close(a, b, rtol=1e-3, atol=2e-5):
  assert np.isclose(float(a), float(b), rtol=rtol, atol=atol), (a, b)


def test_values_equal_direct_metric_calls(run_dir, analysed):
  """Recompute one checkpoint's row by hand (documented samples, sbjax.metrics calls)."""
  from sbjax.data import make_dataset

  rows = analysed
  step = 4
  row = next(r for r in rows if r["step"] == step)
  cfg, params, _ = ckpt.load_params(run_dir, step)
  _, final, _ = ckpt.load_params(run_dir, STEPS[-1])
  tc, mc = cfg.train, cfg.model
  ds = make_dataset(cfg.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                    seed=tc.data_seed, workdir=str(run_dir), process_index=0, process_count=1)
  ev = np.concatenate(ds.eval_batches(2))[:12]  # ceil(12 / B=8) = 2 batches
  tr = np.concatenate([ds.train_batch(0), ds.train_batch(1)])[:12]
  model = Model(mc)
  apply = jax.jit(lambda p, x: model.forward(p, x, ("resid", "mlp", "ov", "h")))
  scores, ex = apply(params, ev[:, :-1])
  _, ex_final = apply(final, ev[:, :-1])
  d = mc.d_model
  # loss
  logp = jax.nn.log_softmax(scores, -1)
  nll = -jnp.take_along_axis(logp, ev[:, 1:, None], -1)[..., 0]
  _close(row["eval_loss"], nll.mean(), rtol=1e-5)
  _close(row["eval_acc"], (logp.argmax(-1) == ev[:, 1:]).mean(), rtol=0, atol=1e-6)
  # anisotropy (all positions: anisotropy_tokens=0)
  for i in range(mc.n_layers):
    _close(row[f"anisotropy_layer_{i}"], M.anisotropy(ex["resid"][i].reshape(-1, d)))
  _close(row["anisotropy_last"], M.anisotropy(ex["h"].reshape(-1, d)))
  # head spectrum
  w = heads.head_matrix(params, mc)
  s = M.singular_values(w)
  _close(row["head_kl_uniform"], M.kl_to_uniform(s))
  _close(row["head_erank"], M.effective_rank(s))
  _close(row["head_stable_rank"], M.stable_rank(s))
  for dd in (1, 4, 16):
    _close(row[f"head_w_error_{dd}"], M.w_error(s, dd))
  # the vocabulary-centred head (numpy SVD of W - mean row) and Γ = λ Σ η of the schedule
  sc = np.linalg.svd(np.asarray(w, np.float64) - np.asarray(w, np.float64).mean(0), compute_uv=False)
  pc = sc / sc.sum()
  _close(row["head_kl_uniform_centred"], np.log(len(sc)) + (pc * np.log(pc)).sum(), atol=1e-4)
  _close(row["head_erank_centred"], np.exp(-(pc * np.log(pc)).sum()))
  _close(row["head_w_error_centred_4"], np.sqrt((sc[4:] ** 2).sum() / (sc ** 2).sum()))
  _close(row["gamma"], tc.weight_decay * sum(float(optim.lr_schedule(tc)(t)) for t in range(step)),
         rtol=1e-6)
  # CKA to the final checkpoint, last token of the 12 sequences
  for i in range(mc.n_layers):
    _close(row[f"cka_to_final_mlp_{i}"],
           M.linear_cka(ex["mlp"][i][:, -1], ex_final["mlp"][i][:, -1]))
    _close(row[f"cka_to_final_attn_{i}"], M.linear_cka(ex["ov"][i][:, -1], ex_final["ov"][i][:, -1]))
  # PER
  for i in range(mc.n_layers):
    b = params[f"block_{i}"]
    _close(row[f"per_mlp_{i}"], M.proportional_effective_rank(M.singular_values(b["mlp"]["fc_out_kernel"])))
    pers = [M.proportional_effective_rank(
        M.singular_values(b["attn"]["v_kernel"][:, h, :] @ b["attn"]["o_kernel"][h]), mc.head_dim)
            for h in range(mc.n_heads)]
    _close(row[f"per_ov_{i}"], np.mean(pers))
  # collapse: means on the train sample, NC4 on the evaluation sample
  _, ex_tr = apply(params, tr[:, :-1])
  cm = M.collapse_metrics(np.asarray(ex_tr["h"]).reshape(-1, d), tr[:, 1:].reshape(-1), w,
                          np.asarray(ex["h"]).reshape(-1, d), ev[:, 1:].reshape(-1)).to_dict()
  assert row["n_classes"] == cm["n_classes"]
  for k in ("nc1_log10_cdnv", "nc2_norm_cov", "nc2_cos_mean", "nc3_cos_mean", "etf_error",
            "dual_error"):
    _close(row[k], cm[k], rtol=2e-3, atol=1e-4)
  _close(row["nc1_cdnv"], cm["nc1_cdnv"], rtol=1e-2)
  _close(row["nc4_agreement"], cm["nc4_agreement"], rtol=0, atol=3 / (12 * 32))


def test_figures_are_valid_pngs(run_dir, analysed):
  import matplotlib.image as mpimg

  for name in figures.FIGURES.values():
    img = mpimg.imread(run_dir / "analysis" / name)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100, name


def _computed(out) -> int:
  return json.loads((out / "metrics.json").read_text())["computed_checkpoints"]


def test_each_step_is_measured_once_per_setting(run_dir, analysed, tmp_path):
  cache = run_dir / "analysis" / "measure.json"
  mtime = cache.stat().st_mtime_ns
  # scheduling-only settings differ: every row comes from the cache, exactly
  again = analyze_run(run_dir, Settings(**{**SMALL, "group_size": 2, "batch_sequences": 4,
                                           "figures": False}))
  assert cache.stat().st_mtime_ns == mtime and _computed(run_dir / "analysis") == 0
  assert [r.keys() for r in again] == [r.keys() for r in analysed] and all(
      x[k] == y[k] or (x[k] != x[k] and y[k] != y[k]) for x, y in zip(again, analysed) for k in x)
  # a setting that changes a number recomputes every step
  spec = Settings(groups=("spectrum",), out_dir=str(tmp_path), progress=False, figures=False)
  analyze_run(run_dir, spec)
  r = analyze_run(run_dir, dataclasses.replace(spec, w_error_dims=(1, 2)))
  assert _computed(tmp_path) == 5 and "head_w_error_4" not in r[0] and "head_w_error_2" in r[0]


def test_damaged_steps_are_set_aside_and_the_others_analysed(run_dir, tmp_path, caplog):
  wd = tmp_path / "run"
  shutil.copytree(run_dir, wd, ignore=shutil.ignore_patterns("analysis"))
  flip_one_byte(largest_data_file(wd / "checkpoints" / "4"))
  final = wd / "checkpoints" / "8"  # the CKA reference: truncated, in a step without a
  (final / MANIFEST).unlink()  # manifest (found by the read, not the checksums)
  f = largest_data_file(final)
  f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
  with caplog.at_level(logging.WARNING, logger="sbjax"):
    rows = analyze_run(wd, Settings(**SMALL, figures=False, out_dir=str(tmp_path / "out")))
  assert [r["step"] for r in rows] == [0, 1, 2]
  assert abs(rows[-1]["cka_to_final_mlp_0"] - 1.0) < 1e-5  # against the newest good step
  for bad in (4, 8):
    assert any(f"checkpoint step {bad} in {wd} is bad" in r.getMessage() and "moved it aside"
               in r.getMessage() for r in caplog.records), bad
  moved = sorted((wd / "checkpoints_bad").iterdir())
  assert [p.name.split("_")[0] for p in moved] == ["4", "8"] and ckpt.list_steps(wd) == [0, 1, 2]
  meta = json.loads((tmp_path / "out" / "metrics.json").read_text())
  assert meta["final_step"] == 2 and {d["moved_to"] for d in meta["set_aside"]} == {
      str(p) for p in moved}
  flip_one_byte(largest_data_file(wd / "checkpoints" / "1"))
  with pytest.raises(ckpt.CorruptCheckpointError, match=rf"no checkpoint of {wd} could be "
                     r"analysed: step\(s\) \[1\] are damaged .*checksum mismatch"):
    analyze_run(wd, Settings(groups=("spectrum",), steps=(1,), out_dir=str(tmp_path / "none")))
  assert not (tmp_path / "none" / "metrics.csv").exists()
