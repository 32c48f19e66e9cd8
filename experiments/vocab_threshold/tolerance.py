r"""vocab_threshold's tolerance in nats per character, and the centred head (issue 18, item 6).

A loss difference Δ in nats per token is Δ / c nats per character, where c = characters per
token of the validation text through this V's tokenizer (c grows with V). A tolerance
``tol_char`` nats per character is therefore, at that V,

    tol_token = tol_char · c,   c = n_chars / n_tokens,

so r* compares every V at the same per-character precision (a tolerance relative to the
per-token loss, which itself grows with V, does not).

r*(V) = the smallest rank r with L(r) ≤ L_ref + tol_token, where L_ref is the reference head's
loss: the protocol-(a) rank-d lowrank head (same parameterisation and steps as the rank-r
heads) when the sweep has it, else the dense head (the older, censoring comparison).

The W-error is taken on the centred head W_c = W − 1 w̄ᵀ (w̄ = the mean row): adding a vector
a to every row adds aᵀh to every logit, which softmax ignores, so the uncentred spectrum
counts a direction the head does not use.
"""

from __future__ import annotations

import numpy as np


def chars_per_token(n_chars: int, n_tokens: int) -> float:
  """c = n_chars / n_tokens (characters of the decoded text per token)."""
  if n_tokens <= 0 or n_chars <= 0:
    raise ValueError(f"chars_per_token: need n_chars > 0 and n_tokens > 0, got {n_chars}, "
                     f"{n_tokens}")
  return float(n_chars) / float(n_tokens)


def text_chars_per_token(encode, texts) -> float:
  """c of ``texts`` through ``encode`` (text -> token ids): Σ len(text) / Σ len(ids)."""
  texts = list(texts)
  return chars_per_token(sum(len(t) for t in texts), sum(len(encode(t)) for t in texts))


def stream_chars_per_token(decode, tokens) -> float:
  """c of a token stream: len(decode(tokens)) / len(tokens)."""
  ids = [int(t) for t in np.asarray(tokens).ravel()]
  return chars_per_token(len(decode(ids)), len(ids))


def token_tolerance(tol_char: float, cpt: float) -> float:
  """tol_token = tol_char · c (nats per token)."""
  return float(tol_char) * float(cpt)


def r_star(ranks, losses, ref_loss: float, tol_token: float):
  """The smallest rank with loss ≤ ref_loss + tol_token (None if none)."""
  ok = [r for r, l in sorted(zip(ranks, losses)) if l <= ref_loss + tol_token]
  return ok[0] if ok else None


def centred(w) -> np.ndarray:
  """W − 1 w̄ᵀ for a V×d head W (rows = tokens)."""
  w = np.asarray(w, np.float64)
  return w - w.mean(0, keepdims=True)
