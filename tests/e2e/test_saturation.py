"""experiments.saturation and saturation_planted at their test presets, against numpy and the CSVs."""

import json
import math

import jax
import numpy as np
import pytest
from scipy.special import log_softmax

from experiments import saturation
from experiments.common import read_rows
from experiments.saturation import planted
from experiments.saturation import rise as R
from experiments.saturation.planted_measure import window_losses
from experiments.saturation.planted_presets import arm_config
from experiments.saturation.rise_rule import decide
from sbjax import checkpoint as ckpt
from sbjax.analysis.samples import eval_sample
from sbjax.data import make_dataset
from sbjax.experiment.runner import run
from sbjax.model import Model
from tests._corpus import generated_docs, write_corpus

TEXT, PLANTED = saturation.PRESETS["test"], planted.PRESETS["test"]


@pytest.fixture(scope="module")
def text(tmp_path_factory):
  root = tmp_path_factory.mktemp("saturation")
  corpus = write_corpus(root / "corpus", generated_docs(1, 6))
  ctx = run(saturation.EXPERIMENT, root / "out", "test", str(corpus), verbose=False)
  return root / "out", ctx


@pytest.fixture(scope="module")
def arms(tmp_path_factory):
  out = tmp_path_factory.mktemp("saturation_planted") / "out"
  run(planted.EXPERIMENT, out, "test", verbose=False)
  return out


def _rise(steps, mean, total, after=0.3):  # max over s >= after·T of ℓ − its running minimum
  steps, mean = np.asarray(steps), np.asarray(mean)
  return float(np.max((mean - np.minimum.accumulate(mean))[steps >= after * total]))


def test_checkpoints_measured_against_numpy(text):
  out, ctx = text
  group = ctx.groups["d8"]
  wd = ctx.workdirs(group)[0]
  ck = [r for r in read_rows(out / "checkpoints.csv") if r["group"] == "d8"]
  assert [r["step"] for r in ck] == ckpt.list_steps(wd) == [0, 1, 2, 4, 8, 16, 20]
  cfg, params, _ = ckpt.load_params(wd)
  win = eval_sample(group.dataset, TEXT.knobs.eval_sequences)
  logq = log_softmax(np.asarray(jax.jit(Model(cfg.model).apply)(params, win[:, :-1]), float), -1)
  nll = -np.take_along_axis(logq, win[:, 1:, None], -1)[..., 0].mean(-1)
  np.testing.assert_allclose(window_losses(ck)[-1], nll, rtol=1e-5)
  assert ck[-1]["eval_loss"] == pytest.approx(nll.mean(), rel=1e-5)


def test_width_table_from_the_checkpoints(text):
  out, ctx = text
  (r,) = read_rows(out / "saturation_runs.csv")
  wd = ctx.workdirs(ctx.groups["d8"])[0]
  ck = [x for x in read_rows(out / "checkpoints.csv") if x["group"] == "d8"]
  _, params, _ = ckpt.load_params(wd)
  n = sum(int(np.size(x)) for k, v in params.items() if k not in ("embed", "head")
          for x in jax.tree.leaves(v))
  assert (int(r["width"]), int(r["n_nonembedding"])) == (8, n)
  assert int(r["n_with_head"]) == n + sum(int(np.size(x)) for x in
                                          jax.tree.leaves(params["head"]))
  best = min(ck, key=lambda x: x["eval_loss"])
  assert (r["final_eval_loss"], r["best_eval_loss"]) == (ck[-1]["eval_loss"], best["eval_loss"])
  assert bool(r["late_rise"]) == (ck[-1]["eval_loss"] - best["eval_loss"] > TEXT.knobs.rise_tol)
  total = TEXT.overrides["train.steps"]
  assert r["rise_stat"] == pytest.approx(_rise([x["step"] for x in ck],
                                                window_losses(ck).mean(1), total))
  assert r["rise_ci_lo"] <= r["rise_stat"] <= r["rise_ci_hi"] + 1e-12
  fits = read_rows(out / "saturation_fit.csv")  # one width: too few for the law, NaN
  assert [f["fit_on"] for f in fits] == ["final", "best", "final_with_head"]
  assert all(math.isnan(f["A"]) and int(f["n_points"]) == 1 for f in fits)
  assert {int(x["width"]) for x in read_rows(out / "saturation_train_loss.csv")} == {8}


def test_summary_follows_the_table(text):
  out, _ = text
  summary = json.loads((out / "summary.json").read_text())
  for r, s in zip(read_rows(out / "saturation_runs.csv"), summary["widths"]):
    t = TEXT.knobs.rise_threshold
    assert s["rise_verdict"] == ("yes" if r["rise_ci_lo"] >= t else "no" if r["rise_ci_hi"] < t
                                 else "inconclusive")
    assert s["late_rise"] == bool(r["late_rise"]) and s["gap_final_ci"] == "n/a"
  assert summary["scaling"]["verdict"] == "undecided"  # no width below the fit
  text_ = saturation.report(out, "sat")
  assert "Scaling verdict" in text_
  assert "](sat/fig_scaling.png)" in text_ and f"{r['final_eval_loss']:.4f}" in text_


def test_planted_checkpoints_against_numpy(arms):
  arm = PLANTED.knobs.arms[0]
  cfg = arm_config(PLANTED, arm)
  ck = read_rows(arms / "planted_checkpoints.csv")
  assert [r["step"] for r in ck] == ckpt.list_steps(arms / "runs" / arm.name)
  tc = cfg.train
  ds = make_dataset(cfg.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size, seed=0)
  win = eval_sample(ds, PLANTED.knobs.val_windows)
  _, params, _ = ckpt.load_params(arms / "runs" / arm.name)
  logq = log_softmax(np.asarray(jax.jit(Model(cfg.model).apply)(params, win[:, :-1]), float), -1)
  by_window = -(ds.planted.probs[win[:, :-1]] * logq).sum(-1).mean(-1)  # Σ_v P(v|x) −log q(v)
  points = read_rows(arms / "checkpoints.csv")
  np.testing.assert_allclose(window_losses(points)[-1], by_window, rtol=2e-5)
  assert np.all(window_losses(points) >= ds.planted.row_entropy[win[:, :-1]].mean(-1) - 1e-5)


def test_planted_arm_table(arms):
  (a,) = read_rows(arms / "planted_arms.csv")
  points = read_rows(arms / "checkpoints.csv")
  (fl,) = read_rows(arms / "planted_floor.csv")
  total = PLANTED.overrides["train.steps"]
  assert a["rise"] == pytest.approx(_rise([r["step"] for r in points],
                                          window_losses(points).mean(1), total))
  assert fl["floor"] >= fl["H"] and a["floor"] == fl["floor"]
  assert a["gap_to_floor"] == pytest.approx(window_losses(points)[-1].mean() - fl["floor"])
  assert a["checkpoints_used"] == a["checkpoints_saved"] == len(points)
  summary = json.loads((arms / "summary.json").read_text())
  assert summary["arms"][a["arm"]]["rise_verdict"] == a["rise_verdict"]
  assert f"| {a['arm']} |" in planted.report(arms)


def test_width_order_rule_lands_in_summary(tmp_path):
  """``test-e1``: a width's arms train as one population, each arm's null level is its own
  curve's, and summary.json and the report hold the rule's verdict on the arms' table."""
  p = planted.PRESETS["test-e1"]
  run(planted.EXPERIMENT, tmp_path, "test-e1", verbose=False)
  assert sorted(d.name for d in (tmp_path / "runs" / "d16").iterdir()
                if d.is_dir()) == ["member_0", "member_1"]
  arms, points = read_rows(tmp_path / "planted_arms.csv"), read_rows(tmp_path / "checkpoints.csv")
  total, rule = p.overrides["train.steps"], p.knobs.rule
  for a in arms:
    mine = [r for r in points if r["arm"] == a["arm"]]
    null = R.null_level([r["step"] for r in mine], window_losses(mine).mean(1), total,
                        q=rule.null_quantile, n_perm=rule.n_perm, block=rule.block)
    assert (a["rise_null"], a["rise_p"]) == pytest.approx((null["level"], null["p"]))
    assert a["rise_above_null"] == (a["rise"] > null["level"])
  summary = json.loads((tmp_path / "summary.json").read_text())
  assert summary["rule"] == json.loads(json.dumps(decide(arms, rule, p.knobs.ref_weight_decay)))
  assert f"Verdict: **{summary['rule']['verdict']}**" in planted.report(tmp_path)
