"""The collapse pass at V = 32,000 classes stays far below one K x K grid of memory
(sbjax.studies.collapse_grid.collapse_pass, as experiments/collapse runs it).

The pass runs in a fresh interpreter (this file as a script) at XLA's default optimisation
level: it is compute-bound (5.1e8 class pairs), and the suite's -O0 (tests/conftest.py) made it
3x slower (97 s of CPU against 33 s); a fresh process also measures its memory alone."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from sbjax.config import ModelConfig
from sbjax.model import Model
from sbjax.studies import collapse_grid as cg
from tests._xla import TEST_XLA_FLAGS


def _stacked_random_params(mc, m, t=16):
  model = Model(mc)
  keys = jax.vmap(jax.random.key)(jnp.arange(m))
  return jax.jit(jax.vmap(lambda k: model.init(k, 1, t)))(keys)


def _rss_kib(field="VmRSS"):
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1])
  raise RuntimeError(f"{field} not in /proc/self/status")


def _peak_rss_delta_mib(fn):
  """Peak resident memory during fn() minus the resident memory before it (MiB): the
  kernel's high-water mark reset via /proc/self/clear_refs, else a 2 ms sampler."""
  base = _rss_kib()
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
    out = fn()
    return out, (_rss_kib("VmHWM") - base) / 1024
  except OSError:
    peak, stop = [base], threading.Event()

    def sample():
      while not stop.is_set():
        peak[0] = max(peak[0], _rss_kib())
        time.sleep(0.002)

    th = threading.Thread(target=sample)
    th.start()
    try:
      out = fn()
    finally:
      stop.set()
      th.join()
    return out, (peak[0] - base) / 1024


def _measure() -> dict:
  """V = 32,000 classes, d = 8, every class seen: the whole pass (forward chunks, the three
  passes, 5.1e8 class pairs) must stay far below one K x K float32 grid.

  Bound: K^2 * 4 B = 4096 MB for the grid; the streamed pass holds the model (V d), the
  per-class accumulators (V d + 3 V, a few MB), a forward chunk's logits
  (2 windows * 64 tokens * V * 4 B = 16 MB, a few copies through log-softmax), one
  512 x 512 pair tile with ~30 temporaries (~30 MB) and XLA's compile-time working
  memory (~100-300 MB on CPU). 1024 MB = a quarter of the grid leaves room for the
  compiler while any K x K intermediate (4096 MB) would fail it."""
  v, d, t = 32_000, 8, 64
  mc = ModelConfig(vocab_size=v, d_model=d, n_layers=1, n_heads=1, max_len=t, head="tied")
  params = jax.device_get(_stacked_random_params(mc, 1))
  rng = np.random.default_rng(0)
  labels = np.concatenate([rng.permutation(v), rng.integers(0, v, 8 * t * 2 + 1)])
  n_win = (labels.size - 1) // t
  tr = labels[np.arange(n_win)[:, None] * t + np.arange(t + 1)].astype(np.int32)
  va = tr[:8]
  res, delta = _peak_rss_delta_mib(lambda: cg.collapse_pass(mc, params, tr, va, chunk=2,
                                                            block_size=512))
  return {"k": int(res[0]["n_classes"]), "delta_mib": float(delta),
          "nc1": float(res[0]["nc1_log10_cdnv"]), "nc4": float(res[0]["nc4_agreement"])}


def test_32k_class_pass_memory_bound():
  """See _measure; run with XLA's default flags (not the suite's) in a fresh interpreter."""
  env = dict(os.environ)
  env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split()
                              if f not in TEST_XLA_FLAGS.split())
  root = Path(__file__).resolve().parents[2]
  env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
  out = subprocess.run([sys.executable, __file__], env=env, cwd=root, check=True,
                       capture_output=True, text=True, timeout=900).stdout
  m = json.loads(out.strip().splitlines()[-1])
  k, delta = m["k"], m["delta_mib"]
  assert k >= 31_000  # (nearly) every class analysed: the pair pass is K ~ 32k
  grid_mib = k * k * 4 / 2 ** 20
  print(f"32k pass: K={k}, peak RSS delta {delta:.0f} MiB; a K x K f32 grid: {grid_mib:.0f} MiB")
  assert delta < 1024, f"peak RSS grew by {delta:.0f} MiB"
  assert np.isfinite(m["nc1"]) and 0.0 <= m["nc4"] <= 1.0


if __name__ == "__main__":
  print(json.dumps(_measure()))
