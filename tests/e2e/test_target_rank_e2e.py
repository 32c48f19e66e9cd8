"""The target_rank experiment end to end at its ``test`` preset on generated text: the CSV's
curves against a Counter + numpy SVD recomputation from the experiment's own token streams,
the figures, the report's table read from the CSV, and a rerun that recomputes nothing."""

import struct

import numpy as np
import pytest

from experiments import target_rank as tr
from sbjax.data import make_dataset
from tests._corpus import generated_docs, write_corpus
from tests._ngram_reference import counter_reference, np_w_error

P = tr.PRESETS["test"]


def _png_ok(path):
  b = path.read_bytes()
  assert b[:8] == b"\x89PNG\r\n\x1a\n", path
  w, h = struct.unpack(">II", b[16:24])
  assert w > 100 and h > 100


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  root = tmp_path_factory.mktemp("target_rank")
  corpus = write_corpus(root / "corpus", generated_docs(3, 16))
  out = root / "out"
  tr.run(out, "test", data=str(corpus), verbose=False)
  return out, corpus


def test_curves_match_counter_and_numpy_svd(run):
  out, corpus = run
  k = P.knobs
  rows = tr.read_table(out / tr.CSV)
  assert {(r["variant"], r["V"], r["n"]) for r in rows} == {
      (a, b, c) for a in k.variants for b in k.vocab_sizes for c in k.ns}
  for var in k.variants:
    _png_ok(out / f"fig_target_rank_{var}.png")
  # one curve recomputed independently from the experiment's own token streams
  v, n = k.vocab_sizes[0], 2
  ds = make_dataset(tr.data_config(P, v, out, str(corpus)), seq_len=16, global_batch_size=1,
                    workdir=str(out / "data" / f"V{v}"), process_index=0, process_count=1)
  streams = [np.asarray(ds.train_tokens), np.asarray(ds.val_tokens)]
  ref_pairs, ref_ctx = counter_reference(streams, n, k.min_count)
  ctxs = sorted(ref_ctx)
  dense = np.zeros((len(ctxs), v))
  index = {c: i for i, c in enumerate(ctxs)}
  for (c, t), cnt in ref_pairs.items():
    dense[index[c], t] = cnt
  got = sorted((r for r in rows if r["variant"] == "raw" and r["V"] == v and r["n"] == n),
               key=lambda r: r["d"])
  assert got[0]["C"] == len(ctxs)
  ref = np_w_error(dense / dense.sum(1, keepdims=True), [r["d"] for r in got])
  np.testing.assert_allclose([r["w_error"] for r in got], ref, atol=1e-6)


def test_report_reads_the_csv_and_rerun_skips_parts(run):
  out, corpus = run
  rows = tr.read_table(out / tr.CSV)
  text = tr.report_section(out, "tr")
  assert text.startswith("## target_rank")
  for var in P.knobs.variants:
    assert f"](tr/fig_target_rank_{var}.png)" in text
  v, d_ref = P.knobs.vocab_sizes[0], P.knobs.d_ref
  look = {(r["variant"], r["V"], r["n"], r["d"]): r["w_error"] for r in rows}
  line = next(x for x in text.splitlines() if x.startswith(f"| {v} | 2 |"))
  cells = [c.strip() for c in line.strip("|").split("|")]
  assert float(cells[3]) == pytest.approx(look[("raw", v, 2, d_ref)], abs=5e-5)
  assert f"Preset `test`: corpus `{corpus}`" in text
  parts = sorted((out / "parts").iterdir())
  assert len(parts) == len(P.knobs.vocab_sizes) * len(P.knobs.ns)
  mtimes = [x.stat().st_mtime_ns for x in parts]
  csv_before = (out / tr.CSV).read_text()
  tr.run(out, "test", data=str(corpus), verbose=False)
  assert [x.stat().st_mtime_ns for x in sorted((out / "parts").iterdir())] == mtimes
  assert (out / tr.CSV).read_text() == csv_before
