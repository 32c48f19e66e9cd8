"""Benchmark sbjax.metrics against plain baselines (NOT a test).

Usage:
    python benchmarks/metrics_bench.py                 # full sizes (slow baselines)
    python benchmarks/metrics_bench.py --quick         # shrunken sizes
    python benchmarks/metrics_bench.py --cases cka,spectra --baseline-reps 1

Prints one JSON line per case (prefixed "BENCH ") and a table at the end.
Timings are medians over --reps repetitions after one warm-up (compile) call
(collapse: one streamed run per side, jit compile excluded via a warm-up on a
dummy chunk, data generation excluded; wall_s includes everything);
the slow baselines use --baseline-reps (default 1 for the SVD loop and the
torch collapse pipeline, which take minutes).  Ratios are measured in the same
run.  Collapse sides run in separate subprocesses so that their peak RSS
(VmHWM of the child process) can be compared.  ``collapse_vmap``: NC1-NC4 of
K checkpoints in one jit(vmap(neural_collapse)) call against a loop of the host
collapse_metrics (compiled, median of --reps).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from functools import partial

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

ROWS = []


def emit(rec):
    ROWS.append(rec)
    print("BENCH " + json.dumps(rec), flush=True)


def timeit(fn, reps, warm=True):
    if warm:
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), ts


# ----------------------------------------------------------------- spectra
def bench_spectra(a):
    import jax
    import jax.numpy as jnp

    from _metrics_baselines import numpy_svd_loop
    from sbjax.metrics import singular_values

    h, v, d = a.heads, a.spec_v, a.spec_d
    rng = np.random.default_rng(0)
    # LM-head-like: graded column scales so the spectrum decays over ~2 decades
    scale = np.geomspace(1.0, 1e-2, d).astype(np.float32)
    heads = np.stack([rng.standard_normal((v, d), dtype=np.float32) * scale for _ in range(h)])
    t_base, ts = timeit(lambda: numpy_svd_loop(heads), a.baseline_reps, warm=False)
    ref = np.stack(numpy_svd_loop(heads[:2])).astype(np.float64)  # reference for accuracy (heads 0,1)
    emit({"case": "spectra", "impl": "numpy.linalg.svd loop", "shape": [h, v, d], "median_s": t_base, "reps": len(ts)})
    xh = jnp.asarray(heads)
    for method in a.spec_methods.split(",") + ["svd"]:
        if method == "svd" and not a.jax_svd:
            continue
        f = jax.jit(jax.vmap(lambda w: singular_values(w, method)))
        med, ts = timeit(lambda: f(xh).block_until_ready(), a.reps)
        s = np.asarray(f(xh))[:2].astype(np.float64)
        err = float(np.max(np.abs(s[:, :100] - ref[:, :100]) / ref[:, :100]))
        emit({"case": "spectra", "impl": f"sbjax jit(vmap(singular_values, {method!r}))", "shape": [h, v, d],
              "median_s": med, "reps": len(ts), "speedup": t_base / med, "top100_max_rel_err": err})
    if a.x64_spectra:
        code = (
            "import jax, jax.numpy as jnp, numpy as np, time, json, sys; jax.config.update('jax_enable_x64', True);"
            "sys.path.insert(0, '.');"
            "from sbjax.metrics import singular_values;"
            f"rng=np.random.default_rng(0); sc=np.geomspace(1.0,1e-2,{d}).astype(np.float32);"
            f"x=jnp.asarray(np.stack([rng.standard_normal(({v},{d}),dtype=np.float32)*sc for _ in range({h})]));"
            "f=jax.jit(jax.vmap(lambda w: singular_values(w,'gram64'))); f(x).block_until_ready();"
            "ts=[]\nfor _ in range(%d):\n t=time.perf_counter(); f(x).block_until_ready(); ts.append(time.perf_counter()-t)\n"
            "print(json.dumps({'median_s': sorted(ts)[len(ts)//2], 's': np.asarray(f(x))[:2,:100].tolist()}))" % a.reps
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=os.path.dirname(HERE))
        try:
            r = json.loads(out.stdout.strip().splitlines()[-1])
            err = float(np.max(np.abs(np.asarray(r["s"]) - ref[:, :100]) / ref[:, :100]))
            emit({"case": "spectra", "impl": "sbjax gram64 (x64, subprocess)", "shape": [h, v, d],
                  "median_s": r["median_s"], "speedup": t_base / r["median_s"], "top100_max_rel_err": err})
        except Exception:  # noqa: BLE001
            print(out.stderr[-2000:], file=sys.stderr)


# ----------------------------------------------------------------- collapse
def gen_chunks(n, k, d, chunk, seed):
    """Deterministic synthetic LM-like tokens: Zipf classes, centres + noise."""
    rng = np.random.default_rng(1234)
    centres = rng.standard_normal((k, d), dtype=np.float32)
    p = 1.0 / np.arange(1, k + 1)
    p /= p.sum()
    cdf = np.cumsum(p)
    for i, s in enumerate(range(0, n, chunk)):
        r = np.random.default_rng(seed * 100003 + i)
        m = min(chunk, n - s)
        y = np.minimum(np.searchsorted(cdf, r.random(m)), k - 1).astype(np.int32)
        x = centres[y] + 0.7 * r.standard_normal((m, d), dtype=np.float32)
        yield x, y


def padded_chunks(n, k, d, chunk, seed):
    """gen_chunks padded to the static chunk shape: (x, y, valid)."""
    for x, y in gen_chunks(n, k, d, chunk, seed):
        pad = chunk - x.shape[0]
        valid = np.arange(chunk) < x.shape[0]
        if pad:
            x = np.concatenate([x, np.zeros((pad, d), np.float32)])
            y = np.concatenate([y, np.zeros(pad, np.int32)])
        yield x, y, valid


def make_w(k, d):
    rng = np.random.default_rng(99)
    c = np.random.default_rng(1234).standard_normal((k, d), dtype=np.float32)
    return (c + 0.5 * rng.standard_normal((k, d), dtype=np.float32)).astype(np.float32)


def _sbjax_means_vars(a, C, upd, vupd, k, d):
    """The streamed class means, then variances (jitted updates, each chunk timed);
    returns (means, counts, var state, seconds)."""
    timed = 0.0
    st = C.mean_init(k, d)
    for x, y, valid in padded_chunks(a.n, k, d, a.chunk, 0):
        t0 = time.perf_counter()
        st = upd(st, x, y, valid)
        st.sums.block_until_ready()
        timed += time.perf_counter() - t0
    t0 = time.perf_counter()
    means, counts = C.class_means(st)
    vs = C.var_init(k)
    timed += time.perf_counter() - t0
    for x, y, valid in padded_chunks(a.n, k, d, a.chunk, 0):
        t0 = time.perf_counter()
        vs = vupd(vs, x, y, means, valid)
        vs.sq_dev.block_until_ready()
        timed += time.perf_counter() - t0
    return means, counts, vs, timed


def _sbjax_nc4(a, nupd, nc, search, k, d):
    """The NC4 hits of the validation chunks (jitted update, each chunk timed); returns
    (nc4 state, seconds)."""
    wr, mr, wv, mv = search
    timed = 0.0
    for x, y in gen_chunks(a.nval, k, d, a.chunk, 1):
        t0 = time.perf_counter()
        nc = nupd(nc, x, y, wr, mr, w_valid=wv, mean_valid=mv, chunk_size=2048)
        nc.hits.block_until_ready()
        timed += time.perf_counter() - t0
    return nc, timed


def _warm_metrics_s(C, means, var, counts_np, w, nc, block):
    """Warm (compiled) collapse_metrics_from_stats alone, median of 3."""
    ts = []
    for _ in range(3):
        t0 = time.perf_counter()
        C.collapse_metrics_from_stats(means, var, counts_np, w, nc4=nc, options=C.CollapseOptions(block_size=block))
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _sbjax_side(a, w):
    """The sbjax side: (timed seconds, scalar metrics, warm metrics seconds or None)."""
    import jax
    import jax.numpy as jnp

    from sbjax import metrics as C

    k, d, chunk = a.k, a.d, a.chunk
    upd = jax.jit(C.mean_update)
    vupd = jax.jit(C.var_update)
    nupd = jax.jit(C.nc4_update, static_argnames=("chunk_size",))
    # warm-up (compile) on a dummy chunk; compile time is excluded from timed_s
    zx, zy, zv = np.zeros((chunk, d), np.float32), np.zeros(chunk, np.int32), np.zeros(chunk, bool)
    upd(C.mean_init(k, d), zx, zy, zv).sums.block_until_ready()
    vupd(C.var_init(k), zx, zy, jnp.zeros((k, d)), zv).sq_dev.block_until_ready()
    means, counts, vs, timed = _sbjax_means_vars(a, C, upd, vupd, k, d)
    t0 = time.perf_counter()
    var = C.class_variances(vs)
    counts_np = np.asarray(counts)
    wr, mr, wv, mv = C.nc4_search_set(means, counts_np, w)
    nc = C.nc4_init(k)
    timed += time.perf_counter() - t0
    nupd(nc, zx[: min(chunk, a.nval)], zy[: min(chunk, a.nval)], wr, mr, w_valid=wv, mean_valid=mv, chunk_size=2048).hits.block_until_ready()
    opts = C.CollapseOptions(block_size=a.block)
    C.collapse_metrics_from_stats(means, C.class_variances(vs), counts_np, w, nc4=nc, options=opts)  # compile
    nc, t_nc4 = _sbjax_nc4(a, nupd, nc, (wr, mr, wv, mv), k, d)
    timed += t_nc4
    t0 = time.perf_counter()
    m = C.collapse_metrics_from_stats(means, var, counts_np, w, nc4=nc, options=opts).to_dict()
    timed += time.perf_counter() - t0
    t_pairs = _warm_metrics_s(C, means, var, counts_np, w, nc, a.block) if a.time_pairs else None
    m = {key: val for key, val in m.items() if isinstance(val, (int, float))}
    return timed, m, t_pairs


def _torch_side(a, w):
    """The torch baseline side: (timed seconds, metrics, None)."""
    import torch

    from _metrics_baselines import TorchCollapse

    n, k, d, chunk = a.n, a.k, a.d, a.chunk
    timed = 0.0
    torch.set_num_threads(os.cpu_count() or 1)
    tc = TorchCollapse(k, d)
    for x, y in gen_chunks(n, k, d, chunk, 0):
        t0 = time.perf_counter()
        tc.mean_update(x, y)
        timed += time.perf_counter() - t0
    tc.finish_means()
    for x, y in gen_chunks(n, k, d, chunk, 0):
        t0 = time.perf_counter()
        tc.var_update(x, y)
        timed += time.perf_counter() - t0
    for x, y in gen_chunks(a.nval, k, d, chunk, 1):
        t0 = time.perf_counter()
        tc.nc4_update(x, w)
        timed += time.perf_counter() - t0
    t0 = time.perf_counter()
    m = tc.metrics(w)
    timed += time.perf_counter() - t0
    return timed, m, None


def _peak_rss_mb() -> float:
    """This process's peak resident memory (MB)."""
    # VmHWM is per address space and reset at exec (ru_maxrss would inherit the
    # parent's high-water mark across fork+exec on Linux)
    with open("/proc/self/status") as fh:
        hwm = [ln for ln in fh if ln.startswith("VmHWM:")]
    return int(hwm[0].split()[1]) / 1024.0 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def collapse_worker(a):
    """Runs one side in this process; prints a JSON line with time, metrics, RSS."""
    w = make_w(a.k, a.d)
    timed, m, t_pairs = (_sbjax_side if a.worker == "sbjax" else _torch_side)(a, w)
    rss_mb = _peak_rss_mb()
    print("RESULT " + json.dumps({"timed_s": timed, "rss_mb": rss_mb, "metrics": m, "t_metrics_warm_s": t_pairs}), flush=True)


def run_worker(a, side, k, n, time_pairs=False):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", side, "--k", str(k), "--n", str(n), "--d", str(a.d),
           "--chunk", str(a.chunk), "--nval", str(a.nval), "--block", str(a.block)]
    if time_pairs:
        cmd.append("--time-pairs")
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if not line:
        raise RuntimeError(f"{side} worker failed:\n{out.stderr[-3000:]}")
    r = json.loads(line[-1][7:])
    r["wall_s"] = wall
    return r


def bench_collapse(a):
    keys = ["nc1_cdnv", "nc1_log10_cdnv", "nc2_norm_cov", "nc2_cos_mean", "nc2_cos_std", "etf_error",
            "gnc2_log_kernel_mean", "gnc2_log_kernel_var", "nc3_cos_mean", "unc3_cos_cov", "dual_error", "nc4_agreement"]
    js = run_worker(a, "sbjax", a.k, a.n, time_pairs=True)
    emit({"case": "collapse", "impl": "sbjax (f32, segment_sum + blocked pairs)", "N": a.n, "K": a.k, "d": a.d,
          "timed_s": js["timed_s"], "metrics_from_stats_warm_s": js["t_metrics_warm_s"], "wall_s": js["wall_s"],
          "peak_rss_mb": js["rss_mb"]})
    if not a.skip_torch:
        tb = run_worker(a, "torch", a.k, a.n)
        rel = {key: abs(js["metrics"][key] - tb["metrics"][key]) / max(abs(tb["metrics"][key]), 1e-12) for key in keys}
        emit({"case": "collapse", "impl": "torch f64 baseline (one-hot, full K x K tiles)", "N": a.n, "K": a.k, "d": a.d,
              "timed_s": tb["timed_s"], "wall_s": tb["wall_s"], "peak_rss_mb": tb["rss_mb"],
              "speedup_of_sbjax": tb["timed_s"] / js["timed_s"], "max_rel_diff": max(rel.values()),
              "rel_diff": rel})
    if a.big_k:
        jb = run_worker(a, "sbjax", a.big_k, a.n)
        emit({"case": "collapse", "impl": "sbjax (f32) large K", "N": a.n, "K": a.big_k, "d": a.d,
              "timed_s": jb["timed_s"], "wall_s": jb["wall_s"], "peak_rss_mb": jb["rss_mb"],
              "nc1_cdnv": jb["metrics"]["nc1_cdnv"]})


def bench_collapse_vmap(a):
    """NC1-NC4 of K checkpoints at once: jit(vmap(neural_collapse)) against a loop of the host
    collapse_metrics (each call validates on the host and runs the same jitted kernel)."""
    import jax

    from sbjax import metrics as C

    kc, n, v, d = a.vmap_ckpts, a.vmap_n, a.vmap_k, a.d
    (x, y), = gen_chunks(n, v, d, n, 0)
    rng = np.random.default_rng(5)
    feats = np.stack([x * (1.0 + 0.1 * i) + 0.2 * i * rng.standard_normal(x.shape, dtype=np.float32) for i in range(kc)])
    w = np.stack([make_w(v, d) * (1.0 + 0.05 * i) for i in range(kc)])
    val = feats[:, : n // 4]
    opts = C.CollapseOptions(block_size=a.block)
    kern = jax.jit(jax.vmap(partial(C.neural_collapse, options=opts), in_axes=(0, None, 0, 0, None)))
    med_v, ts_v = timeit(lambda: jax.block_until_ready(kern(feats, y, w, val, y[: n // 4])), a.reps)

    def loop():
        return [C.collapse_metrics(feats[i], y, w[i], val[i], y[: n // 4], options=opts) for i in range(kc)]

    med_l, ts_l = timeit(loop, a.reps)
    got, want = jax.device_get(kern(feats, y, w, val, y[: n // 4])), loop()
    keys = ["nc1_cdnv", "nc1_log10_mean_cdnv", "nc2_norm_cov", "nc2_cos_mean", "etf_error", "gnc2_log_kernel_mean",
            "nc3_cos_mean", "dual_error", "nc4_agreement"]
    rel = max(abs(float(getattr(got, key)[i]) - getattr(want[i], key)) / max(abs(getattr(want[i], key)), 1e-12)
              for key in keys for i in range(kc))
    shape = [kc, n, v, d]
    emit({"case": "collapse_vmap", "impl": "loop of collapse_metrics over checkpoints", "shape": shape,
          "median_s": med_l, "reps": len(ts_l)})
    emit({"case": "collapse_vmap", "impl": "sbjax jit(vmap(neural_collapse))", "shape": shape, "median_s": med_v,
          "reps": len(ts_v), "speedup": med_l / med_v, "max_rel_diff": rel})


# ----------------------------------------------------------------- cka
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

    t_base, ts_b = timeit(base, a.reps, warm=False)
    want = base()
    f = jax.jit(cka_to_reference_by_layer)
    med, ts = timeit(lambda: f(acts, ref).block_until_ready(), a.reps)
    got = np.asarray(f(acts, ref))
    emit({"case": "cka", "impl": "numpy loop (Kornblith feature-space)", "shape": [kk, ll, n, d], "median_s": t_base, "reps": len(ts_b)})
    emit({"case": "cka", "impl": "sbjax jit(cka_to_reference_by_layer)", "shape": [kk, ll, n, d], "median_s": med,
          "reps": len(ts), "speedup": t_base / med, "max_abs_diff": float(np.max(np.abs(got - want)))})


def table():
    print("\n| case | impl | time (s) | speedup | accuracy | peak RSS (MB) |")
    print("|---|---|---|---|---|---|")
    for r in ROWS:
        t = r.get("median_s", r.get("timed_s"))
        sp = r.get("speedup", r.get("speedup_of_sbjax", ""))
        acc = r.get("top100_max_rel_err", r.get("max_rel_diff", r.get("max_abs_diff", "")))
        f = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v)  # noqa: E731
        print(f"| {r['case']} | {r['impl']} | {f(t)} | {f(sp)} | {f(acc)} | {f(r.get('peak_rss_mb', ''))} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes (smoke run, ~1 min)")
    p.add_argument("--cases", default="spectra,collapse,collapse_vmap,cka")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--baseline-reps", type=int, default=1, help="reps of the slow numpy SVD loop")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--spec-v", type=int, default=50_000)
    p.add_argument("--spec-d", type=int, default=512)
    p.add_argument("--spec-methods", default="gram,auto,gram_refine",
                   help="singular_values methods to time (device_check.sh --dry-run: one)")
    p.add_argument("--x64-spectra", action="store_true", help="also time method='gram64' under x64")
    p.add_argument("--jax-svd", action="store_true", help="also time jnp.linalg.svd")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--k", type=int, default=8192)
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--chunk", type=int, default=65_536)
    p.add_argument("--nval", type=int, default=65_536)
    p.add_argument("--block", type=int, default=512)
    p.add_argument("--big-k", type=int, default=50_000, help="sbjax-only memory check at this K (0 = skip)")
    p.add_argument("--skip-torch", action="store_true")
    p.add_argument("--vmap-ckpts", type=int, default=8, help="collapse_vmap: checkpoints in one vmapped call")
    p.add_argument("--vmap-n", type=int, default=65_536, help="collapse_vmap: tokens per checkpoint")
    p.add_argument("--vmap-k", type=int, default=8192, help="collapse_vmap: classes")
    p.add_argument("--cka-k", type=int, default=32)
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--time-pairs", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return collapse_worker(a)
    if a.quick:
        a.heads, a.spec_v, a.spec_d = 4, 8192, 256
        a.n, a.k, a.big_k, a.nval = 200_000, 2048, 8192, 16_384
        a.vmap_ckpts, a.vmap_n, a.vmap_k = 4, 8192, 1024
        a.cka_k, a.reps = 8, 3
    cases = a.cases.split(",")
    if "cka" in cases:
        bench_cka(a)
    if "spectra" in cases:
        bench_spectra(a)
    if "collapse" in cases:
        bench_collapse(a)
    if "collapse_vmap" in cases:
        bench_collapse_vmap(a)
    table()


if __name__ == "__main__":
    main()
