"""``train_step_vs_hf.py --isolate``: each side of a config in its own process (NOT a test).

For an accelerator (``device_check.sh``): sbjax, HF eager and HF torch.compile each get the
device alone, one after another, in their own process (``_isolated.run_side``), so each one's
peak device memory is its own and a side that does not finish in its time (torch.compile of
pythia-410m has been seen compiling for more than 90 s) is reported as "did not finish in N s"
while the other sides' numbers stand. This process opens no device.

Each side's limit is ``--side_timeout`` (``--compile_timeout`` for hf_compile), cut to what is
left of ``--budget_s``. The rows are the children's ``train_step`` rows plus ``vs_hf_eager``,
``vs_hf_compile`` (that side's step time over this side's) and the child's wall seconds.
"""

from __future__ import annotations

import time

from _bench import emit
from _isolated import run_side

START = time.perf_counter()
PARENT_ONLY = ("isolate", "side_timeout", "compile_timeout", "budget_s", "configs", "sides")
RESERVE_S = 5.0  # kept back from --budget_s for the parent's own end


def child_args(a, name: str, side: str) -> list[str]:
  """The parent's arguments for one config and one side, without the parent-only ones."""
  args = [f"--configs={name}", f"--sides={side}"]
  for k, v in vars(a).items():
    if k in PARENT_ONLY:
      continue
    if isinstance(v, bool):
      args += [f"--{k}"] if v else []
    else:
      args.append(f"--{k}={v}")
  return args


def limit_for(a, side: str) -> tuple[float, float]:
  """(this side's seconds, what is left of --budget_s: inf without one)."""
  own = a.compile_timeout if side == "hf_compile" and a.compile_timeout > 0 else a.side_timeout
  left = (a.budget_s - (time.perf_counter() - START) - RESERVE_S if a.budget_s > 0
          else float("inf"))
  return min(own, left), left


def _not_finished(a, name: str, side: str, res: dict, limit: float) -> dict:
  compiled = res["phases"].get("compiled")
  still = ("its compile" if compiled is None else
           f"its {a.warmup} warm-up + {a.reps} timed steps after a {compiled:.0f} s compile")
  return {"bench": "train_step", "config": name, "side": side, "limit_s": round(limit),
          "compile_s": compiled, "skipped": f"did not finish in {limit:.0f} s ({still} was "
          "still running; process start, imports and model build included)"}


def run_isolated(a, name: str, script: str) -> list[dict]:
  """Every side of config ``name`` in turn; emits and returns its rows."""
  keep = "1" if a.hf_keep_host_memory else "0"
  rows = []
  for side in a.sides.split(","):
    limit, left = limit_for(a, side)
    if left < 10:
      rows.append({"bench": "train_step", "config": name, "side": side,
                   "skipped": f"not run: {max(left, 0):.0f} s left of --budget_s={a.budget_s:g}"})
      continue
    # an HF side's jax (imported for the config) stays on the CPU: it must not take the
    # GPU memory that torch is measured with
    env = ({"SBJAX_KEEP_HOST_MEMORY": keep, "JAX_PLATFORMS": "cpu"} if side.startswith("hf_")
           else {"SBJAX_KEEP_HOST_MEMORY": "1"})
    res = run_side(script, child_args(a, name, side), limit, env)
    got = [r for r in res["rows"] if r.get("bench") == "train_step"]
    if res["timed_out"]:
      rows.append(_not_finished(a, name, side, res, limit))
    elif res["rc"] != 0 or not got:
      rows.append({"bench": "train_step", "config": name, "side": side,
                   "skipped": f"exit status {res['rc']}: {res['tail'][-400:]}"})
    else:
      rows += [{**r, "process_s": res["seconds"], "limit_s": round(limit)} for r in got]
  step = {r["side"]: r["step_s"] for r in rows if "step_s" in r}
  for r in rows:
    if "step_s" in r:
      for ref in ("hf_eager", "hf_compile"):
        r[f"vs_{ref}"] = round(step[ref] / r["step_s"], 3) if ref in step else None
    emit(r)
  return rows
