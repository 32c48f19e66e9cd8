"""experiments.mos_text at its test presets: matched arms and verdicts against scipy's Welch test."""

import json

import numpy as np
import pytest
from scipy import stats

from experiments import mos_text
from experiments.common import read_rows
from sbjax.experiment.runner import run
from tests._corpus import generated_docs, write_corpus


@pytest.fixture(scope="module")
def out(tmp_path_factory):
  root = tmp_path_factory.mktemp("mos_text")
  corpus = write_corpus(root / "corpus", generated_docs(3, 6))
  run(mos_text.EXPERIMENT, root / "out", "test", str(corpus), verbose=False)
  return root / "out"


def test_arms_and_matching(out):
  rows = read_rows(out / mos_text.CSV)
  k = mos_text.PRESETS["test"].knobs
  assert [(r["arm"], int(r["seed"])) for r in rows] == [(a, s) for a, _ in k.arms for s in k.seeds]
  by = {r["arm"]: r for r in rows}
  v, d, r = int(by["dense"]["vocab"]), int(by["dense"]["d_model"]), int(by["lowrank"]["rank"])
  mos = int(by["mos"]["head_params"])  # lowrank: the rank whose V r + r d is nearest MoS's
  assert all(abs(r * (v + d) - mos) <= abs(q * (v + d) - mos) for q in range(1, d + 1))
  assert int(by["lowrank"]["head_params"]) == r * (v + d)
  assert len({x["eval_loss"] for x in rows if x["arm"] == "mos"}) == len(k.seeds)


def test_verdicts_match_scipy(out):
  rows = read_rows(out / mos_text.CSV)
  summary = json.loads((out / "summary.json").read_text())
  loss = {a: [float(r["eval_loss"]) for r in rows if r["arm"] == a]
          for a in ("mos", "lowrank", "dense")}
  for other, key in (("lowrank", "params"), ("dense", "flops")):
    t = stats.ttest_ind(loss[other], loss["mos"], equal_var=False)
    lo, hi = t.confidence_interval(0.95)
    want = "supported" if lo > 0 else "refuted" if hi < 0 else "undecided"
    assert summary[key]["verdict"] == want
    assert (summary[key]["lo"], summary[key]["hi"]) == pytest.approx((lo, hi), rel=1e-9)
  text = mos_text.report(out, ".")
  assert f"{np.mean(loss['mos']):.4f}" in text and f"{summary['params']['lo']:.4f}" in text


@pytest.fixture(scope="module")
def e3(tmp_path_factory):
  root = tmp_path_factory.mktemp("mos_text_e3")
  corpus = write_corpus(root / "corpus", generated_docs(3, 6))
  return run(mos_text.EXPERIMENT, root / "out", "test-e3", str(corpus), verbose=False)


def test_lr_chosen_on_the_held_out_tail(e3):
  k, cfg = e3.knobs, e3.groups["mos"].configs[0]
  full, (train, held) = e3.dataset(cfg), mos_text.held_out(e3, cfg)
  n, cut = len(full.train_tokens), len(train.train_tokens)
  assert np.array_equal(np.concatenate([train.train_tokens, held.val_tokens]), full.train_tokens)
  assert (n - cut) % full.seq_len == 0 and abs(n - cut - k.select_fraction * n) < full.seq_len
  assert all(len(g.dataset.train_tokens) == cut for g in e3.groups.values())  # trained without
  rows = read_rows(e3.out / mos_text.CSV)
  summary = json.loads((e3.out / "summary.json").read_text())
  for arm, _ in k.arms:
    sel = {lr: np.mean([r["sel_loss"] for r in rows if r["arm"] == arm and r["lr"] == lr])
           for lr in k.lrs}
    assert summary["arms"][arm]["lr"] == min(sel, key=sel.get)


def test_rule_verdict_matches_scipy(e3):
  rows = read_rows(e3.out / mos_text.CSV)
  summary = json.loads((e3.out / "summary.json").read_text())
  chosen = {a: summary["arms"][a]["lr"] for a in ("mos", "lowrank")}
  loss = {a: [r["eval_loss"] for r in rows if r["arm"] == a and r["lr"] == lr]
          for a, lr in chosen.items()}
  lo, hi = stats.ttest_ind(loss["lowrank"], loss["mos"], equal_var=False).confidence_interval(0.95)
  want = "reproduces" if lo > 0 else "refutes" if hi < 0 else "undecided"
  d = summary["decision"]
  assert d["verdict"] == want and (d["lo"], d["hi"]) == pytest.approx((lo, hi), rel=1e-9)
  assert f"Verdict: **{want}**" in mos_text.report(e3.out, ".")
