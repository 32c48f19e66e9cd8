"""Where the time of one sbjax train step goes, component by component (NOT a test).

The train step of ``train_step_vs_hf.py`` is split into parts that are jitted and timed
separately in one process (interleaved, median of ``--reps``):

- ``step``: the whole step (fwd + bwd + clip + AdamW, params and state donated), as in
  ``train_step_vs_hf.py``;
- ``fwd_bwd``: ``value_and_grad(model.loss)`` only; ``fwd``: ``model.loss`` only;
- ``optimizer``: clip + AdamW update + apply on given gradients;
- ``head_xent``: the fused chunked cross-entropy, value and gradients w.r.t. h and W,
  on N = B·T tokens (``loss_chunk=0``: the full-logits loss instead);
- ``head_eval`` / ``head_eval_row_layout``: the chunked CE forward only (evaluation), in
  sbjax's column layout and in the row layout it replaced (the baseline);
- ``trunk_fwd_bwd``: embedding + blocks + final norm, fwd + bwd of a scalar of the features;
- ``attn_dpa`` / ``attn_einsum``: one layer's causal attention core, fwd + bwd, through
  ``jax.nn.dot_product_attention`` and through the einsum reference (the step has n_layers of these);
- ``mm_*``: the step's large matmul shapes as GFLOP/s (``--torch_mm``: torch too).

Each row gives the median seconds, the FLOPs XLA counts for the compiled program
(``cost_analysis``; analytic for the evaluation rows, whose nested loops it does not
count) and the achieved GFLOP/s over the measured peak (best 2048² f32 matmul).

    PYTHONPATH=. python benchmarks/profile_step.py                      # d512 = pythia-70m, 8×256
    PYTHONPATH=. python benchmarks/profile_step.py --config=pythia-14m --reps=3
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from types import SimpleNamespace

import _bench  # noqa: F401  (puts the repository on sys.path for sbjax)
from _bench import emit, interleaved, machine, median, peak_flops_cpu, table

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sbjax import configs, losses
from sbjax.model import Model, attention_reference, flops_per_token
from sbjax.optim import make_optimizer
from sbjax.train import make_train_step


def _flops(jitted, *args) -> float:
  try:
    ca = jitted.lower(*args).compile().cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    return float(ca.get("flops", 0.0))
  except Exception:  # cost analysis is best effort
    return 0.0


def _row_layout_eval(x, w, targets, chunk):
  """Baseline: the chunked CE forward in row layout (chunk×V logits, row logsumexp, argmax),
  as sbjax evaluated before the column layout. Returns (Σ nll, Σ correct)."""
  n, k = x.shape
  xs, ts = x.reshape(n // chunk, chunk, k), targets.reshape(n // chunk, chunk)

  def body(carry, inp):
    x_c, t_c = inp
    z = jnp.einsum("nk,vk->nv", x_c, w)
    lse = jax.nn.logsumexp(z, axis=-1)
    tgt = jnp.take_along_axis(z, t_c[:, None], axis=-1)[:, 0]
    cor = (jnp.argmax(z, -1) == t_c).astype(jnp.float32).sum()
    return (carry[0] + (lse - tgt).sum(), carry[1] + cor), None

  (nll, cor), _ = jax.lax.scan(body, (0.0, 0.0), (xs, ts))
  return nll, cor


def _args() -> argparse.Namespace:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--config", default="pythia-70m", help="d512 = pythia-70m (d=512, L=6)")
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--seq", type=int, default=256)
  ap.add_argument("--loss_chunk", type=int, default=1024)
  ap.add_argument("--reps", type=int, default=5)
  ap.add_argument("--torch_mm", action="store_true",
                  help="also time the matmul shapes with torch, in this process (its thread pool "
                       "then slows the jax cases: compare the mm_* rows only)")
  return ap.parse_args()


def _setup(a) -> SimpleNamespace:
  """The model of ``--config`` (float32, ``--loss_chunk``), its parameters, optimizer and
  state, one random batch, the random generator the later cases draw from, and the sizes."""
  cfg = configs.load(a.config)
  mc = dataclasses.replace(cfg.model, loss_chunk=a.loss_chunk, dtype="float32")
  tc = dataclasses.replace(cfg.train, warmup_steps=0, steps=10_000)
  model = Model(mc)
  params = model.init(jax.random.key(0), 1, a.seq)
  tx = make_optimizer(tc, mc, params)
  opt = tx.init(params)
  rng = np.random.default_rng(0)
  batch = jnp.asarray(rng.integers(0, mc.vocab_size, (a.batch, a.seq + 1)), jnp.int32)
  return SimpleNamespace(a=a, mc=mc, model=model, params=params, tx=tx, opt=opt, rng=rng,
                         batch=batch, n=a.batch * a.seq, d=mc.d_model, v=mc.vocab_size)


def _train_cases(s, cases: dict):
  """step (params and state donated, as in training), fwd_bwd, fwd, optimizer; returns the
  jitted step."""
  model, tx, params, opt, batch = s.model, s.tx, s.params, s.opt, s.batch
  step = jax.jit(make_train_step(model, tx, 1, False), donate_argnums=(0, 1))
  state = list(jax.tree.map(jnp.copy, (params, opt)))  # donated, as in training

  def donated_step(b):
    p, o, m = step(*state, b, 0)
    state[:] = [p, o]
    return m

  cases["step"] = (donated_step, (batch,))
  cases["fwd_bwd"] = (jax.jit(jax.value_and_grad(model.loss, has_aux=True)), (params, batch))
  cases["fwd"] = (jax.jit(model.loss), (params, batch))
  grads = jax.tree.map(jnp.ones_like, params)

  def opt_only(g, o, p):
    u, o = tx.update(g, o, p)
    return optax.apply_updates(p, u), o

  cases["optimizer"] = (jax.jit(opt_only), (grads, opt, params))
  return step


def _head_cases(s, cases: dict):
  """head_xent, head_eval and head_eval_row_layout on random features; returns (h, w)."""
  a, n, d, v, rng = s.a, s.n, s.d, s.v, s.rng
  h = jnp.asarray(rng.standard_normal((n, d)), jnp.float32)
  w = s.model.head_matrix(s.params).astype(jnp.float32)
  y = jnp.asarray(rng.integers(0, v, (n,)), jnp.int32)
  if a.loss_chunk:
    head = lambda h, w: losses.chunked_matrix_xent(h, w, y, a.loss_chunk)[0] / n
  else:
    head = lambda h, w: losses.xent_from_scores(h @ w.T, y)[0] / n
  cases["head_xent"] = (jax.jit(jax.value_and_grad(head, argnums=(0, 1))), (h, w))
  if a.loss_chunk and n % a.loss_chunk == 0:
    cases["head_eval"] = (jax.jit(lambda h, w: losses.chunked_matrix_xent(h, w, y, a.loss_chunk)),
                          (h, w))
    cases["head_eval_row_layout"] = (
        jax.jit(lambda h, w: _row_layout_eval(h, w, y, a.loss_chunk)), (h, w))
  return h, w


def _trunk_attention_cases(s, cases: dict) -> None:
  """trunk_fwd_bwd, and one layer's causal attention core through dpa and through einsum."""
  a, mc, model = s.a, s.mc, s.model
  trunk = lambda p, t: jnp.mean(model.features(p, t) ** 2)
  cases["trunk_fwd_bwd"] = (jax.jit(jax.value_and_grad(trunk)), (s.params, s.batch[:, :-1]))
  hh, k = mc.n_heads, mc.head_dim
  q = jnp.asarray(s.rng.standard_normal((a.batch, a.seq, hh, k)), jnp.float32)
  scale = 1.0 / np.sqrt(k)
  dpa = lambda q, kk, vv: jnp.sum(jax.nn.dot_product_attention(q, kk, vv, scale=scale,
                                                               is_causal=True) ** 2)
  ein = lambda q, kk, vv: jnp.sum(attention_reference(q, kk, vv, scale=scale, window=None) ** 2)
  cases["attn_dpa"] = (jax.jit(jax.grad(dpa, argnums=(0, 1, 2))), (q, q, q))
  cases["attn_einsum"] = (jax.jit(jax.grad(ein, argnums=(0, 1, 2))), (q, q, q))


def _matmul_cases(s, cases: dict) -> tuple[dict, dict]:
  """The step's large matmuls (M×K)·(K×N): MLP up/down, QKV, head fwd, head dW, head dx.
  Returns ({name: (M, K, N)}, {name: 2 M K N flops})."""
  n, d, v = s.n, s.d, s.v
  f = s.mc.ff_dim
  c = min(s.a.loss_chunk or n, n)
  shapes = {"mm_mlp_up": (n, d, f), "mm_mlp_down": (n, f, d), "mm_qkv": (n, d, 3 * d),
            "mm_head_fwd": (c, d, v), "mm_head_dW": (v, c, d), "mm_head_dx": (c, v, d)}
  mm = {}
  for name, (m_, k_, n_) in shapes.items():
    x1 = jnp.asarray(s.rng.standard_normal((m_, k_)), jnp.float32)
    x2 = jnp.asarray(s.rng.standard_normal((k_, n_)), jnp.float32)
    cases[name] = (jax.jit(jnp.matmul), (x1, x2))
    mm[name] = 2.0 * m_ * k_ * n_
  return shapes, mm


def _check_head_eval(cases: dict, h, w) -> None:
  """Both evaluation layouts compute the same loss and accuracy."""
  if "head_eval" in cases:
    got = cases["head_eval"][0](h, w)
    ref = cases["head_eval_row_layout"][0](h, w)
    np.testing.assert_allclose(float(got[0]), float(ref[0]), rtol=1e-5)
    assert float(got[1]) == float(ref[1])


def _compile_cases(s, cases: dict, step, mm: dict) -> tuple[dict, dict]:
  """Each case compiled (run once) and its flops; returns ({name: timed callable},
  {name: flops})."""
  n, v, d = s.n, s.v, s.d
  fns, flops = {}, {"step": _flops(step, s.params, s.opt, s.batch, 0)}  # the jitted step, undonated
  # XLA's cost_analysis does not count the body of a loop nested in a loop, which the
  # tiled evaluation (V tiles inside token chunks) is: those rows use analytic counts.
  flops["head_eval"] = flops["head_eval_row_layout"] = 2.0 * n * v * d
  flops["fwd"] = flops_per_token(s.mc, s.a.seq) * n / 3
  for name, (fn, args) in cases.items():
    if name not in flops:
      flops[name] = mm.get(name) or _flops(fn, *args)
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    print(f"compiled {name} in {time.perf_counter() - t:.1f}s", flush=True)
    fns[name] = (lambda fn=fn, args=args: jax.block_until_ready(fn(*args)))
  return fns, flops


def _torch_cases(shapes: dict, mm: dict, fns: dict, flops: dict) -> None:
  """--torch_mm: the same matmul shapes through torch (skipped without torch)."""
  try:
    import torch
  except ImportError:
    return
  for name, (m_, k_, n_) in shapes.items():
    t1, t2 = torch.randn(m_, k_), torch.randn(k_, n_)
    fns["torch_" + name] = (lambda t1=t1, t2=t2: t1 @ t2)
    flops["torch_" + name] = mm[name]


def _report(a, times: dict, flops: dict, peak: float) -> None:
  """One BENCH line a case (median, fraction of the step, GFLOP/s, of peak) and the table."""
  step_s = median(times["step"])
  for name, ts in times.items():
    s = median(ts)
    emit({"bench": "profile_step", "config": a.config, "case": name, "batch": a.batch,
          "seq": a.seq, "loss_chunk": a.loss_chunk, "median_s": round(s, 4),
          "frac_of_step": round(s / step_s, 3), "gflop": round(flops[name] / 1e9, 2),
          "gflops_per_s": round(flops[name] / s / 1e9, 1),
          "of_peak": round(flops[name] / s / peak, 3), "reps": a.reps,
          "peak_gflops": round(peak / 1e9, 1), **machine()})
  print(table(["case", "median_s", "frac_of_step", "gflop", "gflops_per_s", "of_peak",
               "load_avg_1m"]))


def main():
  a = _args()
  s = _setup(a)
  peak = peak_flops_cpu()["peak_flops"]
  cases = {}  # name -> (jitted fn, args)
  step = _train_cases(s, cases)
  h, w = _head_cases(s, cases)
  _trunk_attention_cases(s, cases)
  shapes, mm = _matmul_cases(s, cases)
  _check_head_eval(cases, h, w)
  fns, flops = _compile_cases(s, cases, step, mm)
  if a.torch_mm:
    _torch_cases(shapes, mm, fns, flops)
  _report(a, interleaved(fns, a.reps), flops, peak)


if __name__ == "__main__":
  main()
