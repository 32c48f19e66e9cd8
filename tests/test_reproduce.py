"""experiments.reproduce: the registry, selection, and a real (tiny) planted run whose report
tables are parsed back and compared with the CSVs."""

import csv
import re

import matplotlib.image as mpimg
import pytest

from experiments import planted as exp
from experiments import reproduce

TINY = exp.Preset(ranks=(1, 16), vocab=32, k=3, d_model=16, n_layers=1, n_heads=2, steps=30,
                  batch=8, seq_len=16, lr=1e-2, warmup=5, train_tokens=20_000, val_tokens=4096,
                  measure_batches=2, mix_m=2, mix_k=2,
                  mix_runs=(("mos", "mos", 16, 2), ("lowrank", "lowrank", 16, 0)), mix_steps=30)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
  out = tmp_path_factory.mktemp("repro")
  mp = pytest.MonkeyPatch()
  mp.setitem(exp.PRESETS, "quick", TINY)  # the quick preset, shrunk further for the test
  try:
    timings = reproduce.run_all(out, reproduce.select(None, quick=True), "quick", verbose=False)
  finally:
    mp.undo()
  return out, timings, (out / "report.md").read_text()


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
  out, timings, md = report
  assert timings["planted"]["status"] == "ok", timings
  tables = {tuple(t[0]): t[2:] for t in _tables(md)}
  knee_cols = ("rank", "eval_loss", "eval_acc", "expected_loss", "floor", "H", "gap", "floor_gap")
  rows = _csv(out / "planted" / "planted.csv")
  body = tables[knee_cols]
  assert len(body) == len(rows) == len(TINY.ranks)
  for cells, row in zip(body, rows):
    for c, name in zip(cells, knee_cols):
      assert _same(c, row[name]), (name, c, row[name])
  mix_cols = ("label", "head", "d_model", "rank", "n_mix", "head_params", "expected_loss",
              "floor", "H", "gap")
  mrows = _csv(out / "planted" / "planted_mix.csv")
  body = tables[mix_cols]
  assert len(body) == len(mrows) == 2
  for cells, row in zip(body, mrows):
    for c, name in zip(cells, mix_cols):
      assert _same(c, row[name]), (name, c, row[name])
  # the floor column is the exact floor of the language, and H its entropy
  fl = {int(r["rank"]): float(r["floor"]) for r in _csv(out / "planted" / "planted_floor.csv")}
  for row in rows:
    assert float(row["floor"]) == fl[int(row["rank"])]
    assert float(row["floor"]) >= float(row["H"]) - 1e-9
  # timing table
  assert tables[("experiment", "preset", "status", "seconds")][0][:3] == ["planted", "quick", "ok"]


def test_report_figures_open(report):
  out, _, md = report
  figs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
  assert len(figs) == 2
  for rel in figs:
    img = mpimg.imread(out / rel)
    assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50


def test_rerun_skips_finished_runs(report):
  out, _, _ = report
  before = {p: p.stat().st_mtime_ns for p in (out / "planted" / "runs").glob("*/result.json")}
  mp = pytest.MonkeyPatch()
  mp.setitem(exp.PRESETS, "quick", TINY)
  try:
    exp.run(out / "planted", "quick", verbose=False)
  finally:
    mp.undo()
  after = {p: p.stat().st_mtime_ns for p in (out / "planted" / "runs").glob("*/result.json")}
  assert before == after and len(before) == 4


def test_select_and_registry():
  assert reproduce.select(None, quick=True) == ["planted"]
  assert reproduce.select([], quick=False) == list(reproduce.EXPERIMENTS)
  assert reproduce.select("collapse,planted", quick=True) == ["planted", "collapse"]
  assert {"planted", "head_rank", "werror_loss", "vocab_threshold", "saturation", "target_rank",
          "collapse", "convergence"} <= set(reproduce.EXPERIMENTS)
  with pytest.raises(ValueError, match="unknown experiment"):
    reproduce.select("planted,nope", quick=True)


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
