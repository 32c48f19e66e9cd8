"""The difference of two seed means with its Welch interval, and the verdict it gives a claim
"a beats b" (a lower loss than b), for the experiments that compare heads over init seeds.

For losses x_a (n_a seeds) and x_b (n_b seeds):

    diff = mean(x_b) − mean(x_a)            (> 0: a has the lower loss)
    se   = sqrt(s_a²/n_a + s_b²/n_b),       s² the unbiased seed variances
    ν    = se⁴ / ((s_a²/n_a)²/(n_a−1) + (s_b²/n_b)²/(n_b−1))   (Welch–Satterthwaite)
    CI   = diff ± t_{(1+level)/2, ν} · se

verdict: **supported** when the CI lies above 0, **refuted** when it lies below 0 (b has the
lower loss), **undecided** otherwise, and with fewer than two seeds on a side. With se = 0 the
CI is the point diff.
"""

from __future__ import annotations

import math

from scipy import stats as sps

LEVEL = 0.95


def welch(a, b, level: float = LEVEL) -> dict:
  """{diff, lo, hi, dof, verdict} of losses ``a`` against ``b`` (module docstring)."""
  a, b = [float(x) for x in a], [float(x) for x in b]
  na, nb = len(a), len(b)
  if not na or not nb:
    raise ValueError(f"welch: both samples need at least one value (got {na} and {nb})")
  ma, mb = sum(a) / na, sum(b) / nb
  diff = mb - ma
  if na < 2 or nb < 2:
    return {"diff": diff, "lo": math.nan, "hi": math.nan, "dof": math.nan,
            "verdict": "undecided"}
  va = sum((x - ma) ** 2 for x in a) / (na - 1) / na
  vb = sum((x - mb) ** 2 for x in b) / (nb - 1) / nb
  se = math.sqrt(va + vb)
  if se == 0.0:
    lo = hi = diff
    dof = math.inf
  else:
    dof = se ** 4 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
    half = float(sps.t.ppf(0.5 + level / 2, dof)) * se
    lo, hi = diff - half, diff + half
  verdict = "supported" if lo > 0 else "refuted" if hi < 0 else "undecided"
  return {"diff": diff, "lo": lo, "hi": hi, "dof": dof, "verdict": verdict}
