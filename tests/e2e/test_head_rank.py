"""Head-rank experiments end to end on a generated corpus: head_rank, werror_loss and
vocab_threshold (``test`` presets, one module-scoped run of each), checked against plain
numpy recomputations from the CSVs and the checkpoints on disk. Their pure pieces (presets,
rank matching, the log-log fit, bad inputs) are in tests/unit/test_head_rank_pieces.py."""

import csv
import json
import math
import re

import jax
import numpy as np
import pytest

from tests._corpus import generated_docs, write_corpus
from experiments import head_rank, vocab_threshold, werror_loss
from sbjax import checkpoint as ckpt
from sbjax.studies import rank_sweep as rs


def _csv(path):
  with open(path, newline="") as f:
    return list(csv.DictReader(f))


def _w_error(s, k):
  s2 = np.asarray(s, np.float64) ** 2
  return math.sqrt(s2[k:].sum() / s2.sum())


@pytest.fixture(scope="module")
def outs(tmp_path_factory):
  root = tmp_path_factory.mktemp("head_rank")
  corpus = write_corpus(root / "corpus", generated_docs(0, 12))
  head_rank.run(root / "head_rank", "test", data=str(corpus), verbose=False)
  werror_loss.run(root / "werror_loss", "test", verbose=False)  # reads root/head_rank
  vocab_threshold.run(root / "vocab_threshold", "test", data=str(corpus), verbose=False)
  return root


def test_head_rank_csv_and_best_lr(outs):
  out = outs / "head_rank"
  rows = _csv(out / "head_rank.csv")
  assert list(rows[0]) == list(rs.COLUMNS)
  plan = json.loads((out / "plan.json").read_text())
  v, d = plan["vocab_size"], plan["base"]["model"]["d_model"]
  assert {r["protocol"] for r in rows} == {"full", "a", "b"}
  for p, grid in (("full", plan["lrs"]), ("b", plan["lrs"]), ("a", plan["head_lrs"])):
    for rank in ([d] if p == "full" else plan["ranks"]):
      sel = [r for r in rows
             if r["protocol"] == p and r["head"] != "mos" and int(r["rank"]) == rank]
      assert sorted(float(r["lr"]) for r in sel) == sorted(grid)
      losses = np.array([float(r["eval_loss"]) for r in sel])
      assert [int(r["best"]) for r in sel] == [int(i == np.argmin(losses)) for i in range(len(sel))]
      for r in sel:  # the CSV loss is the run's own last evaluation on disk
        recs = [json.loads(x) for x in (out / "runs" / r["run"] / "metrics.jsonl").open()]
        assert float(r["eval_loss"]) == pytest.approx([x for x in recs if "eval_loss" in x][-1]
                                                      ["eval_loss"], rel=1e-9)
  for r in rows:  # head parameter counts, written out by hand
    rank, m = int(r["rank"]), int(r["n_mix"])
    want = {"dense": v * d, "lowrank": v * rank + rank * d,
            "mos": v * d + d * m + m + d * m * d + m * d}[r["head"]]
    assert int(r["params"]) == want


def test_frozen_trunk_is_the_best_full_runs_trunk(outs):
  out = outs / "head_rank"
  rows = _csv(out / "head_rank.csv")
  full = [r for r in rows if r["protocol"] == "full"]
  best = min(full, key=lambda r: float(r["eval_loss"]))
  _, src, _ = ckpt.load_params(out / "runs" / best["run"])
  for r in (r for r in rows if r["protocol"] == "a"):
    cfg, p, step = ckpt.load_params(out / "runs" / r["run"])
    assert cfg.train.freeze_trunk and step == cfg.train.steps
    for k in src:
      if k != "head":
        jax.tree.map(np.testing.assert_array_equal, p[k], src[k])


def test_werror_column_matches_numpy_svd(outs):
  hr = outs / "head_rank"
  rows = _csv(hr / "head_rank.csv")
  best = min((r for r in rows if r["protocol"] == "full"), key=lambda r: float(r["eval_loss"]))
  _, params, _ = ckpt.load_params(hr / "runs" / best["run"])
  w = np.asarray(params["head"]["w"], np.float64)  # the dense head, V x d
  np.testing.assert_allclose(np.load(hr / "full_head.npy"), w, rtol=0, atol=0)
  s = np.linalg.svd(w, compute_uv=False)
  table = _csv(outs / "werror_loss" / "werror_loss.csv")
  assert {r["protocol"] for r in table} == {"full", "a", "b"}
  for r in table:
    assert float(r["w_error"]) == pytest.approx(_w_error(s, int(r["rank"])), abs=2e-5)
    ref = [x for x in rows if x["protocol"] == r["protocol"] and x["head"] in ("lowrank", "dense")
           and int(x["rank"]) == int(r["rank"]) and int(x["best"])]
    assert float(r["eval_loss"]) == pytest.approx(float(ref[0]["eval_loss"]), rel=1e-12)
  summary = json.loads((outs / "werror_loss" / "summary.json").read_text())
  assert summary["rank_at_werror_0.6"] == min(k for k in range(len(s) + 1) if _w_error(s, k) <= 0.6)
  section = werror_loss.report_section(outs / "werror_loss", "werror_loss")
  assert section.startswith("## werror_loss") and "(werror_loss/fig_werror_loss.png)" in section
  assert (outs / "werror_loss" / "fig_werror_loss.png").stat().st_size > 1000


def test_vocab_threshold_rstar_and_beta(outs):
  out = outs / "vocab_threshold"
  runs, table = _csv(out / "runs.csv"), _csv(out / "vocab_threshold.csv")
  fit = json.loads((out / "fit.json").read_text())
  vs, rstars, r06s = [], [], []
  for t in table:
    v = int(t["V"])
    sub = [r for r in runs if int(r["V"]) == v]
    lf = min(float(r["eval_loss"]) for r in sub if r["protocol"] == "full")
    d = int(sub[0]["rank"])
    cand = {d: lf}
    for r in sub:
      if r["protocol"] == "b" and r["head"] == "lowrank":
        k = int(r["rank"])
        cand[k] = min(cand.get(k, np.inf), float(r["eval_loss"]))
    # the per-character tolerance: tol_char × characters per token of this V's validation text
    # (the test plan has no protocol a: the reference is the dense head)
    tol = float(t["tol_token"])
    assert t["reference"] == "dense" and float(t["chars_per_token"]) > 1
    assert tol == pytest.approx(vocab_threshold.TOL_CHAR * float(t["chars_per_token"]))
    rstar = min(k for k, l in cand.items() if l <= lf + tol)
    assert int(t["r_star"]) == rstar and int(t["censored"]) == int(rstar == d)
    w = np.load(out / f"V{v}" / "full_head.npy").astype(np.float64)
    s = np.linalg.svd(w - w.mean(0), compute_uv=False)  # the centred head
    r06 = min(k for k in range(len(s) + 1) if _w_error(s, k) <= 0.6)
    assert int(t["r_werror06"]) == r06
    assert v == len(np.load(out / f"V{v}" / "full_head.npy"))  # the tokenizer has exactly V pieces
    vs.append(v), rstars.append(rstar), r06s.append(r06)
  assert vs == list(vocab_threshold.VOCABS["test"])
  for key, ys in (("r_star", rstars), ("r_werror06", r06s)):  # two points: the line through them
    assert fit[key]["beta"] == pytest.approx(np.log(ys[1] / ys[0]) / np.log(vs[1] / vs[0]),
                                             abs=1e-9)
    assert math.isnan(fit[key]["beta_se"]) and fit[key]["n"] == 2
  section = vocab_threshold.report_section(out, "vt")
  assert f"beta = {fit['r_star']['beta']:.3f} ± {fit['r_star']['beta_se']:.3f}" in section


def test_report_section_table_is_read_from_the_csv(outs):
  out = outs / "head_rank"
  section = head_rank.report_section(out, "hr")
  assert section.startswith("## head_rank") and "![head rank](hr/fig_head_rank.png)" in section
  assert (out / "fig_head_rank.png").stat().st_size > 1000
  rows = _csv(out / "head_rank.csv")
  best = {(r["protocol"], int(r["rank"])): float(r["eval_loss"]) for r in rows
          if int(r["best"]) and r["head"] == "lowrank"}
  table = [l for l in section.splitlines() if re.match(r"^\| \d+ \|", l)]
  assert len(table) == len({k for _, k in best})
  for line in table:
    cells = [c.strip() for c in line.strip("|").split("|")]
    k = int(cells[0])
    assert float(cells[1]) == pytest.approx(best[("a", k)], abs=6e-5)
    assert float(cells[4]) == pytest.approx(best[("b", k)], abs=6e-5)


def test_rerun_skips_finished_runs(outs):
  out = outs / "head_rank"
  before = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("metrics.jsonl")}
  csv_before = (out / "head_rank.csv").read_text()
  head_rank.run(out, "test", data=str(outs / "corpus"), verbose=False)
  assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("metrics.jsonl")} == before
  assert (out / "head_rank.csv").read_text() == csv_before
