"""sbjax.metrics against plain baselines and the authors' way (NOT a test).

    PYTHONPATH=. python benchmarks/metrics_bench.py --quick --write_docs   # ~2 min on 2 CPUs
    PYTHONPATH=. python benchmarks/metrics_bench.py --cases=cka,spectra     # full sizes

Cases (each baseline measured in the same run; ``speedup`` = baseline time / sbjax time):

- ``spectra``: singular values of H LM-head-like matrices, ``jit(vmap(singular_values))`` per
  method vs a numpy ``svd`` loop (accuracy: the top 100 against numpy's);
- ``collapse``: NC1-NC4 of N streamed tokens, K classes: sbjax (float32, segment sums and
  blocked pairs) vs the authors' ``neural-collapse`` way in torch float64 (one-hot matmuls,
  the full K×K grid; ``_metrics_baselines.TorchCollapse``); each side in its own process, so
  its peak RSS is its own (jit compile and data generation excluded from ``timed_s``);
- ``collapse_vmap``: NC1-NC4 of C checkpoints in one ``jit(vmap(neural_collapse))`` vs a loop
  of ``collapse_metrics``;
- ``cka``: CKA of K checkpoints × 12 layers to a reference, ``jit(cka_to_reference_by_layer)``
  vs Kornblith et al.'s numpy feature-space CKA in a loop.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from functools import partial

import numpy as np

from _bench import emit, peak_rss_mb, table, timeit, write_docs

COLS = ["case", "impl", "shape", "time_s", "speedup", "accuracy", "peak_rss_mb"]
KEYS = ["nc1_cdnv", "nc1_log10_cdnv", "nc2_norm_cov", "nc2_cos_mean", "nc2_cos_std", "etf_error",
        "gnc2_log_kernel_mean", "gnc2_log_kernel_var", "nc3_cos_mean", "unc3_cos_cov",
        "dual_error", "nc4_agreement"]


def bench_spectra(a):
  import jax

  from _metrics_baselines import numpy_svd_loop
  from sbjax.metrics import singular_values

  h, v, d = a.heads, a.spec_v, a.spec_d
  rng = np.random.default_rng(0)
  scale = np.geomspace(1.0, 1e-2, d).astype(np.float32)  # a spectrum over ~2 decades
  heads = np.stack([rng.standard_normal((v, d), dtype=np.float32) * scale for _ in range(h)])
  t_base, _ = timeit(lambda: numpy_svd_loop(heads), 1, warm=False)
  ref = np.stack(numpy_svd_loop(heads[:2])).astype(np.float64)[:, :100]
  emit({"case": "spectra", "impl": "numpy.linalg.svd loop", "shape": [h, v, d],
        "time_s": t_base})
  for method in a.spec_methods.split(","):
    f = jax.jit(jax.vmap(lambda w, m=method: singular_values(w, m)))
    med, _ = timeit(lambda: f(heads).block_until_ready(), a.reps)
    s = np.asarray(f(heads))[:2, :100].astype(np.float64)
    emit({"case": "spectra", "impl": f"sbjax singular_values({method!r})", "shape": [h, v, d],
          "time_s": med, "speedup": t_base / med,
          "accuracy": float(np.max(np.abs(s - ref) / ref))})


def gen_chunks(n, k, d, chunk, seed):
  """Deterministic LM-like tokens: Zipf classes, class centres + noise."""
  centres = np.random.default_rng(1234).standard_normal((k, d), dtype=np.float32)
  cdf = np.cumsum(1.0 / np.arange(1, k + 1))
  cdf /= cdf[-1]
  for i, s in enumerate(range(0, n, chunk)):
    r = np.random.default_rng(seed * 100003 + i)
    m = min(chunk, n - s)
    y = np.minimum(np.searchsorted(cdf, r.random(m)), k - 1).astype(np.int32)
    yield centres[y] + 0.7 * r.standard_normal((m, d), dtype=np.float32), y


def make_w(k, d):
  c = np.random.default_rng(1234).standard_normal((k, d), dtype=np.float32)
  return c + 0.5 * np.random.default_rng(99).standard_normal((k, d), dtype=np.float32)


def _timed(clock: list, f, *args, **kw):
  """f(*args, **kw) with its seconds added to clock[0]."""
  t0 = time.perf_counter()
  out = f(*args, **kw)
  clock[0] += time.perf_counter() - t0
  return out


def _padded(x, y, chunk):
  pad = chunk - len(y)
  return (np.pad(x, ((0, pad), (0, 0))), np.pad(y, (0, pad)), np.arange(chunk) < len(y))


def sbjax_collapse(a, w):
  """The streamed sbjax pipeline: (timed seconds, scalar metrics)."""
  import jax
  import jax.numpy as jnp

  from sbjax import metrics as C

  k, d, chunk, clock = a.k, a.d, a.chunk, [0.0]
  blocked = lambda f: lambda *x, **kw: jax.block_until_ready(f(*x, **kw))  # noqa: E731
  upd, vupd = blocked(jax.jit(C.mean_update)), blocked(jax.jit(C.var_update))
  nupd = blocked(jax.jit(C.nc4_update, static_argnames=("chunk_size",)))
  metrics = blocked(C.collapse_metrics_from_stats)
  zx, zy, zv = np.zeros((chunk, d), np.float32), np.zeros(chunk, np.int32), np.zeros(chunk, bool)
  upd(C.mean_init(k, d), zx, zy, zv)  # compiles, untimed
  vupd(C.var_init(k), zx, zy, jnp.zeros((k, d)), zv)
  st = C.mean_init(k, d)
  for x, y in gen_chunks(a.n, k, d, chunk, 0):
    st = _timed(clock, upd, st, *_padded(x, y, chunk))
  means, counts = _timed(clock, blocked(C.class_means), st)
  vs = C.var_init(k)
  for x, y in gen_chunks(a.n, k, d, chunk, 0):
    px, py, pv = _padded(x, y, chunk)
    vs = _timed(clock, vupd, vs, px, py, means, pv)
  var = _timed(clock, blocked(C.class_variances), vs)
  counts = np.asarray(counts)
  wr, mr, wv, mv = _timed(clock, blocked(C.nc4_search_set), means, counts, w)
  nc = C.nc4_init(k)
  search = dict(w_valid=wv, mean_valid=mv, chunk_size=2048)
  n0 = min(chunk, a.nval)
  nupd(nc, zx[:n0], zy[:n0], wr, mr, **search)  # compiles, untimed
  metrics(means, var, counts, w, nc4=nc, options=C.CollapseOptions(block_size=a.block))
  for x, y in gen_chunks(a.nval, k, d, chunk, 1):
    nc = _timed(clock, nupd, nc, x, y, wr, mr, **search)
  m = _timed(clock, metrics, means, var, counts, w, nc4=nc,
             options=C.CollapseOptions(block_size=a.block)).to_dict()
  return clock[0], {key: float(m[key]) for key in KEYS}


def torch_collapse(a, w):
  """The authors' way in torch float64: (timed seconds, metrics)."""
  import torch

  from _metrics_baselines import TorchCollapse

  torch.set_num_threads(os.cpu_count() or 1)
  tc, clock = TorchCollapse(a.k, a.d), [0.0]
  t = lambda f, *args: _timed(clock, f, *args)  # noqa: E731
  for x, y in gen_chunks(a.n, a.k, a.d, a.chunk, 0):
    t(tc.mean_update, x, y)
  tc.finish_means()
  for x, y in gen_chunks(a.n, a.k, a.d, a.chunk, 0):
    t(tc.var_update, x, y)
  for x, _ in gen_chunks(a.nval, a.k, a.d, a.chunk, 1):
    t(tc.nc4_update, x, w)
  return clock[0], t(tc.metrics, w)


def collapse_worker(a):
  """One side in this process; prints its time, metrics and peak RSS as one JSON line."""
  timed, m = (sbjax_collapse if a.worker == "sbjax" else torch_collapse)(a, make_w(a.k, a.d))
  print("RESULT " + json.dumps({"timed_s": timed, "rss_mb": peak_rss_mb(), "metrics": m}),
        flush=True)


def run_worker(a, side):
  cmd = [sys.executable, os.path.abspath(__file__), f"--worker={side}", f"--k={a.k}",
         f"--n={a.n}", f"--d={a.d}", f"--chunk={a.chunk}", f"--nval={a.nval}",
         f"--block={a.block}"]
  out = subprocess.run(cmd, capture_output=True, text=True)
  line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
  if not line:
    raise RuntimeError(f"{side} worker failed:\n{out.stderr[-3000:]}")
  return json.loads(line[-1][7:])


def bench_collapse(a):
  js, tb = run_worker(a, "sbjax"), run_worker(a, "torch")
  shape = {"shape": [a.n, a.k, a.d]}
  emit({"case": "collapse", "impl": "authors' way, torch float64 (one-hot, full K×K)", **shape,
        "time_s": tb["timed_s"], "peak_rss_mb": tb["rss_mb"]})
  rel = max(abs(js["metrics"][k] - tb["metrics"][k]) / max(abs(tb["metrics"][k]), 1e-12)
            for k in KEYS)
  emit({"case": "collapse", "impl": "sbjax float32 (segment sums, blocked pairs)", **shape,
        "time_s": js["timed_s"], "peak_rss_mb": js["rss_mb"],
        "speedup": tb["timed_s"] / js["timed_s"], "accuracy": rel})


def bench_collapse_vmap(a):
  import jax

  from sbjax import metrics as C

  kc, n, v, d = a.vmap_ckpts, a.vmap_n, a.vmap_k, a.d
  (x, y), = gen_chunks(n, v, d, n, 0)
  rng = np.random.default_rng(5)
  feats = np.stack([x * (1.0 + 0.1 * i) + 0.2 * i * rng.standard_normal(x.shape, dtype=np.float32)
                    for i in range(kc)])
  w = np.stack([make_w(v, d) * (1.0 + 0.05 * i) for i in range(kc)])
  val, vy = feats[:, : n // 4], y[: n // 4]
  kern = jax.jit(jax.vmap(partial(C.neural_collapse, options=C.CollapseOptions(block_size=a.block)),
                          in_axes=(0, None, 0, 0, None)))
  med_v, _ = timeit(lambda: jax.block_until_ready(kern(feats, y, w, val, vy)), a.reps)

  def loop():
    return [C.collapse_metrics(feats[i], y, w[i], val[i], vy,
                              options=C.CollapseOptions(block_size=a.block)).to_dict()
            for i in range(kc)]

  med_l, _ = timeit(loop, a.reps)
  got, want = jax.device_get(kern(feats, y, w, val, vy)), loop()
  keys = ["nc1_cdnv", "nc2_norm_cov", "nc2_cos_mean", "etf_error", "nc3_cos_mean", "dual_error",
          "nc4_agreement"]
  rel = max(abs(float(getattr(got, k)[i]) - want[i][k]) / max(abs(want[i][k]), 1e-12)
            for k in keys for i in range(kc))
  shape = [kc, n, v, d]
  emit({"case": "collapse_vmap", "impl": "loop of collapse_metrics", "shape": shape,
        "time_s": med_l})
  emit({"case": "collapse_vmap", "impl": "sbjax jit(vmap(neural_collapse))", "shape": shape,
        "time_s": med_v, "speedup": med_l / med_v, "accuracy": rel})


def bench_cka(a):
  import jax

  from _metrics_baselines import numpy_cka
  from sbjax.metrics import cka_to_reference_by_layer

  kk, ll, n, d = a.cka_k, 12, 128, 768
  rng = np.random.default_rng(0)
  acts = rng.standard_normal((kk, ll, n, d), dtype=np.float32)
  ref = acts[-1] + 0.3 * rng.standard_normal((ll, n, d), dtype=np.float32)

  def base():
    return np.array([[numpy_cka(acts[i, j], ref[j]) for j in range(ll)] for i in range(kk)])

  t_base, _ = timeit(base, a.reps, warm=False)
  f = jax.jit(cka_to_reference_by_layer)
  med, _ = timeit(lambda: f(acts, ref).block_until_ready(), a.reps)
  err = float(np.max(np.abs(np.asarray(f(acts, ref)) - base())))
  emit({"case": "cka", "impl": "numpy loop (Kornblith feature-space)", "shape": [kk, ll, n, d],
        "time_s": t_base})
  emit({"case": "cka", "impl": "sbjax jit(cka_to_reference_by_layer)", "shape": [kk, ll, n, d],
        "time_s": med, "speedup": t_base / med, "accuracy": err})


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--quick", action="store_true", help="small sizes (~2 min on 2 CPUs)")
  p.add_argument("--cases", default="spectra,collapse,collapse_vmap,cka")
  p.add_argument("--reps", type=int, default=5)
  p.add_argument("--heads", type=int, default=16)
  p.add_argument("--spec_v", type=int, default=50_000)
  p.add_argument("--spec_d", type=int, default=512)
  p.add_argument("--spec_methods", default="gram,auto,gram_refine")
  p.add_argument("--n", type=int, default=1_000_000)
  p.add_argument("--k", type=int, default=8192)
  p.add_argument("--d", type=int, default=256)
  p.add_argument("--chunk", type=int, default=65_536)
  p.add_argument("--nval", type=int, default=65_536)
  p.add_argument("--block", type=int, default=512)
  p.add_argument("--vmap_ckpts", type=int, default=8)
  p.add_argument("--vmap_n", type=int, default=65_536)
  p.add_argument("--vmap_k", type=int, default=8192)
  p.add_argument("--cka_k", type=int, default=32)
  p.add_argument("--write_docs", action="store_true", help="replace this benchmark's table "
                 "in docs/benchmarks.md")
  p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
  a = p.parse_args(argv)
  if a.quick:
    a.heads, a.spec_v, a.spec_d = 4, 8192, 256
    a.n, a.k, a.nval = 200_000, 2048, 16_384
    a.vmap_ckpts, a.vmap_n, a.vmap_k = 4, 8192, 1024
    a.cka_k, a.reps = 8, 3
  return a


def main(argv=None):
  a = parse_args(argv)
  if a.worker:
    return collapse_worker(a)
  cases = {"cka": bench_cka, "spectra": bench_spectra, "collapse": bench_collapse,
           "collapse_vmap": bench_collapse_vmap}
  for name in a.cases.split(","):
    cases[name](a)
  print(table(COLS))
  if a.write_docs:
    import jax

    write_docs("metrics_bench", "Metrics vs numpy and the authors' code",
               "speedup: the baseline's time over sbjax's (the row above it, same run); "
               "accuracy: the largest relative difference to the baseline (cka: absolute).\n\n"
               + table(COLS), device=jax.default_backend())


if __name__ == "__main__":
  main()
