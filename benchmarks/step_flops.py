"""XLA's floating-point operation count of each device preset's train-step program, the
measured side of the H200 time estimates (BUILD_NOTES, issue 32).

For every run that ``benchmarks/step_timing.py`` times (``step_timing.plan``: the same
configs, members and datasets as the presets train), the run's step program is built as
``sbjax.train`` builds it and lowered (not compiled, not run) for its abstract state and batch;
``Lowered.cost_analysis()["flops"]`` is XLA's count for one step of all the members.

    pflop  = flops_per_step · steps / 1e15          (per run; summed per preset)
    s_at_u = pflop · 1e15 / (u · PEAK)              (the compute time at utilisation u)

PEAK = 989 TFLOP/s (H200/H100 dense bf16; ``--peak``), u = ``--util`` (0.2). A frozen-trunk
population is also lowered with each member recomputing the trunk (``build(share_trunk=False)``:
``unshared_flops``) so that the saving of ``sbjax.train.population.make_shared_trunk_step`` is
a ratio of two counts of the same run. ``--memory`` compiles each step on this backend and adds
XLA's planned arguments + temporaries (GiB). Not counted: evaluations, checkpoints, compiles and the
measurement passes (see step_timing for measured times).

  PYTHONPATH=. python benchmarks/step_flops.py --runs=vocab_threshold:gpu,saturation:gpu-planted
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import _bench  # noqa: F401  (puts the checkout on sys.path)
import jax
import numpy as np
import step_timing

from sbjax import sharding as shd
from sbjax.atomic import atomic_write_text
from sbjax.paths import upath
from sbjax.train import build as build_mod
from sbjax.train import resolve_vocab
from sbjax.train.members import check_members
from sbjax.train.population import shares_trunk
from sbjax.train.step import TrainState

PEAK = 989e12


def _abstract_args(fns, cfgs, varies):
  """The step's arguments as shapes: state (with a member axis when n > 1), batch, and the
  members' lr scales and weight decays."""
  n = len(cfgs)

  def stacked(tree, shardings):
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(
        ((n,) if n > 1 else ()) + x.shape, x.dtype, sharding=s), tree, shardings)

  params = stacked(fns.abstract, fns.p_sh)
  state = TrainState(jax.ShapeDtypeStruct((), np.int32), params,
                     jax.eval_shape(fns.opt_init, params))
  tc = cfgs[0].train
  batch = (n,) if varies.data else ()
  batch = jax.ShapeDtypeStruct(batch + (tc.batch_size, tc.seq_len + 1), np.int32)
  extra = (jax.ShapeDtypeStruct((n,), np.float32),) * 2 if n > 1 else ()
  return (state, batch, *extra)


def step_flops(cfgs, shared: bool | None = None, memory: bool = False):
  """XLA's flop count of one step of the run of ``cfgs`` (module doc); ``shared=False``: members
  on a frozen trunk recompute its forward each (None or True: as ``sbjax.train`` chooses). ``memory``:
  also compile it and return (flops, GiB of its arguments + temporaries, as XLA:CPU plans
  them; the state is donated, so this is about the step's peak)."""
  n = len(cfgs)
  varies = check_members(cfgs) if n > 1 else build_mod.ONE
  mesh = shd.make_mesh(cfgs[0].mesh)
  with jax.set_mesh(mesh):
    fns = build_mod.build.uncached(cfgs[0], mesh, -1, n, varies, shared is not False)
    lowered = fns.step.lower(*_abstract_args(fns, cfgs, varies))
    flops = float(lowered.cost_analysis()["flops"])
    if not memory:
      return flops
    m = lowered.compile().memory_analysis()
    return flops, (m.argument_size_in_bytes + m.temp_size_in_bytes) / 2**30


def count(run: step_timing.TimedRun, memory: bool = False) -> dict:
  """One run's record: flops per step, PFLOP of its steps, and for a population on a shared
  frozen trunk the count without the sharing; ``memory``: the step's planned GiB too."""
  vocab = run.datasets[0].vocab_size
  cfgs = [resolve_vocab(c, vocab) for c in run.cfgs]
  tc = cfgs[0].train
  rec = {"run": run.name, "members": len(cfgs), "steps": tc.steps,
         "tokens_per_step": tc.batch_size * tc.seq_len}
  if memory:
    rec["flops_per_step"], rec["step_gib"] = step_flops(cfgs, memory=True)
  else:
    rec["flops_per_step"] = step_flops(cfgs)
  rec["pflop"] = rec["flops_per_step"] * tc.steps / 1e15
  if len(cfgs) > 1 and shares_trunk(cfgs[0], own_batches=False):
    rec["unshared_flops_per_step"] = step_flops(cfgs, shared=False)
    rec["shared_saving"] = rec["unshared_flops_per_step"] / rec["flops_per_step"]
  return rec


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--runs", default="saturation:gpu-planted,collapse:gpu,collapse:gpu-grid,"
                  "vocab_threshold:gpu")
  ap.add_argument("--collapse_tokens", type=int, default=2_000_000)
  ap.add_argument("--peak", type=float, default=PEAK, help="the device's peak FLOP/s")
  ap.add_argument("--util", type=float, default=0.2, help="the assumed utilisation")
  ap.add_argument("--out", default="", help="a folder for step_flops.json")
  ap.add_argument("--memory", action="store_true", help="also compile each step (on this "
                  "backend) and report its arguments + temporaries in GiB")
  ap.add_argument("--only", default="", help="comma-separated run names; default: all")
  a = ap.parse_args(argv)
  result = {"peak": a.peak, "util": a.util, "runs": [], "presets": {}}
  with tempfile.TemporaryDirectory() as tmp:
    for spec in a.runs.split(","):
      only = set(filter(None, a.only.split(",")))
      recs = [dict(preset=spec, **count(r, a.memory))
              for r in step_timing.plan(spec, a.collapse_tokens, Path(tmp))
              if not only or r.name in only]
      for r in recs:
        print("FLOPS " + json.dumps(r), flush=True)
      pflop = sum(r["pflop"] for r in recs)
      result["runs"] += recs
      result["presets"][spec] = {"pflop": pflop, "s_at_util": pflop * 1e15 / (a.util * a.peak)}
      print(f"{spec}: {pflop:.4g} PFLOP of train steps, {result['presets'][spec]['s_at_util']:.0f}"
            f" s at {a.util:.0%} of {a.peak / 1e12:.0f} TFLOP/s", flush=True)
  if a.out:
    upath(a.out).mkdir(parents=True, exist_ok=True)
    atomic_write_text(upath(a.out) / "step_flops.json", json.dumps(result, indent=2))
  return result


if __name__ == "__main__":
  main()
