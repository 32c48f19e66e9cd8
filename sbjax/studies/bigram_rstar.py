r"""r* on a rank grid from few fits: a galloping search.

r* = the smallest grid rank r with ok(r), ok(r) ⇔ val(r) ≤ val_full + tol (``ngram_floor``'s
rule). Each ok(r) is a converged rank-r fit, so the search evaluates as few ranks as it can,
assuming ok is monotone in r (a rank-r solution padded with a zero column is feasible at rank
r + 1, so the train floor is non-increasing; the validation score usually follows it):

* start at ``guess`` (the grid rank nearest to it; e.g. the r* of a neighbouring data size);
* if ok there, step down the grid while the rank below is ok; else step up until one is ok.

With m grid steps between the guess and r*, that is m + 2 fits (m + 1 at the grid's ends),
against a full sweep's len(grid) and bisection's ⌈log2 len(grid)⌉ + 1 from a cold start; a
good guess (m ≤ 1) needs 2–3. The result says where the threshold lies on the grid:
(lo, r*] with lo = the largest failing grid rank below r* (0 when r* is the grid's smallest),
or censored (no grid rank ok: r* > the largest).
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
  if not g or g[0] < 1:
    raise ValueError(f"gallop: the rank grid must hold integers >= 1, got {list(grid)}")
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
