r"""r* on a rank grid from few fits: a galloping search.

r* = the smallest grid rank r with ok(r) (``ngram_floor``'s rule), assuming ok is monotone
in r. From the grid rank nearest ``guess``: if ok there, step down while the rank below is ok;
else step up until one is ok. With m grid steps between the guess and r* that is at most m + 2
fits. The result: r* in (lo, r*], lo the largest failing grid rank below r* (0 when r* is the
grid's smallest), or censored (no grid rank ok).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence


@dataclasses.dataclass(frozen=True)
class Search:
  r_star: int | None  # None: censored (no grid rank is within tolerance)
  lo: int  # the largest grid rank below r* that failed (0: r* is the grid's smallest)
  evaluated: tuple  # the ranks evaluated, in order

  @property
  def censored(self) -> bool:
    return self.r_star is None


def gallop(ok: Callable[[int], bool], grid: Sequence[int], guess: int) -> Search:
  """The smallest r in ``grid`` with ok(r), evaluating ok as few times as the search allows
  (each rank at most once)."""
  g = sorted({int(r) for r in grid})
  seen: dict[int, bool] = {}

  def test(i: int) -> bool:
    if g[i] not in seen:
      seen[g[i]] = bool(ok(g[i]))
    return seen[g[i]]

  i = min(range(len(g)), key=lambda j: (abs(g[j] - guess), g[j]))
  if test(i):
    while i > 0 and test(i - 1):
      i -= 1
    return Search(g[i], g[i - 1] if i > 0 else 0, tuple(seen))
  while i + 1 < len(g):
    i += 1
    if test(i):
      return Search(g[i], g[i - 1], tuple(seen))
  return Search(None, g[-1], tuple(seen))
