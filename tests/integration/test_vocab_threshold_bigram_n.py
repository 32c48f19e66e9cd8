"""vocab_threshold's bigram r*(V, N) preset at its test size (issue 33, item 3), on a generated
corpus: real tokenizers and token streams, converged rank-r fits, the CSVs checked against a
plain-Python counting reference (the smoothed bigram's validation score, the nested
fractions), r* against the per-fit rows and the tolerance rule, the start check's second fit
against the cell's decisive fits, the report's verdict against the CSV, and a rerun into the
same folder resuming without a fit."""

import csv
import json
import math
import shutil
from collections import Counter

import numpy as np
import pytest

from experiments import vocab_threshold as vt
from experiments.vocab_threshold import bigram_n, bigram_n_report as rep
from experiments.vocab_threshold.bigram_n_run import earlier, streams_of
from tests._corpus import generated_docs, write_corpus

PRESET = "test-bigram-n"


@pytest.fixture(scope="module")
def done(tmp_path_factory):
  root = tmp_path_factory.mktemp("bigram_n")
  corpus = write_corpus(root / "corpus", generated_docs(3, 10))
  vt.run(root / "out", PRESET, data=str(corpus), verbose=False)
  return root / "out", str(corpus)


def _csv(path):
  with open(path) as f:
    return list(csv.DictReader(f))


def _val_full(train_blocks, val, vocab, k):
  """-mean log P_k(v|c) over validation pairs whose context was seen in training."""
  pairs, nc = Counter(), Counter()
  for b in train_blocks:
    b = b.tolist()
    pairs.update(zip(b[:-1], b[1:]))
    nc.update(b[:-1])
  val = val.tolist()
  lp = [math.log((pairs[(c, v)] + k) / (nc[c] + k * vocab))
        for c, v in zip(val[:-1], val[1:]) if nc[c] > 0]
  return -sum(lp) / len(lp)


def test_cells_follow_the_counts_and_the_rule(done):
  out, corpus = done
  knobs = vt.PRESETS[PRESET].knobs
  k = knobs.bigram_n
  cells, fits = _csv(out / rep.CELLS_CSV), _csv(out / rep.FITS_CSV)
  assert [(int(c["V"]), float(c["fraction"])) for c in cells] == [
      (v, f) for v in knobs.vocabs for f in k.fractions]
  for v in knobs.vocabs:
    tr, va, cpt = streams_of(PRESET, corpus, v, out)
    tr, va = np.asarray(tr), np.asarray(va)
    for c in (c for c in cells if int(c["V"]) == v):
      f = float(c["fraction"])
      blocks = [tr[s:s + k.block] for i, s in enumerate(range(0, len(tr), k.block))
                if i % k.period < round(f * k.period)]
      assert int(c["train_tokens"]) == sum(len(b) for b in blocks)
      assert float(c["val_full"]) == pytest.approx(_val_full(blocks, va, v, k.add_k), rel=1e-9)
      assert float(c["tol_token"]) == pytest.approx(vt.TOL_CHAR * cpt)
      mine = [r for r in fits if int(r["V"]) == v and float(r["fraction"]) == f]
      ok = {int(r["rank"]): int(r["ok"]) for r in mine}
      for r in mine:  # ok is the tolerance rule on each fit's own numbers
        assert int(r["ok"]) == int(float(r["val_excess"]) <= float(c["tol_token"]))
        assert int(r["converged"]) == int(float(r["grad_norm"]) <= k.gtol)
        assert int(r["n_iter"]) <= k.max_iters[knobs.vocabs.index(v)]
      rs, lo = int(c["r_star"]), int(c["lo"])
      if int(c["censored"]):
        assert not any(ok.values())
      else:
        assert ok[rs] == 1 and (lo == 0 or ok[lo] == 0)
        assert lo == max([g for g in k.grid if g < rs], default=0)


def test_report_reads_the_verdict_of_its_csv(done):
  out, _ = done
  cells = _csv(out / rep.CELLS_CSV)
  v = rep.verdict(cells)
  assert json.loads((out / rep.SUMMARY).read_text())["verdict"] == v
  text = vt.report_section(out, "vt")
  word = {"supported": "**SUPPORTED", "refuted": "**REFUTED", "undecided": "**UNDECIDED"}
  assert word[v["overall"]] in text
  assert all(w not in text for o, w in word.items() if o != v["overall"])
  for c in cells:
    assert f"(N = {int(c['train_tokens']):,})" in text
  assert (out / rep.FIGURE).stat().st_size > 0


def _same(a, b):
  """Two CSV values equal as numbers (a rewritten 96 reads back as 96.0) or as text."""
  try:
    return float(a) == float(b) or (math.isnan(float(a)) and math.isnan(float(b)))
  except ValueError:
    return a == b


def test_start_check_refits_the_decisive_fit_nearest_the_tolerance(done):
  out, _ = done
  cells, fits, checks = (_csv(out / n) for n in (rep.CELLS_CSV, rep.FITS_CSV, rep.CHECKS_CSV))
  knobs = vt.PRESETS[PRESET].knobs
  k = knobs.bigram_n
  assert len(checks) == len(cells)  # the preset's check=1: one second fit per cell
  for c in cells:
    at = (c["V"], c["fraction"])
    first = {int(r["rank"]): r for r in fits if (r["V"], r["fraction"]) == at}
    tol, lo = float(c["tol_token"]), int(c["lo"])
    dec = [r for r in (lo, None if int(c["censored"]) else int(c["r_star"])) if r in first]
    want = min(dec, key=lambda r: (abs(float(first[r]["val_excess"]) - tol), r))
    (s,) = [r for r in checks if (r["V"], r["fraction"]) == at]
    assert int(s["rank"]) == want and c["check_ranks"] == str(want)
    assert s["start"] == ("random" if first[want]["start"] == "svd" else "svd")
    assert int(s["ok"]) == int(float(s["val_excess"]) <= tol)
    cap = k.max_iters[knobs.vocabs.index(int(c["V"]))] * k.check_cap
    assert int(s["n_iter"]) <= cap and int(s["converged"]) == int(float(s["grad_norm"]) <= k.gtol)
    flip = int(s["converged"]) and s["ok"] != first[want]["ok"]
    expect = "flips" if flip else "agrees" if int(s["converged"]) else "unconverged"
    assert c["start_check"] == expect
    assert int(c["reliable"]) == int(int(c["decisive_converged"]) and expect == "agrees")
    col = "check_excess_at_lo" if want == lo else "check_excess_at_r_star"
    assert float(c[col]) == pytest.approx(float(s["val_excess"]))
  text = vt.report_section(out, "vt")
  assert f"Start check: {sum(c['start_check'] == 'agrees' for c in cells)} of {len(cells)}" in text


def test_a_rerun_into_the_same_out_resumes_without_fitting(done, tmp_path, monkeypatch):
  out, corpus = done
  again = tmp_path / "again"
  shutil.copytree(out, again)
  names = (rep.CELLS_CSV, rep.FITS_CSV, rep.CHECKS_CSV)
  before = {n: _csv(again / n) for n in names}

  def no_fit(*a, **k):
    raise AssertionError("a cell of the earlier run was fitted again")

  monkeypatch.setattr(bigram_n.bf, "fit", no_fit)
  vt.run(again, PRESET, data=corpus, verbose=False)
  for n in names:
    after = _csv(again / n)
    assert len(after) == len(before[n])
    for a, b in zip(after, before[n]):
      assert all(_same(a[k], b[k]) for k in b if k != "cpu_s"), n
  summary = json.loads((again / rep.SUMMARY).read_text())
  other = {**summary, "knobs": {**summary["knobs"], "gtol": 1e-6}}
  with pytest.raises(ValueError, match="other knobs.*use a fresh --out"):
    earlier(again, other, vt.PRESETS[PRESET].knobs.bigram_n)


def test_an_interrupted_resume_keeps_the_earlier_cells_it_has_not_reached(done, tmp_path,
                                                                         monkeypatch):
  out, corpus = done
  again = tmp_path / "again"
  shutil.copytree(out, again)
  cells = _csv(again / rep.CELLS_CSV)
  first_v = cells[0]["V"]
  last = max(i for i, c in enumerate(cells) if c["V"] == first_v)
  cells[last]["start_check"] = "off"  # that cell must be checked again...
  with open(again / rep.CELLS_CSV, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(cells[0]))
    w.writeheader()
    w.writerows(cells)
  before = {n: _csv(again / n) for n in (rep.FITS_CSV, rep.CHECKS_CSV)}

  def stop(*a, **k):
    raise KeyboardInterrupt  # ...and the run is stopped there, after writing earlier cells

  monkeypatch.setattr(bigram_n.bf, "fit", stop)
  with pytest.raises(KeyboardInterrupt):
    vt.run(again, PRESET, data=corpus, verbose=False)
  after = _csv(again / rep.CELLS_CSV)
  key = sorted((float(c["V"]), float(c["fraction"])) for c in cells)
  assert sorted((float(c["V"]), float(c["fraction"])) for c in after) == key
  for n in (rep.FITS_CSV, rep.CHECKS_CSV):
    assert len(_csv(again / n)) == len(before[n])
