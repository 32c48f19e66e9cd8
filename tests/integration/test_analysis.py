"""The checkpoint analysis pipeline: CSV columns, values against direct metric calls,
CKA-to-final, figures, the resumable cache, the grouped and chunked forward, bad inputs.
(The command line: tests/e2e/test_remote_workdir_gcs.py, on a gs:// workdir.)

One tiny run (tests/_tiny.py's config stopped after 8 steps: checkpoints 0, 1, 2, 4, 8) on
the real data path is trained once per module and analysed once; the other tests reuse it
(compiled functions are shared).
"""

import dataclasses
import json
import re
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
from sbjax.analysis import Settings, analyze_run, forward, grouped_apply, read_csv
from sbjax.model import Model
from tests._tiny import tiny_run_config

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
def analysed(run_dir):
  calls = []
  rows = analyze_run(run_dir, Settings(**SMALL), on_computed=calls.append)
  return rows, calls


ALL_COLLECT = ("resid", "attn", "mlp", "ov", "h")
_APPLY = {}


def _jit_apply(mc):
  """One jitted per-checkpoint forward collecting everything, shared by the tests."""
  if mc not in _APPLY:
    model = Model(mc)
    _APPLY[mc] = jax.jit(lambda p, x: model.forward(p, x, ALL_COLLECT))
  return _APPLY[mc]


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
  rows, _ = analysed
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
  assert "r = head_dim = 16" in meta["variants"]["per"]["ov"]
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

  rows, _ = analysed
  step = 4
  row = next(r for r in rows if r["step"] == step)
  cfg, params, _ = ckpt.load_params(run_dir, step)
  _, final, _ = ckpt.load_params(run_dir, STEPS[-1])
  tc, mc = cfg.train, cfg.model
  ds = make_dataset(cfg.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                    seed=tc.data_seed, workdir=str(run_dir), process_index=0, process_count=1)
  ev = np.concatenate(ds.eval_batches(2))[:12]  # ceil(12 / B=8) = 2 batches
  tr = np.concatenate([ds.train_batch(0), ds.train_batch(1)])[:12]
  apply = _jit_apply(mc)
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


def test_figures_are_valid_pngs(run_dir, analysed, tmp_path):
  import matplotlib.image as mpimg

  from sbjax.analysis import figures

  out = run_dir / "analysis"
  for name in figures.FIGURES.values():
    img = mpimg.imread(out / name)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100, name
  # several runs overlaid (a path and a list of rows)
  rows = read_csv(out / "metrics.csv")
  p1 = figures.plot_loss_anisotropy([out / "metrics.csv", rows], tmp_path / "a.png",
                                    labels=["w32", "w32 again"])
  p2 = figures.plot_kl_uniform([out, rows], tmp_path / "b.png")
  p3 = figures.plot_spectrum_heatmap([out, out / "spectrum.npz"], tmp_path / "c.png")
  for p in (p1, p2, p3):
    assert mpimg.imread(p).ndim == 3


def _same_rows(a, b) -> bool:
  """Rows equal exactly, NaN equal to NaN (a guarded UNC3 is NaN by design)."""
  return [r.keys() for r in a] == [r.keys() for r in b] and all(
      x[k] == y[k] or (x[k] != x[k] and y[k] != y[k]) for x, y in zip(a, b) for k in x)


def test_cache_resume_and_invalidation(run_dir, analysed, tmp_path):
  rows, calls = analysed
  assert sorted(s for c in calls for s in c) == STEPS
  assert calls[0][0] == STEPS[-1]  # the final checkpoint (CKA reference) is computed first
  cache_dir = run_dir / "analysis" / "cache"
  mt = {p.name: p.stat().st_mtime_ns for p in cache_dir.iterdir()}
  # same settings (scheduling-only fields may differ): everything comes from the cache
  again = []
  rows2 = analyze_run(run_dir, Settings(**{**SMALL, "group_size": 2, "batch_sequences": 4}),
                      on_computed=again.append)
  assert again == [] and _same_rows(rows2, rows)
  assert {p.name: p.stat().st_mtime_ns for p in cache_dir.iterdir()} == mt

  # a killed analysis resumes: stop after the first group, then rerun
  out = tmp_path / "killed"
  st = Settings(**{**SMALL, "out_dir": str(out), "figures": False})

  def kill(steps):
    raise KeyboardInterrupt("killed")

  with pytest.raises(KeyboardInterrupt):
    analyze_run(run_dir, st, on_computed=kill)
  assert not (out / "metrics.csv").exists() and len(list((out / "cache").glob("step_*.json"))) == 3
  resumed = []
  rows3 = analyze_run(run_dir, st, on_computed=resumed.append)
  assert sorted(s for c in resumed for s in c) == [2, 4]  # [8, 0, 1] were done
  for a, b in zip(rows3, rows):
    assert a.keys() == b.keys()
    np.testing.assert_allclose([a[k] for k in a], [b[k] for k in a], rtol=1e-5, atol=1e-6)

  # a changed setting invalidates the cache (cheap spectrum-only runs on a copy)
  out2 = tmp_path / "changed"
  shutil.copytree(run_dir / "analysis", out2)
  spec = Settings(groups=("spectrum",), out_dir=str(out2), progress=False, figures=False,
                  group_size=5)
  n = []
  analyze_run(run_dir, spec, on_computed=lambda s: n.append(len(s)))
  assert sum(n) == 5  # the copied entries have another key (other groups)
  n.clear()
  analyze_run(run_dir, spec, on_computed=lambda s: n.append(len(s)))
  assert sum(n) == 0
  r4 = analyze_run(run_dir, spec.replace(w_error_dims=(1, 2)), on_computed=lambda s: n.append(len(s)))
  assert sum(n) == 5 and "head_w_error_4" not in r4[0] and "head_w_error_2" in r4[0]


def test_grouped_forward_equals_per_checkpoint_forward(run_dir):
  cfg = ckpt.load_config(run_dir)
  model = Model(cfg.model)
  plist = [ckpt.load_params(run_dir, s)[1] for s in (0, 4, 8)]
  stacked = forward.stack_params(plist)
  x = jax.random.randint(jax.random.key(0), (12, 32), 0, cfg.model.vocab_size)  # as the samples
  coll = ALL_COLLECT
  scores_g, ex_g = grouped_apply(model, coll)(stacked, x)
  apply = _jit_apply(cfg.model)
  for k, p in enumerate(plist):
    scores, ex = apply(p, x)
    np.testing.assert_allclose(scores_g[k], scores, rtol=1e-5, atol=1e-5)
    for name in coll:
      np.testing.assert_allclose(ex_g[name][k], ex[name], rtol=1e-5, atol=1e-5)
  # the pipeline's reduced forward: NLL / correct sums over the first 5 sequences and the
  # sliced intermediates, from full logits and from the token-chunked loss (no K×B×T×V)
  y = jnp.roll(x, -1, axis=1)
  take = (("h", 2, False), ("mlp", 3, True))
  outs = [forward.make_group_forward(model, take, 5)(stacked, x, y),
          forward.make_group_forward(Model(dataclasses.replace(cfg.model, loss_chunk=7)), take,
                                     5)(stacked, x, y)]
  for k, p in enumerate(plist):
    scores, ex = apply(p, x)
    logp = jax.nn.log_softmax(scores, -1)
    nll = -jnp.take_along_axis(logp, y[..., None], -1)[..., 0]
    correct = (jnp.argmax(logp, -1) == y).astype(jnp.float32)
    for o in outs:
      np.testing.assert_allclose(o["nll"][k], nll[:5].sum(), rtol=1e-5)
      assert float(o["correct"][k]) == float(correct[:5].sum())
      np.testing.assert_allclose(o["h"][k], ex["h"][:2], rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(o["mlp_last"][k], ex["mlp"][:, :3, -1], rtol=1e-5, atol=1e-6)


def test_forward_chunks_pad_only_the_last_and_a_small_sample_is_one_chunk():
  rows = np.arange(12 * 2).reshape(12, 2)
  out = list(forward.padded_chunks(rows, 8))
  assert [(c0, r.shape[0], real) for c0, r, real in out] == [(0, 8, 8), (8, 8, 4)]
  np.testing.assert_array_equal(out[1][1], np.concatenate([rows[8:], np.repeat(rows[8:9], 4, 0)]))
  # fewer rows than a chunk (or n_rows below it): one forward of their own size, unpadded
  assert [(c0, r.shape[0], real) for c0, r, real in forward.padded_chunks(rows, 32)] == [
      (0, 12, 12)]
  assert [(c0, r.shape[0], real) for c0, r, real in forward.padded_chunks(rows, 8, n_rows=5)] == [
      (0, 5, 5)]
  assert forward.chunk_size(32, 8) == 8 and forward.chunk_size(32, 0) == 1


def test_bad_inputs(run_dir, tmp_path):
  """(A missing workdir and an output folder that cannot be written: the bad-input table.)"""
  empty = tmp_path / "empty"
  empty.mkdir()
  with pytest.raises(FileNotFoundError, match=re.escape(str(empty / "config.json"))):
    analyze_run(empty)
  shutil.copy(run_dir / "config.json", empty / "config.json")
  with pytest.raises(FileNotFoundError, match="no checkpoints"):
    analyze_run(empty)
  with pytest.raises(ValueError, match="not checkpointed"):
    analyze_run(run_dir, Settings(**{**SMALL, "steps": (3,)}))
  with pytest.raises(ValueError, match="groups"):
    Settings(groups=("loss", "bogus"))
  with pytest.raises(ValueError, match="cka_tokens"):
    Settings(cka_tokens="first")
