"""experiments.convergence at its test preset (one width on the planted language, checkpoints
0, 1, 2, 4, 8, 16, 24, 32), run once per module. Checked against references written here with
numpy/scipy: the OV-circuit activation per head, CKA-to-final (1 at the final step; biased,
debiased, last and all tokens at a middle step), PER from numpy SVDs of the explicit matrices;
every summary CSV re-read from checkpoints.csv (stabilisation steps, bands, the within-stratum
Spearman, both probe batches at every level); test-e4's pre-registered decision."""

import dataclasses
import json
import math

import jax
import numpy as np
import pytest
import scipy.stats

from experiments import convergence as exp
from experiments.common import read_rows
from experiments.convergence import kernel as M
from sbjax import checkpoint as ckpt
from sbjax import optim
from sbjax.analysis import layerwise
from sbjax.data import make_dataset
from sbjax.experiment.runner import run
from sbjax.model import Model
from tests._metrics_reference import ref_cka_biased, ref_cka_debiased, ref_erank

TEST = exp.PRESETS["test"]
K = TEST.knobs


@pytest.fixture(scope="module")
def out(tmp_path_factory):
  d = tmp_path_factory.mktemp("convergence")
  run(exp.EXPERIMENT, d, "test", verbose=False)
  return d


def _batch(out, cfg):
  """The fixed batch (probe 0), rebuilt as the experiment builds it."""
  ds = make_dataset(exp.configs(TEST)[0][1].data, seq_len=cfg.train.seq_len,
                    global_batch_size=cfg.train.batch_size, seed=cfg.train.data_seed,
                    workdir=str(out / "data"))
  return M.probe_batches(ds, K.n_sequences, 1)[0]


def _curve(rows, col):
  return [r[col] for r in rows]


def _stays(steps, c, level):
  """Reference: the step after the last checkpoint below ``level`` (None if the last is)."""
  below = [i for i, v in enumerate(c) if not v >= level]
  return None if below and below[-1] == len(c) - 1 else steps[below[-1] + 1] if below else steps[0]


def test_layer_tables_reread_from_the_checkpoint_rows(out):
  rows, layers, bands = (read_rows(out / f"{f}.csv") for f in ("checkpoints", "layers", "bands"))
  steps = _curve(rows, "step")
  assert steps == ckpt.list_steps(out / "runs" / "d16") == [0, 1, 2, 4, 8, 16, 24, 32]
  n_layers = TEST.overrides["model.n_layers"]
  assert len(layers) == 2 * n_layers * 4  # kinds x layers x (token mode, estimator)
  for kind in ("mlp", "ov"):
    for t in ("last", "all"):
      for e in ("biased", "debiased"):
        mat = np.array([[r[f"cka0_{kind}_{t}_{e}_{i}"] for i in range(n_layers)] for r in rows])
        got = [[b[f"p{p}"] for p in (10, 25, 50, 75, 90)] for b in bands
               if (b["kind"], b["tokens"], b["estimator"]) == (kind, t, e)]
        np.testing.assert_allclose(got, np.percentile(mat, [10, 25, 50, 75, 90], axis=1).T)
        for layer, v in enumerate(mat.T):
          (row,) = [r for r in layers if (r["kind"], r["layer"], r["tokens"], r["estimator"])
                    == (kind, layer, t, e)]
          assert row["stabilisation_step"] == _stays(steps, v, 0.9)
  sel = [r for r in layers if (r["tokens"], r["estimator"]) == ("last", "biased")]
  stab = read_rows(out / "stabilisation.csv")
  for kind in ("mlp", "ov"):  # 2 layers: Spearman is undefined
    (s,) = [s for s in stab if (s["model"], s["kind"], s["tokens"], s["estimator"], s["per"])
            == ("d16", kind, "last", "biased", "per_weights_final")]
    assert s["n"] == n_layers and math.isnan(s["spearman"]) and math.isnan(s["p_perm"])
  model = read_rows(out / "models.csv")[0]
  assert model["median_stabilisation_frac"] == np.median([r["stabilisation_frac"] for r in sel])
  assert model["final_loss"] == rows[-1]["eval_loss"]
  summary = json.loads((out / "summary.json").read_text())
  cfg = ckpt.load_config(out / "runs" / "d16")
  assert summary["gamma_total"] == {"d16": optim.gamma_total(cfg.train)}


def test_both_probe_batches_at_every_level(out):
  rows, levels = read_rows(out / "checkpoints.csv"), read_rows(out / "stab_levels.csv")
  steps = _curve(rows, "step")
  assert {r["probe"] for r in levels} == {0, 1} and len(levels) == 2 * 2 * 2 * 3
  for r in levels:
    c = _curve(rows, f"cka{int(r['probe'])}_{r['kind']}_last_biased_{int(r['layer'])}")
    assert c[-1] == pytest.approx(1.0, abs=1e-5)
    assert r["stabilisation_step"] == _stays(steps, c, r["level"])
    assert r["stabilisation_frac"] == r["stabilisation_step"] / steps[-1]
  assert not np.allclose(_curve(rows, "cka0_mlp_last_biased_0")[:-1],
                         _curve(rows, "cka1_mlp_last_biased_0")[:-1])  # two different batches


def test_activations_cka_and_per_against_numpy(out):
  """The measured "ov" = Σ_h (LN1(x) W_V,h + b_V,h) W_O,h (block 0, whose input is the
  embedding); the CKA rows equal numpy's CKA of the activations at a middle step; PER equals
  numpy SVDs of fc_out and of W_V,h W_O,h under each convention."""
  wd = out / "runs" / "d16"
  (cfg, final_p, final), (_, mid_p, mid) = ckpt.load_params(wd), ckpt.load_params(wd, 8)
  mc = cfg.model
  batch = _batch(out, cfg)
  acts, _ = M.activations(mc, M.stack([final_p, mid_p], K.group_size)[1], batch, K, 0)
  b, x = final_p["block_0"], np.asarray(final_p["embed"], np.float64)[batch[:, :-1]]
  a = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + mc.ln_eps)
  a = a * np.asarray(b["ln1"]["scale"]) + np.asarray(b["ln1"]["bias"])
  want = sum((a @ np.asarray(b["attn"]["v_kernel"])[:, h] + np.asarray(b["attn"]["v_bias"])[h])
             @ np.asarray(b["attn"]["o_kernel"])[h] for h in range(mc.n_heads))
  np.testing.assert_allclose(acts[("ov", "last")][0, 0], want[:, -1], rtol=1e-4, atol=1e-5)
  rows = {r["step"]: r for r in read_rows(out / "checkpoints.csv")}
  for kind in ("mlp", "ov"):
    for t in ("last", "all"):
      for e in ("biased", "debiased"):
        for layer in range(mc.n_layers):
          col = f"cka0_{kind}_{t}_{e}_{layer}"
          assert rows[final][col] == pytest.approx(1.0, abs=1e-6) and rows[0][col] < 0.99
          cka = ref_cka_debiased if e == "debiased" else ref_cka_biased
          want = cka(*(acts[(kind, t)][j, layer] for j in (1, 0)))
          assert rows[mid][col] == pytest.approx(want, abs=2e-4), col
  for step, p in ((mid, mid_p), (final, final_p)):
    for i in range(mc.n_layers):
      blk = p[f"block_{i}"]
      s2 = np.linalg.svd(np.asarray(blk["mlp"]["fc_out_kernel"], np.float64), compute_uv=False)
      wv, wo = (np.asarray(blk["attn"][k], np.float64) for k in ("v_kernel", "o_kernel"))
      sov = [np.linalg.svd(wv[:, h] @ wo[h], compute_uv=False) for h in range(mc.n_heads)]
      d, hd = mc.d_model, mc.head_dim
      for src, rm, ro in (("weights", d, hd), ("full", d, d), ("head_dim", hd, hd)):
        assert rows[step][f"per_{src}_mlp_{i}"] == pytest.approx(ref_erank(s2[:rm]) / rm, rel=2e-4)
        assert rows[step][f"per_{src}_ov_{i}"] == pytest.approx(
            np.mean([ref_erank(s[:ro]) / ro for s in sov]), rel=2e-4)


def test_gradient_per_of_the_fixed_batch(out):
  """With grad_per, checkpoint j's gradient PER is layer_pers of jax.grad of its own mean NLL
  on the fixed batch (the vmapped group's slot j is checkpoint j)."""
  wd = out / "runs" / "d16"
  cfg, knobs = ckpt.load_config(wd), dataclasses.replace(K, grad_per=True)
  params, batch, mc = [ckpt.load_params(wd, s)[1] for s in (8, 32)], _batch(out, cfg), cfg.model
  rows = M.measure_group(mc, params, [batch], M.references(mc, params[1], [batch], knobs), knobs)
  model = Model(mc)

  def loss(p):
    logp = jax.nn.log_softmax(model.apply(p, batch[:, :-1]), -1)
    return -jax.numpy.take_along_axis(logp, batch[:, 1:, None], -1).mean()

  for row, p in zip(rows, params):
    want = layerwise.layer_pers(p, mc, *M.ranks(mc, knobs)["gradients"], host=True,
                                grads=jax.grad(loss)(p))
    for kind in ("mlp", "ov"):
      np.testing.assert_allclose([row[f"per_gradients_{kind}_{i}"] for i in range(mc.n_layers)],
                                 want[kind], rtol=1e-4)


def test_width_order_and_its_preregistered_decision(tmp_path):
  """test-e4: a run per width and seed; the decision's ρ is scipy's Spearman of the widths and
  the runs' median fractions in stab_levels.csv at the primary cell, its verdict the rule's on
  that CSV; the report prints the rule, the verdict and "not tested here" for the larger class."""
  run(exp.EXPERIMENT, tmp_path, "test-e4", verbose=False)
  runs, levels = read_rows(tmp_path / "runs.csv"), read_rows(tmp_path / "stab_levels.csv")
  assert sorted((r["width"], r["seed"]) for r in runs) == [(16, 0), (16, 1), (32, 0), (32, 1),
                                                           (48, 0), (48, 1)]
  assert len({r["eval_loss"] for r in runs}) == 6  # the seeds train different models
  rule, med = exp.PRESETS["test-e4"].knobs.rule, {}
  for r in (r for r in levels if (r["level"], r["probe"]) == (rule.level, rule.probe)):
    med.setdefault((r["model"], r["width"]), []).append(r["stabilisation_frac"])
  f, d = [np.median(v) for v in med.values()], json.loads((tmp_path / "summary.json").read_text())
  want = scipy.stats.spearmanr([k[1] for k in med], f)[0] if len(set(f)) > 1 else math.nan
  assert d["decision"]["n_runs"] == 6 and d["decision"]["rho"] == pytest.approx(want, nan_ok=True)
  assert d["decision"]["reason"] == exp.decide(rule, levels)["reason"]
  text = exp.report(tmp_path)
  assert d["rule"] in text and f"**{d['decision']['verdict']}** ({d['decision']['reason']})" in text
  assert "parameters; its layers stabilise within 20% of training): not tested here" in text
