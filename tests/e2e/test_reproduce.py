"""experiments.reproduce and the planted experiment end to end: the registry, selection, a
real (tiny) planted run at its ``test`` preset (2 knee runs + 2 mixture runs, a V=32
language) whose CSVs are checked against the floor fits and the meta record and whose report
tables are parsed back and compared with the CSVs, a rerun that trains nothing, and a second
experiment (saturation, `test` preset) added to that report by another ``--only`` run. (The
planted checks were tests/e2e/test_planted_e2e.py, which trained the same preset again.)

The planted science check (knee at k + 1) needs the quick preset's scale (minutes of CPU); it
is what ``python -m experiments.reproduce --quick`` reports, not a test here."""

import csv
import json
import os
import re
import shutil
import subprocess
import sys

import matplotlib.image as mpimg
import pytest

from experiments import planted as exp
from experiments import reproduce
from experiments import shared
from experiments.saturation.planted_presets import PLANTED_PRESETS
from tests._corpus import generated_docs, write_corpus

MINE = ["saturation", "collapse", "convergence"]
P = exp.PRESETS["test"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
  out = tmp_path_factory.mktemp("repro")
  preset = "test"
  timings = reproduce.run_all(out, reproduce.select("planted", quick=True), preset,
                              verbose=False)
  return out, timings, (out / "report.md").read_text(), preset


@pytest.fixture(scope="module")
def out(report):
  """The planted experiment's directory of the reproduce run."""
  return report[0] / "planted"


def _csv(path):
  with open(path) as f:
    return list(csv.DictReader(f))


def _tables(md: str) -> list[list[list[str]]]:
  """Markdown tables as lists of rows of cells (header, separator, body)."""
  tables, cur = [], None
  for line in md.splitlines():
    if line.startswith("|"):
      cells = [c.strip() for c in line.strip().strip("|").split("|")]
      if cur is None:
        cur = [cells]
      else:
        cur.append(cells)
    elif cur is not None:
      tables.append(cur)
      cur = None
  if cur is not None:
    tables.append(cur)
  return tables


def _same(cell: str, value: str) -> bool:
  """A report cell equals the CSV value at the cell's printed precision."""
  if cell == "–":
    return value in ("nan", "")
  try:
    v = float(value)
  except ValueError:
    return cell == value
  if value in ("True", "False"):
    return cell == value
  decimals = len(cell.split(".")[1]) if "." in cell else 0
  return abs(float(cell) - v) <= 0.5 * 10 ** -decimals + 1e-12


def test_report_tables_equal_csvs(report):
  out, timings, md, preset = report
  assert timings["planted"]["status"] == "ok", timings
  tables = {tuple(t[0]): t[2:] for t in _tables(md)}
  knee_cols = ("rank", "eval_loss", "eval_acc", "expected_loss", "floor", "H", "gap", "floor_gap")
  rows = _csv(out / "planted" / "planted.csv")
  body = tables[knee_cols]
  assert len(body) == len(rows) >= 2
  for cells, row in zip(body, rows):
    for c, name in zip(cells, knee_cols):
      assert _same(c, row[name]), (name, c, row[name])
  mix_cols = ("label", "head", "d_model", "rank", "n_mix", "head_params", "lr", "expected_loss",
              "floor", "H", "gap")
  mrows = _csv(out / "planted" / "planted_mix.csv")
  body = tables[mix_cols]
  assert len(body) == len(mrows) >= 2
  for cells, row in zip(body, mrows):
    for c, name in zip(cells, mix_cols):
      assert _same(c, row[name]), (name, c, row[name])
  # the floor column is the exact floor of the language, and H its entropy
  fl = {int(r["rank"]): float(r["floor"]) for r in _csv(out / "planted" / "planted_floor.csv")}
  for row in rows:
    assert float(row["floor"]) == fl[int(row["rank"])]
    assert float(row["floor"]) >= float(row["H"]) - 1e-9
  # timing table
  assert tables[("experiment", "preset", "status", "seconds")][0][:3] == ["planted", preset, "ok"]


def test_report_figures_open(report):
  out, _, md, _ = report
  figs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
  assert len(figs) == 3  # the knee, the mixture and the exact Fig. 8
  for rel in figs:
    img = mpimg.imread(out / rel)
    assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50


def test_rerun_skips_finished_runs(report):
  out, _, _, _ = report
  runs = out / "planted" / "runs"
  marks = ("result.json", "DONE")  # a run's cached result / finished mark
  before = {p: p.stat().st_mtime_ns for p in runs.rglob("*") if p.name in marks}
  exp.run(out / "planted", "test", verbose=False)
  after = {p: p.stat().st_mtime_ns for p in runs.rglob("*") if p.name in marks}
  # one workdir per knee run and per mixture arm (a population: one member dir per lr × seed)
  knee, mix = _csv(out / "planted" / "planted.csv"), _csv(out / "planted" / "planted_mix.csv")
  n_dirs = len(knee) + len({r["arm"] for r in mix})
  assert before == after and len(before) >= len(knee) + len(mix)
  assert n_dirs == len(list(runs.iterdir())) >= 4


def test_knee_csv_follows_the_floor_fits(out):
  rows = _csv(out / "planted.csv")
  assert list(rows[0]) == ["rank", "eval_loss", "eval_acc", "expected_loss", "floor", "H", "gap",
                           "floor_gap"]
  assert [int(r["rank"]) for r in rows] == list(P.knobs.ranks)
  fits = {int(r["rank"]): r for r in _csv(out / "planted_floor.csv")}
  assert set(fits) == set(P.knobs.ranks) | {P.overrides["model.vocab_size"]}
  for r in rows:
    h, fl = float(r["H"]), float(r["floor"])
    assert fl == float(fits[int(r["rank"])]["floor"]) and fl >= h - 1e-9
    assert float(r["gap"]) == pytest.approx(float(r["expected_loss"]) - h, abs=1e-12)
    assert float(r["floor_gap"]) == pytest.approx(fl - h, abs=1e-12)
    assert 0.0 <= float(r["eval_acc"]) <= 1.0
  assert all(f["converged"] in ("True", "False") for f in fits.values())
  # the cached measurement of each run is the one in the CSV
  for r in rows:
    res = json.loads((out / "runs" / f"r{int(r['rank'])}" / "result.json").read_text())
    assert float(r["expected_loss"]) == res["expected_loss"]


def test_mixture_csv_and_matched_rank(out):
  m = _csv(out / "planted_mix.csv")
  assert [v["label"] for v in m] == [label for label, _ in exp.mix_configs(P)]
  assert len(m) == len(P.knobs.mix_runs) * len(P.knobs.mix_seeds) >= 4  # populations of seeds
  assert {float(v["lr"]) for v in m} == {P.overrides["train.lr"]}
  for arm in {v["arm"] for v in m}:  # one population per arm, on the Rao-Blackwellised loss
    members = sorted((out / "runs" / f"mix-{arm}").glob("member_*/config.json"))
    assert len(members) == len(P.knobs.mix_seeds)
    assert {json.loads(c.read_text())["train"]["objective"] for c in members} == {"expected"}
  mos, low = m[0], m[-1]
  assert mos["head"] == "mos" and int(mos["n_mix"]) == P.knobs.mix_runs[0][3]
  assert mos["floor"] == "nan" and low["head"] == "lowrank"
  vocab = P.overrides["model.vocab_size"]
  assert int(low["rank"]) == exp.matched_rank(int(mos["head_params"]), vocab, int(low["d_model"]))
  r, d = int(low["rank"]), int(low["d_model"])
  assert int(low["head_params"]) == vocab * r + r * d
  meta = json.loads((out / "planted_meta.json").read_text())
  assert meta["preset"] == "test" and meta["mixture"] is not None
  assert meta["settings"]["k"] == P.overrides["data.options.rank"]
  assert meta["settings"]["ranks"] == list(P.knobs.ranks)


def test_report_tables_equal_csvs_and_figures_open(out):
  md = exp.report_section(out, "pl")
  assert md.startswith("## planted: the exact floor and the knee")
  tables = {tuple(t[0]): t[2:] for t in _tables(md)}
  for name, cols in (("planted.csv", ("rank", "eval_loss", "eval_acc", "expected_loss", "floor",
                                      "H", "gap", "floor_gap")),
                     ("planted_mix.csv", ("label", "head", "d_model", "rank", "n_mix",
                                          "head_params", "lr", "expected_loss", "floor", "H",
                                          "gap"))):
    rows, body = _csv(out / name), tables[cols]
    assert len(body) == len(rows)
    for cells, row in zip(body, rows):
      for c, col in zip(cells, cols):
        assert _same(c, row[col]), (name, col, c, row[col])
  s = exp.summarize(out)
  assert f"Knee (smallest r with loss − H ≤ {s['tol']}): **" in md
  figs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
  assert figs == ["pl/fig_planted_knee.png", "pl/fig_planted_mix.png", "pl/fig_planted_fig8.png"]
  for rel in figs:
    img = mpimg.imread(out / rel.split("/", 1)[1])
    assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50


@pytest.fixture(scope="module")
def combined_report(report, tmp_path_factory):
  """A second experiment added to the planted report with another ``--only`` run: the
  saturation `test` preset (the cheapest; each experiment's own e2e file runs and checks
  its `test` preset, so this fixture checks only that the sections combine)."""
  root = tmp_path_factory.mktemp("repro_more")
  out = root / "out"
  shutil.copytree(report[0], out)
  mp = pytest.MonkeyPatch()
  try:  # a generated corpus in place of the development corpus (users do not have it)
    mp.setattr(shared, "DEFAULT_TEXT", write_corpus(root / "corpus", generated_docs(1, 6)))
    timings = reproduce.run_all(out, reproduce.select("saturation", quick=False), "test",
                                verbose=False)
  finally:
    mp.undo()
  return out, timings


def test_a_second_only_run_keeps_the_first_section(combined_report):
  out, timings = combined_report
  assert [(n, t["preset"], t["status"]) for n, t in timings.items()] == [
      ("planted", "test", "ok"), ("saturation", "test", "ok")], timings
  md = (out / "report.md").read_text()
  assert md.index("## saturation") > md.index("| planted | test | ok |")
  figs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
  assert len(figs) == 3 + 4 and all((out / f).is_file() for f in figs), figs
  assert {f.split("/")[0] for f in figs} == {"planted", "saturation"}
  assert json.loads((out / "saturation" / "saturation_meta.json").read_text())["preset"] == "test"
  assert json.loads((out / "timings.json").read_text()).keys() == {"planted", "saturation"}


def test_cli_accepts_the_test_preset():
  """--preset=test parses; an unknown experiment is one clear error before any work."""
  r = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--preset=test",
                      "--only=nope", "--out=/nonexistent/never"], cwd=shared.REPO,
                     capture_output=True, text=True, timeout=120,
                     env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert r.returncode == 2 and "unknown experiment" in r.stderr and "nope" in r.stderr
  assert reproduce.PRESETS == ("test", "quick", "cpu", "tpu")
  with pytest.raises(ValueError, match="unknown preset"):
    reproduce.run_all("/nonexistent/never", MINE, "huge")


def test_select_and_registry():
  assert reproduce.select(None, quick=True) == ["planted"]
  assert reproduce.select([], quick=False) == list(reproduce.EXPERIMENTS)
  assert reproduce.select("collapse,planted", quick=True) == ["planted", "collapse"]
  assert {"planted", "head_rank", "werror_loss", "vocab_threshold", "saturation", "target_rank",
          "collapse", "convergence"} <= set(reproduce.EXPERIMENTS)
  with pytest.raises(ValueError, match="unknown experiment"):
    reproduce.select("planted,nope", quick=True)
  # the saturation experiment's planted arms are an experiment of the registry, after the text
  # sweep, at a planted preset for every reproduce preset
  names = list(reproduce.EXPERIMENTS)
  assert names.index("saturation_planted") == names.index("saturation") + 1
  arms = reproduce.load("saturation_planted")
  assert set(arms.PRESETS) == set(reproduce.PRESETS)
  assert set(arms.PRESETS.values()) <= set(PLANTED_PRESETS)


def test_missing_module_and_imports_define_no_flags(monkeypatch):
  from absl import flags

  names = list(reproduce.EXPERIMENTS)
  monkeypatch.setitem(reproduce.EXPERIMENTS, "ghost", "experiments_ghost_missing")
  with pytest.raises(RuntimeError, match="not available"):
    reproduce.load("ghost")
  # every registered experiment imports without defining absl flags (they would clash on
  # --out / --preset with reproduce's own flags and with each other)
  before = set(flags.FLAGS)
  for name in names:
    mod = reproduce.load(name)
    assert callable(mod.run) and callable(mod.report_section)
  assert set(flags.FLAGS) == before
  for name in MINE:  # the packages of issue 16: a test preset smaller than quick (an
    # experiment may add preset families of its own, e.g. saturation's `*-planted`)
    assert set(reproduce.load(name).PRESETS) >= set(reproduce.PRESETS)
