"""Checkpoint overhead per save, synchronous vs asynchronous orbax (NOT a test).

Saves the params + AdamW state of ``--config`` (default pythia-14m, ~170 MB) ``--saves``
times with ``sbjax.checkpoint.make_manager(async_save=False/True)``, one real train step
(8 × 256) after each save. Reported per save: ``blocked_s``, the time ``save()`` holds the
training loop, and ``step_after_s``, the following train step (async writes compete with
it for the CPU); ``final_wait_s`` is the last ``wait_until_finished``. Medians.

    PYTHONPATH=. python benchmarks/ckpt_overhead.py
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time

import _bench  # noqa: F401
from _bench import emit, machine, median, table


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--config", default="pythia-14m")
  ap.add_argument("--saves", type=int, default=5)
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--seq", type=int, default=256)
  a = ap.parse_args()

  import jax
  import jax.numpy as jnp
  import numpy as np

  from sbjax import checkpoint as ckpt
  from sbjax import configs
  from sbjax.model import Model
  from sbjax.optim import make_optimizer
  from sbjax.train import make_train_step

  cfg = configs.load(a.config)
  mc = dataclasses.replace(cfg.model, loss_chunk=1024)
  tc = dataclasses.replace(cfg.train, warmup_steps=0, steps=1000, ckpt_every=1,
                           ckpt_log_spaced=False)
  model = Model(mc)
  p = model.init(jax.random.key(0), 1, a.seq)
  tx = make_optimizer(tc, mc, p)
  o = tx.init(p)
  step = jax.jit(make_train_step(model, tx, 1, False))
  b = jnp.asarray(np.random.default_rng(0).integers(0, mc.vocab_size, (a.batch, a.seq + 1)),
                  jnp.int32)
  p, o, m = step(p, o, b, 0)
  m["loss"].block_until_ready()
  nbytes = sum(x.nbytes for x in jax.tree.leaves((p, o)))
  for async_save in (False, True):
    with tempfile.TemporaryDirectory() as d:
      mngr = ckpt.make_manager(d, tc, async_save=async_save)
      blocked, after = [], []
      for i in range(1, a.saves + 1):
        t = time.perf_counter()
        ckpt.save(mngr, i, p, o, {"step": i})
        blocked.append(time.perf_counter() - t)
        t = time.perf_counter()
        p, o, m = step(p, o, b, i)
        m["loss"].block_until_ready()
        after.append(time.perf_counter() - t)
      t = time.perf_counter()
      mngr.wait_until_finished()
      final = time.perf_counter() - t
      mngr.close()
    emit({"bench": "ckpt", "mode": "async" if async_save else "sync", "config": a.config,
          "state_mb": round(nbytes / 2 ** 20, 1), "saves": a.saves,
          "blocked_s": round(median(blocked), 3), "step_after_s": round(median(after), 3),
          "final_wait_s": round(final, 3), "all_blocked_s": [round(x, 3) for x in blocked],
          **machine()})
  print(table(["mode", "config", "state_mb", "blocked_s", "step_after_s", "final_wait_s",
               "load_avg_1m"]))


if __name__ == "__main__":
  main()
