"""A generated corpus of >= 150 distinct characters, most of them rare, for small tokenizers."""

import numpy as np

from tests._corpus import generated_docs

EXTRA = ("àáâäãåæçèéêëìíîïñòóôöõøùúûüýÿßœšžÀÁÂÉÈÊÇÑÖÜØÆŒ€£¥©®°±×÷§¶•…–—“”‘’«»¿¡"
         "αβγδεζηθικλμνξοπρστυφχψωΩΣΔ∑∞≈≠≤≥→←↑↓★☆♠♣♥♦"
         "абвгдежзийклмнопрстуфхцчшщыэюя")


def unicode_docs(seed: int = 0, n_docs: int = 8, n_lines: int = 100) -> list:
  """Pseudo-English documents plus digits, capitals and ~190 rare characters (Zipfian)."""
  rng = np.random.default_rng(seed)
  extra = sorted(set(EXTRA))
  p = 1.0 / np.arange(1, len(extra) + 1)
  p /= p.sum()
  out = []
  for doc in generated_docs(seed, n_docs, n_lines):
    lines = []
    for line in doc.splitlines():
      if rng.random() < 0.5:
        line += " " + "".join(rng.choice(extra, size=rng.integers(1, 4), p=p))
      if rng.random() < 0.2:
        line = f"{rng.integers(0, 10_000)} " + line.upper()
      lines.append(line)
    out.append("\n".join(lines) + "\n")
  return out

