"""vocab_threshold's per-character tolerance, r* against a reference head and the centred
W-error (issue 18): a toy tokenizer with a known number of characters per token."""

from itertools import product

import numpy as np
import pytest

from experiments.vocab_threshold import ngram
from experiments.vocab_threshold import tolerance as tl
from experiments.vocab_threshold.measure import grid_interval, loglog_fit, slope_range
from sbjax.studies import ngram_floor as nf
from tests.unit.test_ngram_floor import V, _stream


def _encode(text):  # a toy tokenizer: 3 characters per token (the last one may be shorter)
  return [text[i:i + 3] for i in range(0, len(text), 3)]


def test_per_character_tolerance_converts_through_a_toy_tokenizer():
  texts = ["abcdefghi", "abcdef"]  # 15 characters, 3 + 2 = 5 tokens
  c = tl.text_chars_per_token(_encode, texts)
  assert c == pytest.approx(3.0)
  tol = tl.token_tolerance(0.005, c)
  assert tol == pytest.approx(0.015)
  # a loss excess of tol nats per token over the 5 tokens is 0.005 nats per character
  assert tol * 5 / 15 == pytest.approx(0.005)
  # the same through a token stream and a decoder (ids -> text, 3 characters each)
  assert tl.stream_chars_per_token(lambda ids: "xyz" * len(ids), np.arange(7)) == 3.0
  # a tokenizer with longer pieces (a larger V) gets a larger per-token tolerance
  assert tl.token_tolerance(0.005, tl.text_chars_per_token(lambda t: t[::6], texts)) > tol
  with pytest.raises(ValueError, match="n_tokens > 0"):
    tl.chars_per_token(3, 0)


def w_error_curve(w):  # numpy: W-error(k) = sqrt(Σ_{i>k} σ_i²) / ‖W‖_F, k = 0..n
  s = np.linalg.svd(np.asarray(w, np.float64), compute_uv=False)
  tail = np.sqrt(np.concatenate([np.cumsum((s ** 2)[::-1])[::-1], [0.0]]))
  return s, tail / np.linalg.norm(s)


def test_r_star_against_the_reference_and_the_centred_head():
  ranks, losses = [2, 4, 8, 16], [3.10, 3.03, 3.012, 3.0]
  assert tl.r_star(ranks, losses, 3.0, 0.015) == 8
  assert tl.r_star(ranks, losses, 3.0, 0.2) == 2
  assert tl.r_star(ranks, losses, 2.9, 0.015) is None
  rng = np.random.default_rng(0)
  w = rng.standard_normal((32, 2)) @ rng.standard_normal((2, 6))  # rank 2
  shifted = w + np.ones((32, 1)) * rng.standard_normal((1, 6)) * 5  # + 1 aᵀ: same softmax
  _, raw = w_error_curve(shifted)
  _, cen = w_error_curve(tl.centred(shifted))
  _, ref = w_error_curve(tl.centred(w))
  assert np.allclose(cen, ref, atol=1e-5) and cen[2] < 1e-3  # the shift is gone: rank 2
  assert raw[2] > 1e-2  # the uncentred head counts the shift as a third direction


def test_lean_fits_and_the_vocab_threshold_ngram_columns():
  """lean=True (svd + warm start per rank, as vocab_threshold's cpu preset) gives the same
  full-rank end and a non-increasing train curve; r* and censoring of the n-gram columns."""
  tr, va = _stream(0, 3000), _stream(1, 1000)
  knobs = ngram.NgramKnobs(ranks=(1, 2, V), add_k=0.5, max_iter=500, gtol=1e-7)
  rows = ngram.ngram_rows(tr, va, V, knobs)
  full = nf.ngram_floor_rows(tr, va, V, [1, 2, V], n=1, add_k=0.5)
  assert [r["V"] for r in rows] == [V] * 3 and [r["rank"] for r in rows] == [1, 2, V]
  assert rows[-1]["val_excess"] == pytest.approx(0.0, abs=1e-6)
  assert rows[0]["val_full"] == pytest.approx(full[0]["val_full"], rel=1e-12)
  for a, b in zip(rows, full):
    assert a["train_floor"] >= b["train_H"] - 1e-12
    assert a["train_floor"] == pytest.approx(b["train_floor"], abs=1e-4)
  t = ngram.ngram_threshold(rows, 1e-3)
  assert t["r_star_ngram"] == nf.r_star(rows, 1e-3) and t["ngram_censored"] == 0
  c = ngram.ngram_threshold(rows[:2], 1e-9)
  assert c["r_star_ngram"] == 2 and c["ngram_censored"] == 1
  assert c["ngram_excess_at_r_star"] == rows[1]["val_excess"]


def test_grid_interval_and_the_slope_range_against_every_corner():
  assert grid_interval([2, 4, 8, 12, 16, 24, 32, 48, 64], 48) == (32, 48)
  assert grid_interval(["4", "8", "16"], 4) == (1, 4)  # r* at the smallest grid rank
  v = [256, 512, 1024, 2048]
  lo, hi = [32, 32, 64, 48], [48, 64, 128, 64]
  # the least-squares slope is linear in log r, so its extremes over the box are at corners
  corners = [loglog_fit(v, r)["beta"] for r in product(*zip(lo, hi))]
  got = slope_range(v, lo, hi)
  assert got == pytest.approx((min(corners), max(corners)), abs=1e-12)
  # one grid point at every V: the fit's standard error is 0, but the grid allows ±
  flat = loglog_fit(v, [48] * 4)
  assert flat["beta"] == pytest.approx(0.0, abs=1e-12) and flat["beta_se"] == 0.0
  b_lo, b_hi = slope_range(v, [32] * 4, [48] * 4)
  assert b_lo == pytest.approx(-b_hi) and b_hi == pytest.approx(0.2339, abs=1e-4)
