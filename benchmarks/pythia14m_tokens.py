"""Tokens/s of one sbjax train step (fwd+bwd+AdamW) for the pythia-14m preset at 8x256 on CPU.

Run: PYTHONPATH=. python benchmarks/pythia14m_tokens.py [LOSS_CHUNK]   (default 0 = full logits)
The side-by-side comparison with HF transformers is benchmarks/train_step_vs_hf.py.
"""
import dataclasses
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from sbjax import configs
from sbjax.model import Model
from sbjax.optim import make_optimizer
from sbjax.train import make_train_step


def main(lc: int) -> None:
  """Time 6 steps after a compile step at loss_chunk ``lc`` and print the median."""
  cfg = configs.load("pythia-14m")
  mc = dataclasses.replace(cfg.model, loss_chunk=lc)
  tc = dataclasses.replace(cfg.train, batch_size=8, seq_len=256, warmup_steps=0, steps=100)
  m = Model(mc)
  p = m.init(jax.random.key(0), 1, 256)
  tx = make_optimizer(tc, mc, p)
  o = tx.init(p)
  step = jax.jit(make_train_step(m, tx, 1, False), donate_argnums=(0, 1))
  b = jnp.asarray(np.random.default_rng(0).integers(0, 50304, (8, 257)), jnp.int32)
  p, o, mm = step(p, o, b)
  mm["loss"].block_until_ready()
  ts = []
  for _ in range(6):
    t = time.perf_counter()
    p, o, mm = step(p, o, b)
    mm["loss"].block_until_ready()
    ts.append(time.perf_counter() - t)
  print("loss_chunk", lc, "tokens/s median", 8 * 256 / np.median(ts), "step s", np.median(ts))


if __name__ == "__main__":
  main(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
