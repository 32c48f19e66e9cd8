"""The analysis's forward chunks (sbjax.analysis.forward.padded_chunks): a sample smaller than
``batch_sequences`` is one forward of its own size (session 8's benchmark padded 8 sequences
to 32 and paid 4x the forward); larger samples keep the static chunk, padding only the last."""

import numpy as np

from sbjax.analysis.forward import chunk_size, padded_chunks


def test_small_sample_is_one_unpadded_chunk():
  rows = np.arange(8 * 3).reshape(8, 3)
  out = list(padded_chunks(rows, 32))
  assert len(out) == 1
  c0, r, real = out[0]
  assert (c0, real) == (0, 8) and r.shape == (8, 3)
  np.testing.assert_array_equal(r, rows)
  assert chunk_size(32, 8) == 8 and chunk_size(32, 0) == 1


def test_large_sample_pads_only_the_last_chunk_with_its_first_row():
  rows = np.arange(12 * 2).reshape(12, 2)
  out = list(padded_chunks(rows, 8))
  assert [(c0, r.shape[0], real) for c0, r, real in out] == [(0, 8, 8), (8, 8, 4)]
  np.testing.assert_array_equal(out[1][1][:4], rows[8:])
  np.testing.assert_array_equal(out[1][1][4:], np.repeat(rows[8:9], 4, 0))
  # n_rows limits the rows measured; the chunk is capped at it
  out = list(padded_chunks(rows, 8, n_rows=5))
  assert [(c0, r.shape[0], real) for c0, r, real in out] == [(0, 5, 5)]
