"""The planted experiment end to end at its ``test`` preset (2 knee runs + 2 mixture runs, a
V=32 language): the CSVs against the floor fits and the meta record, the report's tables
against the CSVs, the figures, and a rerun that trains nothing.

The science check (knee at k + 1) needs the quick preset's scale (600 steps, 7 ranks, minutes
of CPU); it is what ``python -m experiments.reproduce --quick`` reports, not a test here."""

import csv
import json
import re

import matplotlib.image as mpimg
import pytest

from experiments import planted as exp

P = exp.PRESETS["test"]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
  out = tmp_path_factory.mktemp("planted")
  exp.run(out, "test", verbose=False)
  return out


def _csv(path):
  with open(path) as f:
    return list(csv.DictReader(f))


def _tables(md: str) -> dict:
  """Markdown tables: {header cells: body rows of cells}."""
  tables, cur = {}, None
  for line in md.splitlines() + [""]:
    if line.startswith("|"):
      cells = [c.strip() for c in line.strip().strip("|").split("|")]
      cur = [cells] if cur is None else cur + [cells]
    elif cur is not None:
      tables[tuple(cur[0])] = cur[2:]
      cur = None
  return tables


def _same(cell: str, value: str) -> bool:
  """A report cell equals the CSV value at the cell's printed precision."""
  if cell == "–":
    return value in ("nan", "")
  try:
    v = float(value)
  except ValueError:
    return cell == value
  decimals = len(cell.split(".")[1]) if "." in cell else 0
  return abs(float(cell) - v) <= 0.5 * 10 ** -decimals + 1e-12


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
  assert [v["label"] for v in m] == [x[0] for x in P.knobs.mix_runs]
  mos, low = m
  assert mos["head"] == "mos" and int(mos["n_mix"]) == P.knobs.mix_runs[0][3]
  assert mos["floor"] == "nan" and low["head"] == "lowrank"
  vocab = P.overrides["model.vocab_size"]
  assert int(low["rank"]) == exp.matched_rank(int(mos["head_params"]), vocab, int(low["d_model"]))
  r, d = int(low["rank"]), int(low["d_model"])
  assert int(low["head_params"]) == vocab * r + r * d
  meta = json.loads((out / "planted_meta.json").read_text())
  assert meta["preset"] == "test" and meta["mixture"] is not None
  assert meta["settings"]["k"] == P.overrides["data.planted_rank"]
  assert meta["settings"]["ranks"] == list(P.knobs.ranks)


def test_report_tables_equal_csvs_and_figures_open(out):
  md = exp.report_section(out, "pl")
  assert md.startswith("## planted: the exact floor and the knee")
  tables = _tables(md)
  for name, cols in (("planted.csv", ("rank", "eval_loss", "eval_acc", "expected_loss", "floor",
                                      "H", "gap", "floor_gap")),
                     ("planted_mix.csv", ("label", "head", "d_model", "rank", "n_mix",
                                          "head_params", "expected_loss", "floor", "H", "gap"))):
    rows, body = _csv(out / name), tables[cols]
    assert len(body) == len(rows)
    for cells, row in zip(body, rows):
      for c, col in zip(cells, cols):
        assert _same(c, row[col]), (name, col, c, row[col])
  s = exp.summarize(out)
  assert f"Knee (smallest r with loss − H ≤ {s['tol']}): **" in md
  figs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
  assert figs == ["pl/fig_planted_knee.png", "pl/fig_planted_mix.png"]
  for rel in figs:
    img = mpimg.imread(out / rel.split("/", 1)[1])
    assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50


def test_rerun_trains_nothing(out):
  before = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/result.json")}
  ckpts = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("DONE")}
  exp.run(out, "test", verbose=False)
  assert {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/result.json")} == before
  assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("DONE")} == ckpts
  assert len(before) == len(ckpts) == len(P.knobs.ranks) + len(P.knobs.mix_runs)
