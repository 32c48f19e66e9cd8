"""What a corpus of this size can and cannot show about r*(V), in words, from the table's
``train_tokens`` and ``types_under_50`` (the training split's token types seen fewer than
RARE times at each V): the rows of W of such types are fitted on a few dozen examples, so
their rank needs are set by the data, not by the softmax bottleneck."""

from __future__ import annotations

RARE = 50  # the threshold: a type seen fewer than 50 times in training is rare
PAPER_V = 50_257  # the GPT-2 / Pythia vocabulary of the papers


def corpus_sentence(table: list) -> str:
  """One paragraph (empty when the table predates the columns)."""
  rows = [t for t in table if t.get("types_under_50") not in (None, "")]
  if not rows:
    return ""
  cells = ", ".join(f"{int(t['types_under_50']):,} of {int(t['V']):,} at V = {int(t['V']):,} "
                    f"({int(t['train_tokens']):,} training tokens)" for t in rows)
  big = max(int(t["V"]) for t in rows)
  return (f"What this corpus can show: token types seen fewer than {RARE} times in training: "
          f"{cells}. Where that count is a large share of V, the rows of those types are "
          "fitted on a few dozen examples each, so r* there measures the data as much as the "
          f"head. No claim is made beyond V = {big:,}, and none at the papers' V ≈ 50k "
          f"({PAPER_V:,}): a corpus of ~2M tokens would see most of those types fewer than "
          f"{RARE} times.")
