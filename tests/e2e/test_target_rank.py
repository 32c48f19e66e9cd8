"""experiments.target_rank at its test preset: its curves (their formula against Counter + numpy SVD:
tests/unit/test_ngram_werror.py), tables and presets."""

import json

import numpy as np
import pytest

from experiments import target_rank as tr
from experiments.common import read_rows
from sbjax.experiment.runner import run
from tests._corpus import generated_docs, write_corpus

P = tr.PRESETS["test"]


@pytest.fixture(scope="module")
def done(tmp_path_factory):
  root = tmp_path_factory.mktemp("target_rank")
  corpus = write_corpus(root / "corpus", generated_docs(3, 16))
  run(tr.EXPERIMENT, root / "out", "test", str(corpus), verbose=False)
  return root / "out"


def test_curves_and_figures(done):
  out = done
  k, rows = P.knobs, read_rows(out / tr.CSV)
  assert {(r["variant"], r["V"], r["n"]) for r in rows} == {
      (a, b, c) for a in k.variants for b in k.vocab_sizes for c in k.ns}
  assert all((out / f"fig_target_rank_{v}.png").stat().st_size > 1000 for v in k.variants)
  got = [r for r in rows if (r["variant"], r["V"], r["n"]) == ("raw", k.vocab_sizes[0], 2)]
  assert got[0]["C"] > 0 and [r["d"] for r in got] == [1, 2, 4, 8, 16, 32, 64]


def test_summary_and_report_read_the_csv(done):
  out = done
  rows, s = read_rows(out / tr.CSV), json.loads((out / "summary.json").read_text())
  raw = {(r["V"], r["n"], r["d"]): r["w_error"] for r in rows if r["variant"] == "raw"}
  for var in P.knobs.variants[1:]:
    d = [r["w_error"] - raw[(r["V"], r["n"], r["d"])] for r in rows
         if r["variant"] == var and r["d"] < min(r["C"], r["V"])]
    assert s["vs_raw"][var] == {"points": len(d), "lower_than_raw": sum(x < 0 for x in d),
                                "mean_diff": pytest.approx(np.mean(d))}
  text = tr.report(out, "tr")
  assert all(f"](tr/fig_target_rank_{var}.png)" in text for var in P.knobs.variants)
  cells = next(x for x in text.splitlines() if x.startswith(f"| {P.knobs.vocab_sizes[0]} | 2 |"))
  assert float(cells.strip("|").split("|")[4]) == pytest.approx(
      raw[(P.knobs.vocab_sizes[0], 2, P.knobs.d_ref)], abs=5e-5)
