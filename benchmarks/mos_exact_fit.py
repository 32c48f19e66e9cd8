r"""The head-alone MoS fit on the exact distributions of a planted MoS language (issue 18,
must-show 1): multi-start Adam from random inits (``head_fit.fit_head_starts``), against the
exact floor of every rank-r head of the same width (r ≤ d).

  PYTHONPATH=. python benchmarks/mos_exact_fit.py [--vocab=64 --rank=3 --n_mix=4 --d=4]
      [--fit_mix=4,16,32 --fit_dim=4,8 --starts=8 --steps=3000 --lr=0.1]

For each (fit_mix M', fit_dim e) it prints the head's parameters, the best and median gap
fit − H over the starts, how many starts end within 1e-3 of H, and the time; then
floor(d) − H (multi-start, converged), which bounds every rank-r head with r ≤ d. The
language has M = n_mix components with e = k + 1 exact (``head_fit.exact_mos``); M' > M or
e > k + 1 is an over-complete head of the same width d. Output: BUILD_NOTES.md / notes.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from sbjax.config import ModelConfig
from sbjax.data.planted_mos import PlantedMoS
from sbjax.heads import head_param_count
from sbjax.heads.mos import MoSHead
from sbjax.studies import floor as fl
from sbjax.studies import head_fit as hf


def _ints(s: str) -> list[int]:
  return [int(x) for x in s.split(",") if x]


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  for name, default in (("vocab", 64), ("rank", 3), ("n_mix", 4), ("d", 4), ("starts", 8),
                        ("steps", 3000)):
    ap.add_argument(f"--{name}", type=int, default=default)
  ap.add_argument("--alpha", type=float, default=8.0)
  ap.add_argument("--lr", type=float, default=0.1)
  ap.add_argument("--init_std", type=float, default=0.2)
  ap.add_argument("--fit_mix", default="4,16,32")
  ap.add_argument("--fit_dim", default="4,8")
  a = ap.parse_args(argv)
  lang = PlantedMoS(a.vocab, a.rank, alpha=a.alpha, n_mix=a.n_mix, seed=0)
  print(f"planted_mos V={a.vocab} k={a.rank} M={a.n_mix} alpha={a.alpha}: H = {lang.entropy:.5f}")
  print("| M' | e | head params | best gap | median gap | starts < 1e-3 | seconds |")
  print("|---|---|---|---|---|---|---|")
  for m in _ints(a.fit_mix):
    for e in _ints(a.fit_dim):
      mc = ModelConfig(vocab_size=a.vocab, d_model=a.d, n_heads=1, pos="learned",
                       head=MoSHead(n_mix=m, dim=e, act="linear"), init_std=a.init_std)
      t0 = time.perf_counter()
      gaps = hf.fit_head_starts(lang, mc, range(a.starts), steps=a.steps, lr=a.lr)
      print(f"| {m} | {e} | {head_param_count(mc)} | {gaps.min():.5f} | "
            f"{np.median(gaps):.5f} | {int((gaps < 1e-3).sum())}/{a.starts} | "
            f"{time.perf_counter() - t0:.0f} |", flush=True)
  t0 = time.perf_counter()
  res = fl.floor_curve(lang, [a.d], max_iter=3000, restarts=2)[0]
  print(f"floor({a.d}) − H = {res.gap:.5f} (converged {res.converged}, {len(res.starts)} starts, "
        f"{time.perf_counter() - t0:.0f} s); rank-{a.d} head params "
        f"{a.d * (a.vocab + a.d)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
