"""Generated pseudo-English corpora for tests that must not depend on ../shared/data."""

from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHAKESPEARE = REPO.parent / "shared" / "data" / "shakespeare"


def generated_docs(seed: int, n_docs: int, n_lines: int = 60) -> list:
  """Pseudo-English documents: Zipfian words over syllables, punctuation, newlines."""
  rng = np.random.default_rng(seed)
  syl = ["ka", "to", "ri", "men", "sa", "lo", "thu", "ve", "na", "el", "dor", "pi", "que",
         "an", "is", "gra", "mo", "ul", "fen", "bri"]
  words = sorted({"".join(rng.choice(syl, size=rng.integers(1, 4))) for _ in range(400)})
  p = 1.0 / np.arange(1, len(words) + 1)
  p /= p.sum()
  docs = []
  for _ in range(n_docs):
    lines = []
    for _ in range(n_lines):
      w = list(rng.choice(words, size=rng.integers(3, 11), p=p))
      w[0] = w[0].capitalize()
      lines.append(" ".join(w) + str(rng.choice([".", ",", "!", "?", ";", ""])))
    docs.append("\n".join(lines) + "\n")
  return docs


def write_corpus(root: Path, docs, prefix="doc") -> Path:
  root.mkdir(parents=True, exist_ok=True)
  for i, d in enumerate(docs):
    (root / f"{prefix}{i:02d}.txt").write_text(d, encoding="utf-8")
  return root


def chain_tokens(path, n: int, vocab: int, seed: int) -> np.ndarray:
  """A token file of ``n`` uint16 ids from a learnable 4-way branching chain over ``vocab`` ids
  (successors fixed by seed 0, the walk by ``seed``); returns the ids."""
  rng = np.random.default_rng(seed)
  nxt = np.random.default_rng(0).integers(0, vocab, (vocab, 4))
  x = np.zeros(n, np.uint16)
  for i in range(1, n):
    x[i] = nxt[x[i - 1], rng.integers(0, 4)]
  x.tofile(path)
  return x
