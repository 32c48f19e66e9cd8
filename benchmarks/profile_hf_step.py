"""Where the time of one Hugging Face train step goes, under torch.compile or eager (NOT a test).

The step of ``train_step_vs_hf.py``'s ``hf_compile`` / ``hf_eager`` side (GPT-NeoX, sdpa,
fwd + bwd + clip + AdamW, float32), warmed up, then ``--reps`` steps under
``torch.profiler``. The table gives each op's self CPU time per step and its share of the
step, largest first; Inductor's fused C++ kernels are named (``cpp.enable_kernel_profile``).
Rows are also grouped: matmuls (``aten::mm``/``addmm``/``bmm``), attention
(``scaled_dot_product``), Inductor kernels, optimizer (``adamw``/``_foreach``), other. The
counterpart for sbjax is ``benchmarks/profile_step.py``.

    PYTHONPATH=. python benchmarks/profile_hf_step.py --config=pythia-14m
    # on a GPU, as device_check.sh's train section runs it (bf16 autocast; CUDA time too):
    python benchmarks/profile_hf_step.py --config=pythia-160m --batch=16 --seq=1024 \
        --device=cuda --dtype=bfloat16
"""

from __future__ import annotations

import argparse
import time

import _bench  # noqa: F401  (puts the repo root on sys.path)
from _bench import emit, machine
from train_step_vs_hf import hf_side, model_config

GROUPS = (("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear")),
          ("attention", ("scaled_dot_product", "flash_attention")),
          ("optimizer", ("adam", "_foreach", "clip_grad")),
          ("inductor_kernel", ("cpp_fused", "kernel_cpp", "graph_")))

REGIONS = ("Optimizer.step", "CompiledFunction", "Torch-Compiled Region", "clip_grad")


def group_of(name: str) -> str:
  low = name.lower()
  for g, keys in GROUPS:
    if any(k in low for k in keys):
      return g
  return "other"


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--config", default="pythia-14m")
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--seq", type=int, default=256)
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--eager", action="store_true", help="profile hf_eager instead")
  ap.add_argument("--top", type=int, default=25)
  ap.add_argument("--device", default="cpu", help="cpu | cuda | auto")
  ap.add_argument("--dtype", default="float32", help="autocast dtype (e.g. bfloat16)")
  a = ap.parse_args()

  import numpy as np
  import torch
  from torch._inductor import config as inductor_config

  inductor_config.cpp.enable_kernel_profile = True
  mc, tc = model_config(a.config, a.dtype, 0, "none")
  batch_np = np.random.default_rng(0).integers(0, mc.vocab_size, (a.batch, a.seq + 1),
                                               dtype=np.int32)
  run, info = hf_side(mc, tc, batch_np, not a.eager, a.device)
  run()
  t = time.perf_counter()
  acts = [torch.profiler.ProfilerActivity.CPU]
  if info["device"] != "cpu":  # the kernels' device time beside the host's
    acts.append(torch.profiler.ProfilerActivity.CUDA)
  with torch.profiler.profile(activities=acts) as prof:
    for _ in range(a.reps):
      run()
  step_s = (time.perf_counter() - t) / a.reps  # with the profiler's overhead
  side = "hf_eager" if a.eager else "hf_compile"
  rows = [(e.key, e.self_cpu_time_total / 1e6 / a.reps, e.count // a.reps)
          for e in prof.key_averages()]
  total = sum(r[1] for r in rows)
  groups: dict[str, float] = {}
  for k, s, _ in rows:
    groups[group_of(k)] = groups.get(group_of(k), 0.0) + s
  print(f"{side} {a.config}: step {step_s:.3f} s under the profiler; self CPU time "
        f"{total:.3f} s per step (all threads)")
  for g, s in sorted(groups.items(), key=lambda x: -x[1]):
    print(f"  {g:16s} {s:8.3f} s  {s / total:6.1%}")
    emit({"bench": "profile_hf_step", "config": a.config, "side": side, "group": g,
          "self_cpu_s": round(s, 4), "share": round(s / total, 3), **machine()})
  print("regions, inclusive CPU time per step (the optimizer's aten ops are counted above "
        "as their own kinds):")
  for e in prof.key_averages():
    if any(r in e.key for r in REGIONS):
      print(f"  {e.key[:60]:60s} {e.cpu_time_total / 1e6 / a.reps:8.3f} s")
      emit({"bench": "profile_hf_step", "config": a.config, "side": side, "region": e.key,
            "cpu_s": round(e.cpu_time_total / 1e6 / a.reps, 4), **machine()})
  print(f"{'op':70s} {'self cpu s':>10s} {'share':>7s} {'calls':>6s}")
  for k, s, c in sorted(rows, key=lambda r: -r[1])[:a.top]:
    print(f"{k[:70]:70s} {s:10.4f} {s / total:7.1%} {c:6d}")


if __name__ == "__main__":
  main()
