"""The planted experiment at its test presets: CSVs, floors, report, Fig. 8 and the test-e3 rule."""

import json
import re

import numpy as np
import pytest
from scipy import stats as sps

from experiments import planted as exp
from experiments.common import read_rows
from experiments.planted import fig8, stats
from experiments.planted.configs import mix_configs
from experiments.reproduce import REGISTRY
from sbjax import checkpoint as ckpt
from sbjax.data import make_dataset
from sbjax.experiment import figure
from sbjax.experiment.runner import run
from sbjax.experiment.suite import run_suite
from sbjax.studies.head_flops import head_flops

P = exp.PRESETS["test"]


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
  """The test preset through the suite (report.md, PDF figures), in this process: the command
  line itself runs in tests/e2e/test_wheel_clean_env.py."""
  root = tmp_path_factory.mktemp("suite")
  figure.set_format("pdf")
  try:
    timings = run_suite(REGISTRY, ["planted"], root, "test", verbose=False)
  finally:
    figure.set_format("png")
  return root, timings


def test_knee_and_mixture_csvs(suite):
  out = suite[0] / "planted"
  rows, fits = read_rows(out / exp.CSV_KNEE), read_rows(out / exp.CSV_FLOOR)
  assert [int(r["rank"]) for r in rows] == list(P.knobs.ranks)
  floors = {int(f["rank"]): f["floor"] for f in fits}
  assert set(floors) == set(P.knobs.ranks) | {P.overrides["model.vocab_size"]}
  for r in rows:
    assert r["floor"] == floors[r["rank"]] >= r["H"] - 1e-9
    assert r["gap"] == pytest.approx(r["expected_loss"] - r["H"], abs=1e-12)
  m = read_rows(out / exp.CSV_MIX, text=("label", "arm", "head"))
  assert [v["label"] for v in m] == [label for label, _ in mix_configs(P)]
  mos, low = m[0], m[-1]
  v, r, d = P.overrides["model.vocab_size"], int(low["rank"]), int(low["d_model"])
  assert r == min(d, max(1, round(mos["head_params"] / (v + d))))  # V r + r d nearest MoS's
  assert low["head_params"] == v * r + r * d
  summary = json.loads((out / "summary.json").read_text())
  assert summary["knee"] == stats.knee_checks(rows, summary["k"], P.knobs.tol, P.knobs.margin)[
      "knee"]


def test_report_header_tables_and_figures(suite):
  root, timings = suite
  md_text = (root / "report.md").read_text()
  assert timings["planted"]["status"] == "ok" and "| planted | test | ok |" in md_text
  assert re.search(r"sbjax \S+, commit \S+, jax \S+, device cpu x1, \d{4}-\d\d-\d\d", md_text)
  rows = read_rows(root / "planted" / exp.CSV_KNEE)
  for r in rows:  # the knee table's row equals the CSV at the printed precision
    assert f"| {int(r['rank'])} | {r['eval_loss']:.4f} | {r['eval_acc']:.4f} |" in md_text
  figs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md_text)
  assert len(figs) == 3 and all(f.endswith(".pdf") for f in figs)
  assert all((root / f).read_bytes()[:4] == b"%PDF" for f in figs)


def test_fig8_dense_head_werror_and_the_knee_gaps(suite):
  """The head's W-errors (their formula against numpy: tests/unit/test_target_werror.py) vanish
  from rank d on; the trained gaps are the knee table's."""
  out = suite[0] / "planted"
  rs = [r for r in read_rows(out / fig8.CSV, text=("language", "kind", "head_run"))
        if r["language"] == "language"]
  cfg = ckpt.load_config(out / "runs" / rs[0]["head_run"])
  lang = make_dataset(cfg.data, seq_len=cfg.train.seq_len, global_batch_size=8, seed=0,
                      workdir=None).planted
  assert 0 < rs[0]["head_contexts_seen"] <= lang.n_contexts
  assert all(r["head_werror_centred"] < 1e-5 for r in rs if r["rank"] >= cfg.model.d_model)
  gaps = {r["rank"]: r["gap"] for r in read_rows(out / exp.CSV_KNEE)}
  assert [r["trained_gap"] for r in rs] == pytest.approx(
      [gaps.get(r["rank"], np.nan) for r in rs], nan_ok=True)
  fl = [{"rank": r["rank"], "floor_gap": r["floor_gap"]} for r in rs]
  assert all(np.isnan(r["head_werror_raw"]) for r in fig8.rows({"language": (lang, fl)}, None, {}))


@pytest.fixture(scope="module")
def e3(tmp_path_factory):
  out = tmp_path_factory.mktemp("e3")
  run(exp.EXPERIMENT, out, "test-e3", verbose=False)
  text = ("label", "arm", "head", "lang", "objective", "run")
  return out, read_rows(out / exp.CSV_MIX, text=text), read_rows(out / exp.CSV_FRESH, text=text)


def test_fresh_seeds_at_the_chosen_lr_with_scipy_intervals(e3):
  out, sel, fresh = e3
  k = exp.PRESETS["test-e3"].knobs
  cfg = dict(mix_configs(exp.PRESETS["test-e3"]))
  assert all(r["head_flops"] == head_flops(cfg[r["label"]].model) for r in sel)
  assert all(r["sel_expected_loss"] != r["expected_loss"] for r in sel)  # another stream
  summary = json.loads((out / "summary.json").read_text())
  gaps = {}
  for name in ("mos", "lowrank", "mos-flops"):
    rs = [r for r in sel if r["run"] == name]
    by_lr = {lr: np.mean([r["sel_gap"] for r in rs if r["lr"] == lr]) for lr in k.mix_lrs}
    f = [r for r in fresh if r["run"] == name]
    assert sorted(r["seed"] for r in f) == list(k.fresh_seeds)
    assert {r["lr"] for r in f} == {min(by_lr, key=by_lr.get)}
    gaps[name] = [r["gap"] for r in f]
  for key, name in (("params", "mos"), ("flops", "mos-flops")):
    assert summary["mix"]["mos/sampled"][key] == stats.SAME_SEEDS  # lr chosen on those seeds
    lo, hi = sps.ttest_ind(gaps["lowrank"], gaps[name], equal_var=False).confidence_interval()
    w = summary["fresh"]["cells"]["mos/sampled"][key]
    assert (w["lo"], w["hi"]) == pytest.approx((lo, hi), rel=1e-9)


def test_rule_verdict_from_the_floor_fit(e3):
  out, sel, fresh = e3
  rule = exp.PRESETS["test-e3"].knobs.rule
  fits = read_rows(out / "planted_mix_floor_mos.csv")
  low = [r for r in sel + fresh if r["run"] == "lowrank"]
  floor_gap = next(f["floor"] for f in fits if f["rank"] == low[0]["rank"]) - low[0]["H"]
  mos = [r["gap"] for r in fresh if r["run"] == "mos"]
  below = sum(g < floor_gap for g in mos)
  want = ("undecided" if min(r["gap"] for r in low) < floor_gap - rule.floor_tol else
          "supports" if below == len(mos) >= rule.n_fresh else "refutes" if below == 0
          else "undecided")
  d = json.loads((out / "summary.json").read_text())["fresh"]["decision"]
  assert (d["verdict"], d["below"], d["n"]) == (want, below, len(mos))
  assert d["floor_gap"] == pytest.approx(floor_gap, abs=1e-12)
  assert f"Verdict: **{want}**" in exp.report(out)
