"""A generated corpus with >= 150 distinct characters (accents, Greek, Cyrillic, symbols),
most of them rare: what a user's own UTF-8 text looks like to a small tokenizer."""

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


def user_docs(seed: int = 0, n_docs: int = 8, n_lines: int = 500, n_words: int = 60_000) -> list:
  """A larger user corpus (~40 KB per 100 lines at the defaults' word list): a pseudo-English
  word list of ``n_words`` draws over ~1,000 syllables (Zipfian use), a rare character of
  ``EXTRA`` on 30% of the lines, numbers and capitals on 5%: enough distinct pieces for the
  cpu presets' sentencepiece vocabularies (up to 8192) and >= 150 distinct characters."""
  rng = np.random.default_rng(seed)
  cons = list("bcdfghjklmnprstvwxz") + ["th", "sh", "ch", "qu", "br", "st", "gr", "pl", "tr",
                                        "sk", "wh", "fr", "dr", "cl", "sp"]
  vow = list("aeiouy") + ["ea", "ou", "ai", "oo", "ie", "ee", "au"]
  syl = np.array([c + v for c in cons for v in vow] + [v + c for c in cons[:10] for v in vow[:6]])
  n_syl = rng.integers(1, 5, size=n_words)
  parts = rng.integers(0, len(syl), size=(n_words, 4))
  words = np.array(sorted({"".join(syl[parts[i, :n_syl[i]]]) for i in range(n_words)}))
  p = 1.0 / np.arange(1, len(words) + 1) ** 0.9
  extra = np.array(sorted(set(EXTRA)))
  pe = 1.0 / np.arange(1, len(extra) + 1)
  out = []
  for _ in range(n_docs):
    lens = rng.integers(3, 14, size=n_lines)
    drawn = words[rng.choice(len(words), size=int(lens.sum()), p=p / p.sum())]
    rare = extra[rng.choice(len(extra), size=2 * n_lines, p=pe / pe.sum())]
    ends = rng.choice([".", ",", "!", "?", ";", ""], size=n_lines)
    u = rng.random((n_lines, 3))
    lines, k = [], 0
    for j in range(n_lines):
      w = list(drawn[k:k + lens[j]])
      k += lens[j]
      line = " ".join([w[0].capitalize()] + w[1:]) + ends[j]
      if u[j, 0] < 0.3:
        line += " " + "".join(rare[2 * j:2 * j + 1 + int(u[j, 1] < 0.5)])
      if u[j, 2] < 0.05:
        line = f"{rng.integers(0, 10_000)} " + line.upper()
      lines.append(line)
    out.append("\n".join(lines) + "\n")
  return out
