"""The planted arms of the saturation experiment (`test-planted`): one arm (d, λ) trained on
the planted mixture, measured per checkpoint; Γ, the Rao-Blackwellised expected loss, the
floors and the per-arm readout checked against independent recomputations."""

import struct

import jax
import numpy as np
import pytest

from experiments.saturation import planted_measure as pm
from experiments.saturation.planted_presets import arm_config, get_planted_preset
from experiments.saturation.planted_report import PLANTED_FIGS, report_section
from experiments.saturation.planted_run import run_planted, validation_windows
from experiments.shared import read_rows
from sbjax import checkpoint as ckpt
from sbjax import heads
from sbjax import optim
from sbjax.data import make_dataset
from sbjax.model import Model
from sbjax.studies import rise as rise_lib

P = get_planted_preset("test-planted")


@pytest.fixture(scope="module")
def done(tmp_path_factory):
  out = tmp_path_factory.mktemp("sat_planted")
  meta = run_planted(out, "test-planted", verbose=False)
  return out, meta, report_section(out, ".")


def test_checkpoints_gamma_and_expected_loss(done):
  out, _, _ = done
  ck = read_rows(out / "planted_checkpoints.csv")
  for arm in P.knobs.arms:
    cfg = arm_config(P, arm)
    rows = [r for r in ck if r["arm"] == arm.name]
    wd = out / "runs" / arm.name
    assert [int(r["step"]) for r in rows] == ckpt.list_steps(wd)
    tc = cfg.train  # the warm-up + cosine schedule written out in numpy
    t = np.arange(tc.steps, dtype=np.float64)
    w = tc.warmup_steps
    cos = tc.lr * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * (t - w) / (tc.steps - w))))
    eta = np.where(t < w, tc.lr * t / max(w, 1), cos)
    ref = arm.weight_decay * np.concatenate([[0.0], np.cumsum(eta)])
    np.testing.assert_allclose([r["gamma"] for r in rows], ref[[int(r["step"]) for r in rows]],
                               rtol=1e-5, atol=1e-12)
  # the expected loss of the last checkpoint of arm 0, by hand: Σ_v P(v|x_t) (−log q_t(v))
  cfg = arm_config(P, P.knobs.arms[0])
  ds = make_dataset(cfg.data, seq_len=cfg.train.seq_len, global_batch_size=cfg.train.batch_size,
                    seed=0, workdir=None)
  win = validation_windows(ds, P.knobs.val_windows)
  _, params, _ = ckpt.load_params(out / "runs" / P.knobs.arms[0].name)
  logq = np.asarray(jax.nn.log_softmax(Model(cfg.model).apply(params, win[:, :-1]), -1), np.float64)
  by_window = -(ds.planted.probs[win[:, :-1]] * logq).sum(-1).mean(-1)
  with np.load(out / "runs" / P.knobs.arms[0].name / "planted_windows.npz") as z:
    losses = z["expected_loss_KxW"]
  np.testing.assert_allclose(losses[-1], by_window, rtol=2e-5)
  # the W-error columns of the last checkpoint: numpy SVDs of W and (I − 11ᵀ/V) W
  w = np.asarray(heads.head_matrix(params, cfg.model), np.float64)  # V x d
  last = [r for r in read_rows(out / "planted_checkpoints.csv")
          if r["arm"] == P.knobs.arms[0].name][-1]
  for kind, m in (("raw", w), ("centred", w - w.mean(0))):
    s = np.linalg.svd(m, compute_uv=False)
    for r in pm.W_ERROR_DIMS:
      want = np.sqrt((s[r:] ** 2).sum() / (s ** 2).sum())
      assert last[f"w_error_{kind}_{r}"] == pytest.approx(want, rel=1e-4, abs=1e-6)
  # Gibbs: never below the entropy of the same positions
  h = ds.planted.row_entropy[win[:, :-1]].mean(-1)
  assert np.all(losses >= h[None, :] - 1e-5)


def test_arm_table(done):
  out, meta, section = done
  arms = read_rows(out / "planted_arms.csv")
  floors = {int(r["rank"]): r for r in read_rows(out / "planted_floor.csv")}
  assert [a["arm"] for a in arms] == [a.name for a in P.knobs.arms]
  assert floors[8]["floor"] >= floors[8]["H"] and floors[8]["converged"] in (0, 1, True, False)
  for a, arm in zip(arms, P.knobs.arms):
    with np.load(out / "runs" / arm.name / "planted_windows.npz") as z:
      steps, losses = z["steps"], z["expected_loss_KxW"]
    assert a["rise"] == pytest.approx(
        rise_lib.rise_statistic(steps, losses.mean(1), P.overrides["train.steps"]))
    assert a["rise_verdict"] in rise_lib.VERDICTS and a["rise_ci_lo"] <= a["rise_ci_hi"]
    assert a["floor"] == pytest.approx(floors[arm.d]["floor"])
    assert a["gap_to_floor"] == pytest.approx(losses[-1].mean() - a["floor"])
    assert a["gamma_total"] == pytest.approx(optim.gamma_total(arm_config(P, arm).train))
  assert meta["account"] == pm.account(arms)
  for f in PLANTED_FIGS.values():
    b = (out / f).read_bytes()
    assert b[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", b[16:24])[0] > 100
  assert "| d8-wd0.03 | 8 | 0.03 |" in section and f"account: {meta['account']}" in section
  assert "Supported here:" in section and "Not reproduced on this language" in section


def test_account_rules():
  def arm(d, g, v):
    return {"d": d, "gamma_total": g, "rise_verdict": v}
  grid = [(8, 7.9), (16, 7.9), (64, 7.9), (8, 2.4), (64, 2.4)]
  assert pm.account([arm(d, g, "yes" if d <= 16 else "no") for d, g in grid]) == "width"
  assert pm.account([arm(d, g, "yes" if g > 5 else "no") for d, g in grid]) == "gamma"
  assert pm.account([arm(d, g, "no") for d, g in grid]) == "neither"
  assert pm.account([arm(d, g, "yes" if d == 64 else "no") for d, g in grid]) == "mixed"
  assert pm.account([arm(8, 7.9, "inconclusive"), arm(64, 2.4, "no")]) == "inconclusive"
