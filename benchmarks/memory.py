"""Training memory: peak RSS with and without remat, logits memory with and without
token-chunked cross-entropy (NOT a test).

1. Peak RSS (``ru_maxrss`` of a fresh subprocess per case: compile + one train step) of
   training ``--config`` (default pythia-70m) at ``--batch`` × ``--seq`` (8 × 512) for
   ``model.remat`` none / full / dots, with full logits, and none with ``loss_chunk``.
2. XLA's compiled memory analysis (``jit(grad).lower().compile().memory_analysis()``:
   temporaries, i.e. activations and logits) of the loss gradient at V = 50304 with
   full logits vs ``loss_chunk``, and the size of one B·T×V float32 logits array.

    PYTHONPATH=. python benchmarks/memory.py
    PYTHONPATH=. python benchmarks/memory.py --config=pythia-14m --batch=2 --seq=64   # quick
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import _bench
from _bench import emit, machine, table


def child(a):
  """One case in this process: compile, one step, print peak RSS and compiled temp bytes."""
  import dataclasses
  import resource
  import time

  import jax
  import jax.numpy as jnp
  import numpy as np

  from sbjax import configs
  from sbjax.model import Model
  from sbjax.optim import make_optimizer
  from sbjax.train import make_train_step

  cfg = configs.load(a.config)
  mc = dataclasses.replace(cfg.model, remat=a.remat, loss_chunk=a.loss_chunk)
  tc = dataclasses.replace(cfg.train, warmup_steps=0, steps=100)
  model = Model(mc)
  p = jax.jit(lambda k: model.init(k, 1, a.seq))(jax.random.key(0))
  tx = make_optimizer(tc, mc, p)
  o = tx.init(p)
  b = jnp.asarray(np.random.default_rng(0).integers(0, mc.vocab_size, (a.batch, a.seq + 1)),
                  jnp.int32)
  step = jax.jit(make_train_step(model, tx, 1, False), donate_argnums=(0, 1))
  compiled = step.lower(p, o, b, 0).compile()
  mem = compiled.memory_analysis()
  rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  t = time.perf_counter()
  p, o, m = compiled(p, o, b, 0)
  m["loss"].block_until_ready()
  print("RESULT " + json.dumps({
      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
      "rss_before_step_mb": round(rss_before / 1024, 1),
      "temp_mb": round(mem.temp_size_in_bytes / 2 ** 20, 1),
      "args_mb": round(mem.argument_size_in_bytes / 2 ** 20, 1),
      "step_s": round(time.perf_counter() - t, 2), "loss": float(m["loss"])}), flush=True)


def logits_memory(config, batch, seq, chunk):
  import dataclasses

  import jax
  import jax.numpy as jnp

  from sbjax import configs
  from sbjax.model import Model

  mc = configs.load(config).model
  params = jax.eval_shape(lambda k: Model(mc).init(k, 1, 8), jax.random.key(0))
  b = jax.ShapeDtypeStruct((batch, seq + 1), jnp.int32)
  logits_mb = batch * seq * mc.vocab_size * 4 / 2 ** 20
  for lc in (0, chunk):
    m = Model(dataclasses.replace(mc, loss_chunk=lc))
    for what, f in (("loss_grad", jax.grad(lambda p, x: m.loss(p, x)[0])),
                    ("loss_eval", lambda p, x: m.loss(p, x)[0])):
      mem = jax.jit(f).lower(params, b).compile().memory_analysis()
      emit({"bench": "memory", "case": f"{what} loss_chunk={lc}", "config": config,
            "batch": batch, "seq": seq, "vocab": mc.vocab_size,
            "temp_mb": round(mem.temp_size_in_bytes / 2 ** 20, 1),
            "one_logits_array_mb": round(logits_mb, 1)})


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--config", default="pythia-70m")
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--seq", type=int, default=512)
  ap.add_argument("--chunk", type=int, default=1024)
  ap.add_argument("--remat", default="")
  ap.add_argument("--loss_chunk", type=int, default=0)
  ap.add_argument("--child", action="store_true")
  a = ap.parse_args()
  if a.child:
    return child(a)
  cases = [("none", 0), ("full", 0), ("dots", 0), ("none", a.chunk), ("full", a.chunk)]
  for remat, lc in cases:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", f"--config={a.config}",
           f"--batch={a.batch}", f"--seq={a.seq}", f"--remat={remat}", f"--loss_chunk={lc}"]
    env = dict(os.environ, PYTHONPATH=_bench.ROOT)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    res = [json.loads(x[7:]) for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    rec = {"bench": "memory", "case": f"train remat={remat} loss_chunk={lc}", "config": a.config,
           "batch": a.batch, "seq": a.seq, **(res[0] if res else
                                               {"error": r.stderr.strip().splitlines()[-1:]}),
           **machine()}
    emit(rec)
  logits_memory(a.config, a.batch, a.seq, a.chunk)
  print(table(["case", "config", "batch", "seq", "peak_rss_mb", "temp_mb", "step_s",
               "one_logits_array_mb", "load_avg_1m"]))


if __name__ == "__main__":
  main()
