"""Train step (fwd + bwd + clip + AdamW) of sbjax vs Hugging Face transformers (NOT a test).

Same GPT-NeoX config on both sides (``sbjax.convert.hf_export.hf_config``), same batch
(default 8 × 256 tokens), same loss (mean next-token cross-entropy in float32), global-norm
clipping at 1.0 and AdamW (β = 0.9, 0.95, weight decay 0.1):

- ``sbjax``: ``jax.jit(sbjax.train.make_train_step)`` with donated params/opt state;
  ``--loss_chunk`` sets ``model.loss_chunk`` (token-chunked fused cross-entropy; 0 = full
  logits) and ``--sbjax_full`` adds a second sbjax side with full logits for comparison.
- ``hf_eager``: ``transformers.GPTNeoXForCausalLM`` (sdpa attention) + ``torch.optim.AdamW``.
- ``hf_compile``: the same model under ``torch.compile`` (skipped with the reason if it
  fails here).

Every side runs in its own spawned process (``_bench.interleaved_procs``: two runtimes in
one process slow each other on 2 cores; a single side, e.g. ``--sides=sbjax`` on an
accelerator, runs in this process, which has opened the device); the sides take turns, one
step each per round, ``--reps`` rounds after warm-up (with all three sides alive the sbjax
d512 step has been seen to slow 2× in some runs, never in pairs: compare pairs, e.g.
``--sides=sbjax,hf_eager``, see BUILD_NOTES.md); the table reports median tokens/s, the
ratio to ``hf_eager`` and MFU = analytic FLOPs (``sbjax.model.flops_per_token``: 6·N_matmul
+ causal attention) × tokens/s over the peak: on CPU the best 2048² float32 matmul measured
in this process (jax or torch); on an
accelerator ``--peak_tflops`` (the device's datasheet peak for the dtype).

On an accelerator, ``--isolate`` (``train_step_isolated.py``) runs each side of each config in
a fresh process, one after another, under ``--side_timeout`` / ``--compile_timeout`` and
within ``--budget_s``; ``--hf_device=auto`` puts the HF sides on the GPU and ``--dtype=bfloat16``
autocasts them to bf16 (float32 parameters, as sbjax's bf16 compute); rows add each side's
peak device memory (GiB, after its first step), compile seconds and ``vs_hf_compile``.

Run (CPU, from the repo root):
    PYTHONPATH=. python benchmarks/train_step_vs_hf.py --configs=pythia-14m,d512
Accelerator (as benchmarks/device_check.sh runs it):
    python benchmarks/train_step_vs_hf.py --isolate --configs=pythia-160m,pythia-410m \
        --dtype=bfloat16 --batch=16 --seq=1024 --warmup=2 --reps=10 --hf_device=auto \
        --loss_chunk=preset --remat=preset --peak_tflops=989 --compile_timeout=150
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import _bench  # noqa: F401  (puts the repo root on sys.path)
from _bench import emit, interleaved_procs, machine, median, peak_flops_cpu, table
from _isolated import phase

from sbjax.hostmem import keep_freed_host_memory

keep_freed_host_memory()  # the host allocator (SBJAX_KEEP_HOST_MEMORY), in every process, before JAX starts

ALIASES = {"d512": "pythia-70m"}  # d=512, L=6, H=8, V=50304: the d=512 config


def model_config(name: str, dtype: str, loss_chunk, remat: str, attn_impl: str = "auto"):
  """The preset's model config with the benchmark's dtype and levers; ``loss_chunk`` and
  ``remat`` may be ``"preset"`` (keep the preset's)."""
  from sbjax import configs

  cfg = configs.build(configs.load(ALIASES.get(name, name)))
  over = {"dtype": dtype, "attn_impl": attn_impl}
  if loss_chunk != "preset":
    over["loss_chunk"] = int(loss_chunk)
  if remat != "preset":
    over["remat"] = remat
  return dataclasses.replace(cfg.model, **over), cfg.train


def _jax_peak_gib():
  """The device's peak bytes in use so far (GiB), or None where it keeps no count (CPU)."""
  import jax

  stats = jax.local_devices()[0].memory_stats() or {}
  peak = stats.get("peak_bytes_in_use")
  return None if peak is None else round(peak / 2**30, 2)


def sbjax_side(mc, tc, batch_np):
  import jax
  import jax.numpy as jnp

  from sbjax.model import Model
  from sbjax.optim import make_optimizer
  from sbjax.train import make_train_step

  tc = dataclasses.replace(tc, warmup_steps=0, steps=10_000)
  model = Model(mc)
  # jitted: one compile instead of the forward's ops one by one (seconds saved per side)
  state = {"p": jax.jit(lambda k: model.init(k, 1, batch_np.shape[1] - 1))(jax.random.key(0))}
  tx = make_optimizer(tc, mc, state["p"])
  state["o"] = jax.jit(tx.init)(state["p"])
  step = jax.jit(make_train_step(model, tx, 1, False), donate_argnums=(0, 1))
  batch = jnp.asarray(batch_np)
  t = time.perf_counter()
  state["p"], state["o"], m = step(state["p"], state["o"], batch, 0)
  m["loss"].block_until_ready()
  compile_s = time.perf_counter() - t
  phase("compiled", compile_s)

  def run():
    state["p"], state["o"], m = step(state["p"], state["o"], batch, 0)
    m["loss"].block_until_ready()

  return run, {"compile_s": round(compile_s, 2), "n_params": model.param_count(state["p"]),
               "loss_chunk": mc.loss_chunk, "remat": mc.remat,
               "keep_host_memory": keep_freed_host_memory(), "peak_mem_gib": _jax_peak_gib(),
               "device": jax.devices()[0].device_kind, "jax": jax.__version__}


def _hf_device(device: str) -> str:
  import torch

  if device == "auto":
    return "cuda" if torch.cuda.is_available() else "cpu"
  return device


def hf_side(mc, tc, batch_np, compile_: bool, device: str = "cpu"):
  """The HF step on ``device`` ("auto": cuda if torch sees one): float32 parameters, the
  forward under autocast to ``mc.dtype`` (bf16 autocast, as the sbjax side computes in
  bf16 with float32 parameters), fused AdamW on a GPU."""
  import torch
  import transformers

  from sbjax.convert.hf_export import hf_config

  device = _hf_device(device)
  torch.manual_seed(0)
  hcfg = transformers.GPTNeoXConfig(**hf_config(mc))
  hcfg._attn_implementation = "sdpa"
  with torch.device(device):  # initialised where it runs (seconds saved at 410m on a GPU)
    model = transformers.GPTNeoXForCausalLM(hcfg).train()
  decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
  no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
  opt = torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                           {"params": no_decay, "weight_decay": 0.0}],
                          lr=tc.lr, betas=(tc.b1, tc.b2), eps=tc.eps,
                          **({"fused": True} if device == "cuda" else {}))
  batch = torch.from_numpy(batch_np).long().to(device)
  inputs, targets = batch[:, :-1], batch[:, 1:]
  cast = mc.dtype != "float32"

  def loss_fn(inputs, targets):
    with torch.autocast(device.split(":")[0], dtype=getattr(torch, mc.dtype), enabled=cast):
      logits = model(input_ids=inputs).logits
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                             targets.reshape(-1))

  fwd = torch.compile(loss_fn) if compile_ else loss_fn

  def run():
    opt.zero_grad(set_to_none=True)
    loss = fwd(inputs, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip)
    opt.step()
    return loss.detach().item()  # .item() waits for the device

  t = time.perf_counter()
  run()
  compile_s = time.perf_counter() - t
  phase("compiled", compile_s)
  on_gpu = device.startswith("cuda")
  return run, {"compile_s": round(compile_s, 2),
               "n_params": sum(p.numel() for p in model.parameters()), "loss_chunk": 0,
               "keep_host_memory": keep_freed_host_memory(), "autocast": mc.dtype if cast else None,
               "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if on_gpu
               else None, "device": torch.cuda.get_device_name() if on_gpu else "cpu",
               "torch": torch.__version__, "transformers": transformers.__version__}


def parse_args(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--configs", default="pythia-14m,d512")
  ap.add_argument("--sides", default="sbjax,hf_eager,hf_compile")
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--seq", type=int, default=256)
  ap.add_argument("--reps", type=int, default=5)
  ap.add_argument("--warmup", type=int, default=1, help="untimed steps after the first (compile)")
  ap.add_argument("--dtype", default="float32", help="compute dtype (params stay f32; the HF "
                  "sides autocast to it)")
  ap.add_argument("--loss_chunk", default="1024", help="0 = full logits; preset = the preset's")
  ap.add_argument("--sbjax_full", action="store_true", help="also time sbjax with loss_chunk=0")
  ap.add_argument("--sbjax_dpa", action="store_true",
                  help="also time sbjax with model.attn_impl=dpa (jax.nn.dot_product_attention)")
  ap.add_argument("--remat", default="none", help="none | full | dots | preset")
  ap.add_argument("--attn_impl", default="auto", help="sbjax model.attn_impl (e.g. splash)")
  ap.add_argument("--shrink", default="", help="model field overrides for smoke runs, e.g. "
                  "n_layers=1,vocab_size=512 (integers; device_check.sh --dry-run)")
  ap.add_argument("--hf_device", default="cpu", help="cpu | cuda | auto (cuda if torch sees one)")
  ap.add_argument("--hf_keep_host_memory", action="store_true",
                  help="give the HF sides sbjax's host allocator setting too (sbjax.hostmem); "
                  "by default they run with glibc's, as HF ships")
  ap.add_argument("--peak_tflops", type=float, default=0.0,
                  help="device peak for MFU; 0 = measure a 2048² f32 matmul (CPU)")
  ap.add_argument("--isolate", action="store_true", help="each side of each config in a fresh "
                  "process, one after another, under a time limit (an accelerator: see above)")
  ap.add_argument("--side_timeout", type=float, default=600.0, help="--isolate: seconds per side")
  ap.add_argument("--compile_timeout", type=float, default=0.0,
                  help="--isolate: seconds for hf_compile (default --side_timeout)")
  ap.add_argument("--budget_s", type=float, default=0.0,
                  help="--isolate: seconds for everything; a side gets at most what is left")
  return ap.parse_args(argv)


def config_and_batch(a, name: str):
  import numpy as np

  mc, tc = model_config(name, a.dtype, a.loss_chunk, a.remat, a.attn_impl)
  if a.shrink:
    mc = dataclasses.replace(mc, **{k: int(v) for k, v in
                                    (kv.split("=") for kv in a.shrink.split(","))})
  batch_np = np.random.default_rng(0).integers(0, mc.vocab_size, (a.batch, a.seq + 1),
                                               dtype=np.int32)
  return mc, tc, batch_np


def builders_for(a, mc, tc, batch_np) -> dict:
  builders = {}
  for side in a.sides.split(","):
    if side == "sbjax":
      builders[side] = (sbjax_side, (mc, tc, batch_np))
      if a.sbjax_full and mc.loss_chunk:
        builders["sbjax_full_logits"] = (sbjax_side, (dataclasses.replace(mc, loss_chunk=0),
                                                      tc, batch_np))
      if a.sbjax_dpa:
        builders["sbjax_dpa"] = (sbjax_side, (dataclasses.replace(mc, attn_impl="dpa"),
                                              tc, batch_np))
    elif side in ("hf_eager", "hf_compile"):
      builders[side] = (hf_side, (mc, tc, batch_np, side == "hf_compile", a.hf_device))
    else:
      raise SystemExit(f"error: unknown side {side!r} in --sides; use sbjax, hf_eager, hf_compile")
  return builders


def run_config(a, name: str, peak: dict) -> None:
  """Every side of one config, interleaved (each in its own process when there are several)."""
  from sbjax.model import flops_per_token

  mc, tc, batch_np = config_and_batch(a, name)
  builders = builders_for(a, mc, tc, batch_np)
  # sbjax's sides run with the host allocator setting (sbjax.hostmem, opt-in for users:
  # SBJAX_KEEP_HOST_MEMORY=1); the HF sides (which import sbjax for the config) without it,
  # as HF ships, unless --hf_keep_host_memory
  keep = {"SBJAX_KEEP_HOST_MEMORY": "1" if a.hf_keep_host_memory else "0"}
  times, info = interleaved_procs(
      builders, a.reps, env={s: keep if s.startswith("hf_") else {"SBJAX_KEEP_HOST_MEMORY": "1"}
                             for s in builders}, warmup=a.warmup)
  for side, inf in info.items():  # e.g. torch.compile unavailable here: reported, not fatal
    if "skipped" in inf:
      emit({"bench": "train_step", "config": name, "side": side, "skipped": inf["skipped"]})
  ref = median(times["hf_eager"]) if "hf_eager" in times else None
  tokens, fpt = a.batch * a.seq, flops_per_token(mc, a.seq)
  for side, ts in times.items():
    s = median(ts)
    emit({"bench": "train_step", "config": name, "side": side, "dtype": a.dtype,
          "batch": a.batch, "seq": a.seq,
          "step_s": round(s, 4), "tokens_per_s": round(tokens / s, 1),
          "vs_hf_eager": round(ref / s, 3) if ref else None,
          "mfu": float(f"{fpt * tokens / s / peak['peak_flops']:.4g}"),  # 4 digits, also tiny
          "gflops_per_s": round(fpt * tokens / s / 1e9, 2), "reps": a.reps, "warmup": a.warmup,
          "all_s": [round(t, 4) for t in ts], **info[side], **machine(),
          "peak_gflops": round(peak["peak_flops"] / 1e9, 1)})


def peak_of(a) -> dict:
  import jax

  if a.peak_tflops > 0:
    peak = {"peak_flops": a.peak_tflops * 1e12, "peak_source": "--peak_tflops"}
  else:
    peak = {**peak_flops_cpu(), "peak_source": "best 2048^2 f32 matmul, this process"}
  print(f"backend {jax.default_backend()} devices {jax.devices()}; peak "
        f"{peak['peak_flops'] / 1e9:.1f} GFLOP/s ({peak['peak_source']})", flush=True)
  return peak


def main(argv=None):
  a = parse_args(argv)
  if a.isolate:  # this process opens no device: each side's own process does
    from train_step_isolated import run_isolated

    for name in a.configs.split(","):
      run_isolated(a, name, __file__)
  else:
    peak = peak_of(a)
    for name in a.configs.split(","):
      run_config(a, name, peak)
  print(table(["config", "side", "tokens_per_s", "vs_hf_eager", "vs_hf_compile", "mfu", "step_s",
               "compile_s", "peak_mem_gib", "load_avg_1m", "skipped"]))


if __name__ == "__main__":
  main()
