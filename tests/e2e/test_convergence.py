"""Layer convergence (experiments/convergence/, sbjax/studies/convergence.py).

The test preset (one tiny width on the planted language, 8 checkpoints: quick's schedule)
is run once per module; the tests check its outputs against references written out here with
numpy/scipy: the OV-circuit activation per head, CKA-to-final (1 at the final step, and
a middle step), PER from numpy SVDs of the explicit matrices (weights and gradients),
the percentile bands, the per-layer first steps and the correlations; an exported HF
series (fused, head-major QKV) measures the same as the run it came from.
"""

import json
import math
import os
import subprocess
import sys

import jax
import matplotlib.image as mpimg
import numpy as np
import pytest
import scipy.stats

from experiments import convergence as exp
from experiments.shared import REPO
from sbjax import checkpoint as ckpt
from sbjax.analysis import forward, read_csv
from sbjax.studies import convergence as conv
from sbjax.config import ModelConfig

# the test preset has one width: each width costs a train-step compile (~10 s); the
# per-model loops are the same for one or three
TEST = exp.PRESETS["test"]
WIDTHS = TEST.knobs.widths


@pytest.fixture(scope="module")
def out(tmp_path_factory):
  d = tmp_path_factory.mktemp("convergence") / "out"
  exp.run(d, "test", verbose=False)
  exp.report_section(d, "conv")  # draws the figures
  return d


def _batch(out):
  """The fixed batch, rebuilt the way the experiment builds it (first eval windows)."""
  from sbjax.analysis import samples
  from sbjax.data import make_dataset

  cfg = exp.configs("test")[0][1]
  ds = make_dataset(cfg.data, seq_len=cfg.train.seq_len, global_batch_size=cfg.train.batch_size,
                    seed=cfg.train.data_seed, workdir=str(out / "data"))
  return samples.eval_sample(ds, TEST.knobs.n_sequences)


def _np_per(s, r):
  s = np.sort(np.asarray(s, np.float64))[::-1][:r]
  p = s / s.sum()
  p = p[p > 0]
  return math.exp(-(p * np.log(p)).sum()) / r


def _np_cka(x, y, debiased=False):
  x = x - x.mean(0)
  y = y - y.mean(0)
  if not debiased:
    return np.linalg.norm(x.T @ y) ** 2 / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y))
  n = x.shape[0]

  def hsic(k, l):  # Song et al. 2012 unbiased HSIC on Gram matrices with zeroed diagonals
    k, l = k.copy(), l.copy()
    np.fill_diagonal(k, 0)
    np.fill_diagonal(l, 0)
    one = np.ones(n)
    return (np.trace(k @ l) + (one @ k @ one) * (one @ l @ one) / ((n - 1) * (n - 2))
            - 2 / (n - 2) * (one @ k @ l @ one)) / (n * (n - 3))

  k, l = x @ x.T, y @ y.T
  return hsic(k, l) / math.sqrt(hsic(k, k) * hsic(l, l))


def _np_layernorm(x, p, eps):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + eps) * np.asarray(p["scale"]) + np.asarray(p["bias"])


def test_writes_band_figure_and_layer_table(out):
  for name in ("fig_cka_bands.png", "fig_step_vs_per.png"):
    img = mpimg.imread(out / name)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
  layers = read_csv(out / "layers.csv")
  n_layers = TEST.overrides["model.n_layers"]
  assert len(layers) == len(WIDTHS) * 2 * n_layers * 4  # widths x kinds x layers x combos
  assert {r["model"] for r in layers} == {f"d{w}" for w in WIDTHS}
  md = (out / "layers.md").read_text()
  assert md.count("\n| d") == len(WIDTHS) * 2 * n_layers
  for w in WIDTHS:  # the log schedule plus evenly spaced steps, 0 .. 32
    steps = ckpt.list_steps(out / "runs" / f"d{w}")
    assert steps == [0, 1, 2, 4, 8, 16, 24, 32]
  section = exp.report_section(out, "conv")
  assert section.startswith("## convergence")
  assert "![CKA-to-final percentile bands](conv/fig_cka_bands.png)" in section
  models = read_csv(out / "models.csv")
  for m in models:  # the summary table's numbers come from models.csv
    assert f"| {m['model']} | {int(m['width'])} |" in section
    assert f"{100 * m['share_by_paper_frac']:.0f}%" in section
  assert "20%" in section and ("agrees" in section or "NOT" in section)


def test_first_steps_bands_and_correlations_from_csv(out):
  """layers.csv / bands.csv / correlations.csv recomputed here from the long cka.csv."""
  layers = read_csv(out / "layers.csv")
  bands = read_csv(out / "bands.csv")
  for w in WIDTHS:
    cka = read_csv(out / "measure" / f"d{w}" / "cka.csv")
    for kind in ("mlp", "ov"):
      sel = [r for r in cka if r["kind"] == kind and r["tokens"] == "last"
             and r["estimator"] == "biased"]
      steps = sorted({r["step"] for r in sel})
      mat = np.array([[r["cka"] for r in sorted((r for r in sel if r["step"] == s),
                                                 key=lambda r: r["layer"])] for s in steps])
      q = np.percentile(mat, [10, 25, 50, 75, 90], axis=1).T
      got = np.array([[b[f"p{p}"] for p in (10, 25, 50, 75, 90)] for b in bands
                      if b["model"] == f"d{w}" and b["kind"] == kind and b["tokens"] == "last"
                      and b["estimator"] == "biased"])
      np.testing.assert_allclose(got, q, rtol=1e-12)
      for layer in range(mat.shape[1]):
        v = mat[:, layer]
        first = next(s for s, x in zip(steps, v) if x >= 0.9 * v[-1])
        stays = next(s for i, s in enumerate(steps) if all(v[i:] >= 0.9 * v[-1]))
        row = [r for r in layers if r["model"] == f"d{w}" and r["kind"] == kind
               and r["layer"] == layer and r["tokens"] == "last" and r["estimator"] == "biased"]
        assert len(row) == 1 and row[0]["first_step"] == first and row[0]["stable_step"] == stays
        absolute = next(s for i, s in enumerate(steps) if all(v[i:] >= 0.9))  # CKA stays >= 0.9
        assert row[0]["stabilisation_step"] == absolute
  corr = read_csv(out / "correlations.csv")
  sel = [r for r in layers if r["tokens"] == "last" and r["estimator"] == "biased"]
  x = [r["first_frac"] for r in sel]
  y = [r["per_weights_final"] for r in sel]
  row = [c for c in corr if c["model"] == "all" and c["kind"] == "all" and c["tokens"] == "last"
         and c["estimator"] == "biased" and c["y"] == "per_weights_final"][0]
  assert row["n"] == len(sel)
  assert row["pearson"] == pytest.approx(scipy.stats.pearsonr(x, y)[0], abs=1e-9)
  assert row["spearman"] == pytest.approx(scipy.stats.spearmanr(x, y)[0], abs=1e-9)
  # Spearman(PER, stabilisation step) within each model and kind, and the stratified row
  stab = read_csv(out / "stabilisation.csv")
  for w in WIDTHS:
    for kind in ("mlp", "ov"):
      lay = [r for r in sel if r["model"] == f"d{w}" and r["kind"] == kind]
      srow = [c for c in stab if c["model"] == f"d{w}" and c["kind"] == kind
              and c["tokens"] == "last" and c["estimator"] == "biased"
              and c["per"] == "per_weights_final"][0]
      px, sy = [r["per_weights_final"] for r in lay], [r["stabilisation_step"] for r in lay]
      if len(lay) < 3 or len(set(px)) < 2 or len(set(sy)) < 2:  # undefined: fewer than 3 layers
        assert math.isnan(srow["spearman"]) and math.isnan(srow["p_perm"])
      else:
        assert srow["spearman"] == pytest.approx(scipy.stats.spearmanr(px, sy)[0], abs=1e-9)
  assert any(c["model"] == "stratified" for c in stab)


def test_ov_activation_and_cka_against_numpy(out):
  """Model's "ov" = sum_h (LN1(x) W_V,h + b_V,h) W_O,h, per head in numpy (block 0, whose
  input is the embedding); CKA-to-final is 1 at the final step and equals numpy CKA
  (biased, debiased; last and all tokens) at a middle step."""
  w = WIDTHS[0]
  wd = out / "runs" / f"d{w}"
  cfg, final_p, final = ckpt.load_params(wd)
  _, mid_p, mid = ckpt.load_params(wd, 8)
  mc = cfg.model
  batch = _batch(out)
  inputs = batch[:, :-1]
  # the experiment's compiled forward (sbjax.analysis.forward): K checkpoints, chunks of c
  # sequences, both token modes, the NLL of the chunk
  k, c = TEST.knobs.group_size, TEST.knobs.chunk
  assert batch.shape[0] == c
  stacked = jax.tree.map(lambda *xs: np.stack(xs), *([final_p, mid_p] * (k // 2)))
  take = (("mlp", c, True), ("ov", c, True), ("mlp", c, False), ("ov", c, False))
  o = jax.device_get(forward.cached_forward(mc, take, c)(stacked, inputs, batch[:, 1:]))
  mlp, ov = o["mlp"], o["ov"]
  acts = {"final": {"mlp": mlp[0], "ov": ov[0]}, "mid": {"mlp": mlp[1], "ov": ov[1]}}

  b = final_p["block_0"]
  a = _np_layernorm(np.asarray(final_p["embed"], np.float64)[inputs], b["ln1"], mc.ln_eps)
  want = np.zeros(a.shape)
  for h in range(mc.n_heads):
    v_h = a @ np.asarray(b["attn"]["v_kernel"])[:, h, :] + np.asarray(b["attn"]["v_bias"])[h]
    want += v_h @ np.asarray(b["attn"]["o_kernel"])[h]
  np.testing.assert_allclose(acts["final"]["ov"][0], want, rtol=1e-4, atol=1e-5)

  cka = read_csv(out / "measure" / f"d{w}" / "cka.csv")
  at_final = [r["cka"] for r in cka if r["step"] == final]
  assert len(at_final) == 2 * mc.n_layers * 4
  np.testing.assert_allclose(at_final, 1.0, atol=1e-6)
  assert min(r["cka"] for r in cka if r["step"] == 0) < 0.99
  n_all = TEST.knobs.all_sequences
  for r in (r for r in cka if r["step"] == mid):
    x, y = acts["mid"][r["kind"]][int(r["layer"])], acts["final"][r["kind"]][int(r["layer"])]
    if r["tokens"] == "last":
      x, y = x[:, -1], y[:, -1]
    else:
      x, y = x[:n_all].reshape(-1, mc.d_model), y[:n_all].reshape(-1, mc.d_model)
    want = _np_cka(np.float64(x), np.float64(y), r["estimator"] == "debiased")
    assert r["cka"] == pytest.approx(want, abs=2e-4), r


def test_per_against_numpy_svd(out):
  """PER of fc_out and the mean over heads of PER(W_V,h W_O,h) (explicit D x D products,
  numpy SVD) equal per.csv, with r = min(F, D) and head_dim."""
  w = WIDTHS[0]
  wd = out / "runs" / f"d{w}"
  per = read_csv(out / "measure" / f"d{w}" / "per.csv")
  step = 16
  cfg, p, _ = ckpt.load_params(wd, step)
  mc = cfg.model
  for i in range(mc.n_layers):
    b = p[f"block_{i}"]
    w2 = np.asarray(b["mlp"]["fc_out_kernel"])
    wv = np.asarray(b["attn"]["v_kernel"], np.float64)
    wo = np.asarray(b["attn"]["o_kernel"], np.float64)
    want = {
        "mlp": _np_per(np.linalg.svd(w2, compute_uv=False), min(w2.shape)),
        "ov": np.mean([_np_per(np.linalg.svd(wv[:, h] @ wo[h], compute_uv=False), mc.head_dim)
                       for h in range(mc.n_heads)])}
    for kind, v in want.items():
      row = [r for r in per if r["step"] == step and r["layer"] == i and r["kind"] == kind
             and r["source"] == "weights"]
      assert len(row) == 1 and row[0]["r"] == (w if kind == "mlp" else mc.head_dim)
      assert row[0]["per"] == pytest.approx(v, rel=2e-4), (kind, i)
  meta = json.loads((out / "measure" / f"d{w}" / "meta.json").read_text())
  assert meta["per_r"] == {"mlp": w, "ov": mc.head_dim, "grad_mlp": w, "grad_ov": 2 * mc.head_dim}
  # both PER conventions of the same run (per_variants.csv -> layers.csv) at the final step
  final = max(r["step"] for r in per)
  _, p, _ = ckpt.load_params(wd, final)
  layers = [r for r in read_csv(out / "layers.csv") if r["model"] == f"d{w}"
            and r["tokens"] == "last" and r["estimator"] == "biased"]
  for i in range(mc.n_layers):
    b = p[f"block_{i}"]
    s2 = np.linalg.svd(np.asarray(b["mlp"]["fc_out_kernel"], np.float64), compute_uv=False)
    wv = np.asarray(b["attn"]["v_kernel"], np.float64)
    wo = np.asarray(b["attn"]["o_kernel"], np.float64)
    sov = [np.linalg.svd(wv[:, h] @ wo[h], compute_uv=False) for h in range(mc.n_heads)]
    want = {("mlp", "full"): _np_per(s2, min(s2.size, w)),
            ("mlp", "head_dim"): _np_per(s2, mc.head_dim),
            ("ov", "full"): np.mean([_np_per(s, w) for s in sov]),
            ("ov", "head_dim"): np.mean([_np_per(s, mc.head_dim) for s in sov])}
    for (kind, variant), v in want.items():
      row = [r for r in layers if r["layer"] == i and r["kind"] == kind]
      assert len(row) == 1 and row[0][f"per_{variant}_final"] == pytest.approx(v, rel=2e-4)


def test_gradient_per_against_numpy_svd():
  """layer_pers(grads=): PER of dL/d fc_out and of G_h = gV_h W_O,h + W_V,h gO_h (explicit
  D x D, numpy SVD, r = 2 head_dim), on random weights and gradients (D=12, H=3, F=48)."""
  mc = ModelConfig(vocab_size=16, d_model=12, n_layers=2, n_heads=3, rotary_pct=0.5)
  rng = np.random.default_rng(0)
  shapes = {"mlp": {"fc_out_kernel": (48, 12)}, "attn": {"v_kernel": (12, 3, 4),
                                                         "o_kernel": (3, 4, 12)}}
  rand = lambda: {f"block_{i}": jax.tree.map(lambda s: rng.normal(size=s), shapes,  # noqa: E731
                                             is_leaf=lambda x: isinstance(x, tuple))
                  for i in range(2)}
  params, grads = rand(), rand()
  got = conv.layer_pers(params, mc, conv.ConvergenceSettings(), grads=grads)
  got_w = conv.layer_pers(params, mc, conv.ConvergenceSettings())
  for i in range(2):
    b, g = params[f"block_{i}"], grads[f"block_{i}"]
    wv, wo = b["attn"]["v_kernel"], b["attn"]["o_kernel"]
    gv, go = g["attn"]["v_kernel"], g["attn"]["o_kernel"]
    heads = [_np_per(np.linalg.svd(gv[:, h] @ wo[h] + wv[:, h] @ go[h], compute_uv=False), 8)
             for h in range(3)]
    np.testing.assert_allclose(got["ov_heads"][i], heads, rtol=1e-5)
    assert got["ov"][i] == pytest.approx(np.mean(heads), rel=1e-5)
    assert got["mlp"][i] == pytest.approx(
        _np_per(np.linalg.svd(g["mlp"]["fc_out_kernel"], compute_uv=False), 12), rel=1e-5)
    heads_w = [_np_per(np.linalg.svd(wv[:, h] @ wo[h], compute_uv=False), 4) for h in range(3)]
    np.testing.assert_allclose(got_w["ov_heads"][i], heads_w, rtol=1e-5)


def test_hf_series_with_fused_qkv_measures_the_same(out, tmp_path):
  """Export three checkpoints as GPT-NeoX revisions (fused, head-major QKV), measure the
  series: the per-head OV PER and the CKA rows equal those of the run."""
  from sbjax.convert.hf_export import export_hf

  w = WIDTHS[0]
  wd = out / "runs" / f"d{w}"
  for s in (0, 8, 32):
    cfg, p, _ = ckpt.load_params(wd, s)
    export_hf(cfg.model, p, str(tmp_path / "series" / f"step{s}"))
  np.save(tmp_path / "batch.npy", _batch(out))
  src = conv.series_source(tmp_path / "series")
  assert src.steps == [0, 8, 32]
  settings = exp.settings_for("test")  # the run's settings: its compiled shapes are reused
  cka, per, _ = conv.measure(src, np.load(tmp_path / "batch.npy"), settings)
  run_cka = {(r["step"], r["kind"], r["layer"], r["tokens"], r["estimator"]): r["cka"]
             for r in read_csv(out / "measure" / f"d{w}" / "cka.csv")}
  for r in cka:
    assert r["cka"] == pytest.approx(run_cka[(r["step"], r["kind"], r["layer"], r["tokens"],
                                              r["estimator"])], abs=1e-4)
  run_per = {(r["step"], r["kind"], r["layer"]): r["per"]
             for r in read_csv(out / "measure" / f"d{w}" / "per.csv") if r["source"] == "weights"}
  for r in per:
    assert r["per"] == pytest.approx(run_per[(r["step"], r["kind"], r["layer"])], rel=1e-5)


def test_summary_functions_on_synthetic_data():
  steps = [0, 1, 2, 4, 8, 16]
  v = [0.1, 0.95, 0.5, 0.92, 0.99, 1.0]
  assert conv.first_step_reaching(steps, v, 0.9) == 1
  assert conv.stable_step(steps, v, 0.9) == 4
  assert conv.first_step_reaching(steps, [0.1] * 5 + [0.2], 0.9) == 16
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=30), rng.normal(size=30)
  y[:5] = y[5]  # ties
  assert conv.pearson(x, y) == pytest.approx(scipy.stats.pearsonr(x, y)[0], abs=1e-12)
  assert conv.spearman(x, y) == pytest.approx(scipy.stats.spearmanr(x, y)[0], abs=1e-12)
  assert math.isnan(conv.pearson([1.0, 1.0], [2.0, 3.0]))
  m = rng.random((7, 5))
  np.testing.assert_allclose(conv.percentile_bands(m),
                             np.stack([np.percentile(r, [10, 25, 50, 75, 90]) for r in m]))


def test_presets_and_bad_inputs(tmp_path):
  from sbjax.checkpoint import checkpoint_steps, log_spaced_steps

  for preset in ("cpu", "tpu"):
    cfgs = exp.configs(preset)
    assert len(cfgs) >= 3 and len({c.model.d_model for _, c in cfgs}) == len(cfgs)
    for _, c in cfgs:
      steps = checkpoint_steps(c.train)
      even = [s for s in steps if s and s % c.train.ckpt_every == 0]
      assert len(even) >= 20 and log_spaced_steps(c.train)[-1] == 512
  test, quick = exp.configs("test"), exp.configs("quick")
  assert len(test) < len(quick) and test[0][1].train == quick[0][1].train
  tpu = exp.configs("tpu")
  assert [c.model.d_model for _, c in tpu] == [512, 768, 1024]
  assert tpu[0][1].data.source == "tfds" and tpu[-1][1].model.n_layers == 24
  exp.settings_for("tpu")  # validates
  with pytest.raises(ValueError, match="series_tokens"):
    exp.run(tmp_path / "x", "quick", series=[str(tmp_path)])
  with pytest.raises(ValueError, match="unknown convergence preset 'huge'"):
    exp.configs("huge")
  with pytest.raises(ValueError, match="token_modes"):
    conv.ConvergenceSettings(token_modes=("first",))
  with pytest.raises(ValueError, match="n_sequences"):
    conv.ConvergenceSettings(n_sequences=3)


def test_cli_rerun_skips_finished_work(out):
  """python -m experiments.convergence on the finished output: no training, no measurement
  again; section.md and the JSON summary are written."""
  keep = [out / "measure" / f"d{w}" / "cka.csv" for w in WIDTHS] + [
      out / "runs" / f"d{w}" / "DONE" for w in WIDTHS]
  before = [p.stat().st_mtime_ns for p in keep]
  r = subprocess.run([sys.executable, "-m", "experiments.convergence", "--preset=test",
                      f"--out={out}"], cwd=REPO, capture_output=True, text=True, timeout=300,
                     env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert r.returncode == 0, r.stderr[-2000:]
  assert json.loads(r.stdout.strip().splitlines()[-1])["preset"] == "test"
  assert (out / "section.md").read_text().startswith("## convergence")
  assert [p.stat().st_mtime_ns for p in keep] == before
