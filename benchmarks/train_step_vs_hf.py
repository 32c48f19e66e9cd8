"""Train step (fwd + bwd + clip + AdamW) of sbjax vs Hugging Face transformers (NOT a test).

Same GPT-NeoX config on both sides (``sbjax.convert.hf_export.hf_config``), same batch
(default 8 × 256 tokens), same loss (mean next-token cross-entropy in float32), global-norm
clipping and AdamW with the preset's settings:

- ``sbjax``: ``jax.jit(sbjax.train.make_train_step)`` with donated params/opt state
  (``--loss_chunk``: ``model.loss_chunk``, token-chunked fused cross-entropy; 0 = full logits);
- ``hf_eager``: ``transformers.GPTNeoXForCausalLM`` (sdpa attention) + ``torch.optim.AdamW``;
- ``hf_compile``: the same model under ``torch.compile`` (skipped with the reason if it fails).

Every side runs in its own process and the sides take turns, one step each per round,
``--reps`` rounds after warm-up (``_bench.interleaved_procs``). The table gives median
tokens/s, the ratio to each HF side measured in the same run (``vs_hf_eager``,
``vs_hf_compile``: that side's step time over this one's) and MFU: analytic FLOPs
(``sbjax.model.flops_per_token``) × tokens/s over the peak (CPU: the best 2048² float32
matmul of this process; an accelerator: ``--peak_tflops``).

On an accelerator, ``--isolate`` runs each side alone in a fresh process, one after another,
each under ``--side_timeout`` (``--compile_timeout`` for hf_compile), so each side has the
device and its memory to itself and a side that does not finish is reported as such;
``--hf_device=auto`` puts the HF sides on the GPU, ``--dtype=bfloat16`` autocasts them.

    PYTHONPATH=. python benchmarks/train_step_vs_hf.py --quick --write_docs
    python benchmarks/train_step_vs_hf.py --isolate --configs=pythia-160m,pythia-410m \\
        --dtype=bfloat16 --batch=16 --seq=1024 --hf_device=auto --peak_tflops=989
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

from _bench import emit, interleaved_procs, machine, median, peak_flops_cpu, table, write_docs

from sbjax.hostmem import keep_freed_host_memory

keep_freed_host_memory()  # the host allocator, in every process, before JAX starts

ALIASES = {"d512": "pythia-70m"}  # d=512, L=6, H=8, V=50304
COLS = ["config", "side", "tokens_per_s", "vs_hf_eager", "vs_hf_compile", "mfu", "step_s",
        "compile_s", "peak_mem_gib", "skipped"]


def model_config(a, name: str):
  """The preset's model and train configs with the benchmark's dtype, loss chunk and remat
  (``preset`` keeps the preset's)."""
  from sbjax import configs

  cfg = configs.load(ALIASES.get(name, name))
  over = {"dtype": a.dtype}
  if a.loss_chunk != "preset":
    over["loss_chunk"] = int(a.loss_chunk)
  if a.remat != "preset":
    over["remat"] = a.remat
  tc = dataclasses.replace(cfg.train, warmup_steps=0, steps=10_000)
  return dataclasses.replace(cfg.model, **over), tc


def sbjax_side(mc, tc, batch_np):
  import jax
  import jax.numpy as jnp

  from sbjax.model import Model
  from sbjax.optim import make_optimizer
  from sbjax.train import make_train_step

  model = Model(mc)
  state = {"p": jax.jit(lambda k: model.init(k, 1, batch_np.shape[1] - 1))(jax.random.key(0))}
  tx = make_optimizer(tc, mc, state["p"])
  state["o"] = jax.jit(tx.init)(state["p"])
  step = jax.jit(make_train_step(model, tx, 1, False), donate_argnums=(0, 1))
  batch = jnp.asarray(batch_np)

  def run():
    state["p"], state["o"], m = step(state["p"], state["o"], batch, 0)
    m["loss"].block_until_ready()

  t = time.perf_counter()
  run()
  stats = jax.local_devices()[0].memory_stats() or {}
  peak = stats.get("peak_bytes_in_use")
  return run, {"compile_s": round(time.perf_counter() - t, 2),
               "n_params": model.param_count(state["p"]), "loss_chunk": mc.loss_chunk,
               "peak_mem_gib": None if peak is None else round(peak / 2**30, 2),
               "device": jax.devices()[0].device_kind, "jax": jax.__version__}


def hf_side(mc, tc, batch_np, compile_: bool, device: str = "cpu"):
  """The HF step on ``device`` ("auto": cuda if torch sees one): float32 parameters, the
  forward under autocast to ``mc.dtype`` (as sbjax computes in it with float32 parameters)."""
  import torch
  import transformers

  from sbjax.convert.hf_export import hf_config

  if device == "auto":
    device = "cuda" if torch.cuda.is_available() else "cpu"
  torch.manual_seed(0)
  hcfg = transformers.GPTNeoXConfig(**hf_config(mc))
  hcfg._attn_implementation = "sdpa"
  with torch.device(device):
    model = transformers.GPTNeoXForCausalLM(hcfg).train()
  params = list(model.named_parameters())
  opt = torch.optim.AdamW([{"params": [p for _, p in params if p.ndim >= 2],
                            "weight_decay": tc.weight_decay},
                           {"params": [p for _, p in params if p.ndim < 2], "weight_decay": 0.0}],
                          lr=tc.lr, betas=(tc.b1, tc.b2), eps=tc.eps,
                          **({"fused": True} if device == "cuda" else {}))
  batch = torch.from_numpy(batch_np).long().to(device)
  inputs, targets = batch[:, :-1], batch[:, 1:]

  def loss_fn(inputs, targets):
    with torch.autocast(device, dtype=getattr(torch, mc.dtype), enabled=mc.dtype != "float32"):
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
  gpu = device == "cuda"
  return run, {"compile_s": round(time.perf_counter() - t, 2),
               "n_params": sum(p.numel() for p in model.parameters()), "loss_chunk": 0,
               "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if gpu
               else None, "device": torch.cuda.get_device_name() if gpu else "cpu",
               "torch": torch.__version__, "transformers": transformers.__version__}


def parse_args(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--configs", default="pythia-14m,d512")
  ap.add_argument("--sides", default="sbjax,hf_eager,hf_compile")
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--seq", type=int, default=256)
  ap.add_argument("--reps", type=int, default=5)
  ap.add_argument("--warmup", type=int, default=1, help="untimed steps after the first (compile)")
  ap.add_argument("--dtype", default="float32", help="compute dtype (parameters stay float32)")
  ap.add_argument("--loss_chunk", default="1024", help="0 = full logits; preset = the preset's")
  ap.add_argument("--remat", default="none", help="none | full | dots | preset")
  ap.add_argument("--hf_device", default="cpu", help="cpu | cuda | auto (cuda if torch sees one)")
  ap.add_argument("--peak_tflops", type=float, default=0.0,
                  help="device peak for MFU; 0 = measure a 2048² float32 matmul (CPU)")
  ap.add_argument("--isolate", action="store_true", help="each side alone in a fresh process, "
                  "one after another, under a time limit (an accelerator)")
  ap.add_argument("--side_timeout", type=float, default=600.0, help="--isolate: s per side")
  ap.add_argument("--compile_timeout", type=float, default=0.0,
                  help="--isolate: s for hf_compile (default --side_timeout)")
  ap.add_argument("--quick", action="store_true", help="pythia-14m, 3 reps (minutes on 2 CPUs)")
  ap.add_argument("--write_docs", action="store_true", help="replace this benchmark's table "
                  "in docs/benchmarks.md")
  a = ap.parse_args(argv)
  if a.quick:
    a.configs, a.reps = "pythia-14m", 3
  return a


def builders_for(a, mc, tc, batch_np) -> dict:
  builders = {}
  for side in a.sides.split(","):
    if side == "sbjax":
      builders[side] = (sbjax_side, (mc, tc, batch_np))
    elif side in ("hf_eager", "hf_compile"):
      builders[side] = (hf_side, (mc, tc, batch_np, side == "hf_compile", a.hf_device))
    else:
      raise SystemExit(f"error: unknown side {side!r} in --sides; use sbjax, hf_eager, hf_compile")
  return builders


def run_config(a, name: str, peak: float) -> list[dict]:
  """Every side of one config, interleaved, each in its own process (one side: this one)."""
  import numpy as np

  from sbjax.model import flops_per_token

  mc, tc = model_config(a, name)
  batch_np = np.random.default_rng(0).integers(0, mc.vocab_size, (a.batch, a.seq + 1),
                                               dtype=np.int32)
  builders = builders_for(a, mc, tc, batch_np)
  # sbjax runs with its host allocator setting (sbjax.hostmem, opt-in for users); HF as it ships
  env = {s: {"SBJAX_KEEP_HOST_MEMORY": "0" if s.startswith("hf_") else "1"} for s in builders}
  times, info = interleaved_procs(builders, a.reps, env=env, warmup=a.warmup)
  rows = [{"config": name, "side": s, "skipped": i["skipped"]} for s, i in info.items()
          if "skipped" in i]  # e.g. torch.compile unavailable here: reported, not fatal
  tokens, fpt = a.batch * a.seq, flops_per_token(mc, a.seq)
  for side, ts in times.items():
    s = median(ts)
    rows.append({"config": name, "side": side, "dtype": a.dtype, "batch": a.batch, "seq": a.seq,
                 "step_s": round(s, 4), "tokens_per_s": round(tokens / s, 1),
                 "mfu": float(f"{fpt * tokens / s / peak:.4g}"), "reps": a.reps,
                 "all_s": [round(t, 4) for t in ts], **info[side], **machine()})
  return rows


def _child_args(a, name: str, side: str) -> list[str]:
  skip = ("isolate", "side_timeout", "compile_timeout", "configs", "sides", "quick",
          "write_docs")
  args = [f"--configs={name}", f"--sides={side}"]
  for k, v in vars(a).items():
    if k not in skip and not isinstance(v, bool):
      args.append(f"--{k}={v}")
  return args


def run_isolated(a, name: str) -> list[dict]:
  """Each side of ``name`` alone in a fresh process, in turn, under its time limit."""
  rows = []
  for side in a.sides.split(","):
    limit = a.compile_timeout if side == "hf_compile" and a.compile_timeout else a.side_timeout
    # an HF side's jax (imported for the config) stays on the CPU: the GPU memory is torch's
    env = {**os.environ, **({"JAX_PLATFORMS": "cpu"} if side.startswith("hf_") else {})}
    p = subprocess.Popen([sys.executable, __file__, *_child_args(a, name, side)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
      out, err = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:  # the whole group: torch.compile's workers too
      os.killpg(p.pid, signal.SIGKILL)
      p.communicate()
      rows.append({"config": name, "side": side, "skipped": f"did not finish in {limit:.0f} s"})
      continue
    got = [json.loads(ln[6:]) for ln in out.splitlines() if ln.startswith("BENCH ")]
    tail = (err.strip().splitlines() or [""])[-1][-300:]
    rows += got or [{"config": name, "side": side, "skipped": f"exit {p.returncode}: {tail}"}]
  return rows


def add_ratios(rows: list[dict]) -> None:
  """vs_hf_eager, vs_hf_compile: that side's step time over this row's (same config, run)."""
  for r in rows:
    step = {o["side"]: o["step_s"] for o in rows if o["config"] == r["config"] and "step_s" in o}
    for ref in ("hf_eager", "hf_compile"):
      if "step_s" in r:
        r[f"vs_{ref}"] = round(step[ref] / r["step_s"], 3) if ref in step else None


def main(argv=None):
  a = parse_args(argv)
  rows = []
  if a.isolate:  # this process opens no device: each side's own process does
    for name in a.configs.split(","):
      rows += run_isolated(a, name)
  else:
    peak = a.peak_tflops * 1e12 if a.peak_tflops > 0 else peak_flops_cpu()
    print(f"peak {peak / 1e9:.1f} GFLOP/s", flush=True)
    for name in a.configs.split(","):
      rows += run_config(a, name, peak)
  add_ratios(rows)
  for r in rows:
    emit(r)
  print(table(COLS, rows))
  if a.write_docs:
    import jax

    write_docs("train_step_vs_hf", "Train step vs Hugging Face transformers",
               f"{a.batch} × {a.seq} tokens per step, {a.dtype}, median of {a.reps} steps; "
               "vs_hf_*: the HF side's step time over this side's (above 1: sbjax is faster).\n\n"
               + table(COLS, rows), device=jax.default_backend())


if __name__ == "__main__":
  main()
