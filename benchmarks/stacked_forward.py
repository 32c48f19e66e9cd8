"""Eval forward over K stacked checkpoints: one vmapped program vs a Python loop (NOT a test).

K ``pythia-14m`` checkpoints (independent random inits: the speed does not depend on the
values) on one B × T batch (default 16 × 256): each side returns every checkpoint's mean
next-token loss and accuracy.

- ``loop_full``: ``for k: jit(model.loss)(params_k, batch)`` with full B·T×V logits
  (``loss_chunk=0``: the plain forward, logits then log_softmax);
- ``loop_chunked``: the same loop with ``loss_chunk=--chunk`` (token-chunked
  cross-entropy, V swept in cached tiles);
- ``vmap_chunked``: ``jit(vmap(model.loss))`` over the stacked params, chunked (the
  K×B·T×V logits of a vmapped full-logits forward would be 13 GB at K=16);
- ``map_chunked``: ``jit(lax.map(model.loss))`` over the stacked params: one program that
  runs the checkpoints one after another (each tile stays K× smaller than under vmap).

Sides run interleaved, median of ``--reps`` after warm-up; ``speedup`` is loop_full / side,
``vs_loop_chunked`` is loop_chunked / side (what stacking adds over the same forward).

    PYTHONPATH=. python benchmarks/stacked_forward.py            # K=16, 16×256
    PYTHONPATH=. python benchmarks/stacked_forward.py --k=4 --batch=4 --reps=2   # quick
"""

from __future__ import annotations

import argparse
import dataclasses

import _bench  # noqa: F401
from _bench import emit, interleaved, machine, median, table


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--config", default="pythia-14m")
  ap.add_argument("--k", type=int, default=16)
  ap.add_argument("--batch", type=int, default=16)
  ap.add_argument("--seq", type=int, default=256)
  ap.add_argument("--chunk", type=int, default=1024, help="tokens per loss chunk")
  ap.add_argument("--reps", type=int, default=5)
  a = ap.parse_args()

  import jax
  import jax.numpy as jnp
  import numpy as np

  from sbjax import configs
  from sbjax.model import Model

  mc = configs.load(a.config).model
  # the preset's own loss_chunk (1024 for pythia) must not leak into the full-logits side
  full = Model(dataclasses.replace(mc, loss_chunk=0))
  chunked = Model(dataclasses.replace(mc, loss_chunk=a.chunk))
  init = jax.jit(lambda k: full.init(k, 1, a.seq))
  ps = [init(jax.random.key(i)) for i in range(a.k)]
  stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *ps)
  batch = jnp.asarray(np.random.default_rng(0).integers(0, mc.vocab_size, (a.batch, a.seq + 1)),
                      jnp.int32)
  f_full = jax.jit(lambda p, b: full.loss(p, b)[1])
  f_chunk = jax.jit(lambda p, b: chunked.loss(p, b)[1])
  f_vmap = jax.jit(jax.vmap(lambda p, b: chunked.loss(p, b)[1], in_axes=(0, None)))
  f_map = jax.jit(lambda st, b: jax.lax.map(lambda p: chunked.loss(p, b)[1], st))
  out = {}

  def loop(f, name):
    def run():
      res = [f(p, batch) for p in ps]
      out[name] = np.array([[float(r["loss"]), float(r["acc"])] for r in res])
    return run

  def stacked_side(f, name):
    def run():
      r = f(stacked, batch)
      out[name] = np.stack([np.asarray(r["loss"]), np.asarray(r["acc"])], 1)
    return run

  fns = {"loop_full": loop(f_full, "loop_full"), "loop_chunked": loop(f_chunk, "loop_chunked"),
         "vmap_chunked": stacked_side(f_vmap, "vmap_chunked"),
         "map_chunked": stacked_side(f_map, "map_chunked")}
  times = interleaved(fns, a.reps)
  for name in ("loop_chunked", "vmap_chunked", "map_chunked"):  # all sides: the same numbers
    np.testing.assert_allclose(out[name], out["loop_full"], rtol=1e-4, atol=1e-5)
  ref, ref_chunked = median(times["loop_full"]), median(times["loop_chunked"])
  for name, ts in times.items():
    emit({"bench": "stacked_forward", "side": name, "config": a.config, "k": a.k,
          "batch": a.batch, "seq": a.seq, "chunk": a.chunk if name != "loop_full" else 0,
          "median_s": round(median(ts), 4), "speedup": round(ref / median(ts), 3),
          "vs_loop_chunked": round(ref_chunked / median(ts), 3),
          "tokens_per_s": round(a.k * a.batch * a.seq / median(ts), 1), "reps": a.reps,
          "all_s": [round(t, 4) for t in ts], **machine()})
  print(table(["side", "k", "batch", "seq", "chunk", "median_s", "speedup", "vs_loop_chunked",
               "tokens_per_s", "load_avg_1m"]))


if __name__ == "__main__":
  main()
