r"""Planted train batches: the numpy (host) sampler against the on-device sampler, tokens/s.

  PYTHONPATH=. python benchmarks/planted_sampler_bench.py [--vocab=4096] [--batch=64]
      [--seq_len=128] [--reps=7] [--steps=14377]

The language is the rare-token tail language (``sbjax.data.planted_tail.PlantedTail``: V =
4096, 8 components of rank 32, Zipf 1.5, seed 0). The host side is exactly what a run with
``data.options.train_tokens=0`` draws per step (``planted_stream.global_train_batch``: B
chains of T + 1 tokens); the device side is the jitted ``planted_device.train_batch`` of the
same shape at a new step each call (blocked until ready). Both are timed interleaved in one
process (medians of ``reps``), on whatever backend jax has here; then the device side alone,
back to back (5 x ``reps``): interleaved, each device call finds its 128 MiB of tables evicted
by the numpy side's 128 MiB float64 cumulative table, which a training loop does not do.
Medians and, for a machine shared with other processes, the best call of each side. It also prints how well the
draws follow the language (mean −log P(x_t | c_t) of 64 batches of each against the exact
entropy rate H), the float32 tables' worst relative error on the probabilities of the tokens
below 1e-6, and how often the rarest token occurs in a run of ``--steps`` steps of this
batch (``planted_tail.rarest_token``, ``types_below``). Output is in BUILD_NOTES.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

import _bench  # noqa: F401  (puts the checkout on sys.path)
import jax
import numpy as np

from _bench import emit, interleaved
from sbjax.data import planted_device as pdev
from sbjax.data import planted_stream
from sbjax.data import planted_tail as pt


def table_error(lang, tables, below: float = 1e-6) -> tuple[float, int]:
  """Worst relative error of the device tables' implied probabilities (S_j − S_{j+1}) on the
  entries of P below ``below``, and how many entries that is."""
  s = np.asarray(tables.surv, np.float64).reshape(lang.n_contexts, -1)[:, :lang.vocab]
  implied = np.concatenate([s[:, :-1] - s[:, 1:], s[:, -1:]], axis=1)
  p_sorted = np.take_along_axis(lang.probs, np.asarray(tables.order), 1)
  small = p_sorted < below
  if not small.any():
    return 0.0, 0
  return float(np.max(np.abs(implied[small] / p_sorted[small] - 1))), int(small.sum())


def mean_loss(lang, batches) -> float:
  return float(-np.mean([lang.sequence_log_probs(row) for b in batches for row in b]))


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--vocab", type=int, default=4096)
  ap.add_argument("--batch", type=int, default=64)
  ap.add_argument("--seq_len", type=int, default=128)
  ap.add_argument("--reps", type=int, default=7)
  ap.add_argument("--steps", type=int, default=14_377)
  a = ap.parse_args()
  t0 = time.perf_counter()
  lang = pt.PlantedTail(vocab=a.vocab)
  build_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  tables = jax.device_put(pdev.tables(lang, 0, 0))  # once, as a run does
  jax.block_until_ready(tables)
  tables_s = time.perf_counter() - t0
  draw = jax.jit(pdev.train_batch, static_argnums=(2, 3, 4))
  step = iter(range(10**9))
  fns = {"numpy": lambda: planted_stream.global_train_batch(lang, 0, 0, next(step), a.batch,
                                                             a.seq_len),
         "device": lambda: draw(tables, np.uint32(next(step)), a.batch, a.seq_len,
                                1).block_until_ready()}
  t0 = time.perf_counter()
  fns["device"]()
  compile_s = time.perf_counter() - t0
  times = interleaved(fns, a.reps)
  alone = interleaved({"device_alone": fns["device"]}, 5 * a.reps)  # back to back, warm cache
  times.update(alone)
  tokens = a.batch * (a.seq_len + 1)
  rate = {k: tokens / statistics.median(v) for k, v in times.items()}
  best = {k: tokens / min(v) for k, v in times.items()}  # least disturbed by other processes
  for k in times:
    emit({"case": f"planted_sampler_{k}", "vocab": a.vocab, "batch": a.batch,
          "seq_len": a.seq_len, "backend": jax.default_backend(),
          "median_s": statistics.median(times[k]), "tokens_per_s": rate[k],
          "best_tokens_per_s": best[k]})
  err, n_small = table_error(lang, tables)
  host = [planted_stream.global_train_batch(lang, 0, 0, i, a.batch, a.seq_len) for i in range(64)]
  dev = [np.asarray(draw(tables, np.uint32(i), a.batch, a.seq_len, 1)) for i in range(64)]
  rare = pt.rarest_token(lang, a.steps * a.batch * a.seq_len)
  emit({"case": "planted_sampler_summary", "ratio_device_over_numpy": rate["device"] / rate["numpy"],
        "ratio_device_alone_over_numpy": rate["device_alone"] / rate["numpy"],
        "ratio_best_device_alone_over_numpy": best["device_alone"] / best["numpy"],
        "entropy_nats": lang.entropy, "mean_loss_numpy": mean_loss(lang, host),
        "mean_loss_device": mean_loss(lang, dev), "language_build_s": build_s,
        "tables_s": tables_s, "device_compile_s": compile_s,
        "table_rel_err_below_1e-6": err, "entries_below_1e-6": n_small,
        "min_prob": float(lang.probs.min()), "rarest": rare,
        "types_below_50": pt.types_below(lang, rare["n_tokens"], 50)})
  print(f"\nV={a.vocab}, batch {a.batch} x {a.seq_len + 1} tokens, backend "
        f"{jax.default_backend()}:")
  print(f"  numpy  {rate['numpy']:>14,.0f} tokens/s  (median {statistics.median(times['numpy']):.4f} s)")
  print(f"  device {rate['device']:>14,.0f} tokens/s  (median {statistics.median(times['device']):.4f} s)")
  print(f"  ratio  {rate['device'] / rate['numpy']:.1f}x (each device call after a numpy one: "
        "its tables cold in the cache)")
  print(f"  device back to back {rate['device_alone']:>14,.0f} tokens/s, ratio "
        f"{rate['device_alone'] / rate['numpy']:.1f}x (as in a training loop: one draw per step)")
  print(f"  best of each (the least disturbed call): numpy {best['numpy']:,.0f}, device back to "
        f"back {best['device_alone']:,.0f} tokens/s, ratio "
        f"{best['device_alone'] / best['numpy']:.1f}x")
  print(f"  H = {lang.entropy:.4f} nats; mean -log P: numpy {mean_loss(lang, host):.4f}, "
        f"device {mean_loss(lang, dev):.4f}")
  print(f"  tables: {n_small} entries of P below 1e-6, worst relative error {err:.2e}")
  print(f"  rarest token {rare['token']}: q = {rare['probability']:.3g}, expected "
        f"{rare['expected_count']:.1f} times in {rare['n_tokens']:,} tokens ({a.steps} steps)")


if __name__ == "__main__":
  main()
