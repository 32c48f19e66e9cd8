r"""Measured train-step times of the device presets (issue 32): each run of a preset is built
at its full size, trained for its first W + N steps on this machine's default device, timed,
and its whole training extrapolated. This replaces the FLOP-count estimates.

  PYTHONPATH=. python benchmarks/step_timing.py [--runs=saturation:gpu-planted,collapse:gpu,
      collapse:gpu-grid,vocab_threshold:gpu] [--warmup=10] [--steps=50] [--only=RUN,...]
      [--out=DIR] [--collapse_tokens=2000000]

A run is what the preset trains in one vmapped step: a population of the saturation planted
arms (``experiments.saturation.planted_run.population_plan``: the tail language, the device
sampler), a collapse group (``experiments.collapse.run.groups``: its members on token
windows; random tokens of the preset's vocabulary stand in for the shipped files, whose
length, ``--collapse_tokens`` train tokens, sets the step count: the content does not change
the time of a step), or a vocab_threshold trunk and its heads (``vocab_threshold_plan``: per V
the trunk run, and the ONE population of padded heads, every rank x head lr on the frozen
trunk, that the preset trains: ``rank_sweep.group_configs``). Each run trains in memory (no
checkpoint, no evaluation) with a loop hook that reads the clock when the loop reports a step
(the step's metrics have reached the host, so the step is done):

  compile_s   = t(step 0 reported) − t(loop start): compilation and the first step
  s_per_step  = (t(step W + N reported) − t(step W reported)) / N
  projected_s = compile_s + s_per_step · (steps − 1)

Not included: checkpoint saves, evaluations, the measurement passes, floors and the
language's construction (``build_s``, the datasets' set-up and, for frozen-trunk heads, the
freshly initialised trunk they load, is printed beside). One line
``BENCH {json}`` per run, a table, and ``timing.json`` in ``--out``; per preset the sum of
its runs' projections against the 480 s a device preset may take.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import Callable, NamedTuple

import _bench  # noqa: F401  (puts the checkout on sys.path)
import jax
import numpy as np

from _bench import emit
from sbjax.config import Config
from sbjax.data.dataset import Dataset
from sbjax.train import train
from sbjax.train.loop import Hook

LIMIT_S = 480.0  # a device preset's whole command: 8 minutes


class TimedRun(NamedTuple):
  """One run to time: its members' Configs and datasets; ``prepare`` (None: nothing) makes
  what it needs on disk first (a frozen-trunk head's trunk checkpoint)."""
  name: str
  cfgs: list
  datasets: list
  prepare: Callable[[], None] | None = None


class Timer(Hook):
  """The clock at the loop's start and when steps 0, W and W + N are reported."""

  def __init__(self, warmup: int, n: int):
    self.marks, self.want = {}, {0, warmup, warmup + n}

  def begin(self, state, start: int, end: int) -> None:
    self.marks["begin"] = time.perf_counter()

  def on_step(self, i: int, metrics: dict) -> None:
    if i in self.want:
      self.marks[i] = time.perf_counter()


def projection(marks: dict, warmup: int, n: int, steps: int) -> dict:
  """compile_s, s_per_step and projected_s of the module doc from a Timer's marks."""
  compile_s = marks[0] - marks["begin"]
  per_step = (marks[warmup + n] - marks[warmup]) / n
  return {"compile_s": compile_s, "s_per_step": per_step,
          "projected_s": compile_s + per_step * (steps - 1)}


def time_run(cfgs: list, datasets: list, warmup: int, n: int) -> dict:
  """Train the members' first ``warmup + n + 1`` steps in memory and project (module doc); a
  run shorter than that times fewer (``warmup``, ``timed`` in the result say how many)."""
  steps = cfgs[0].train.steps
  warmup = min(warmup, max(steps - 2, 0))
  n = min(n, steps - 1 - warmup)
  if n < 1:
    raise SystemExit(f"error: {cfgs[0].name}: {steps} steps are too few to time")
  timer = Timer(warmup, n)
  one = len(cfgs) == 1
  train(cfgs[0] if one else cfgs, None, dataset=datasets[0] if len(datasets) == 1 else datasets,
        stop_after=warmup + n + 1, quiet=True, hooks=[timer])
  return {"warmup": warmup, "timed": n, **projection(timer.marks, warmup, n, steps)}


def saturation_plan(preset: str) -> list:
  from experiments.saturation.planted_run import population_plan
  return population_plan(preset)


def collapse_plan(preset: str, train_tokens: int) -> list:
  """[(name, member Configs, datasets)] of a collapse preset's groups on random tokens of
  ``train_tokens`` (or the preset's own epoch_tokens when it sets one)."""
  from experiments.collapse.measure import model_config, train_config
  from experiments.collapse.presets import get_preset
  from experiments.collapse.run import groups

  p = get_preset(preset)
  o, k = p.overrides, p.knobs
  vocab, seq_len, batch = o["data.options.vocab_size"], o["train.seq_len"], o["train.batch_size"]
  n_tr = k.epoch_tokens or train_tokens
  rng = np.random.default_rng(0)
  tr = rng.integers(0, vocab, n_tr + 1, dtype=np.int32)
  va = rng.integers(0, vocab, max(k.val_tokens, batch * seq_len) + 1, dtype=np.int32)
  out = []
  for name, _, n_layers, d, members, epochs in groups(p):
    spe = max(1, (len(tr) - 1) // seq_len // batch)
    tc = train_config(p, spe * max(epochs))
    mc = model_config(p, n_layers, d, vocab)
    cfgs = [Config(model=mc, name=name, train=dataclasses.replace(
        tc, seed=m.seed, data_seed=m.data_seed, weight_decay=m.weight_decay)) for m in members]
    dss = [Dataset(tr, va, seq_len=seq_len, global_batch_size=batch, seed=m.data_seed,
                   vocab_size=vocab, process_index=0, process_count=1) for m in members]
    out.append((name, cfgs, dss))
  return out


def _trunk_checkpoint(trunk, wd: Path) -> Callable[[], None]:
  """Write ``wd``: a step-0 checkpoint of the trunk run's freshly initialised model, which
  the frozen-trunk heads load (``train.init_from``; their step time does not depend on the
  trunk's values). Once: a checkpoint already there is kept."""
  def prepare() -> None:
    from sbjax import checkpoint as ckpt
    from sbjax.model import Model

    if wd.exists() and ckpt.list_steps(wd):
      return
    params = Model(trunk.model).init(jax.random.PRNGKey(trunk.train.seed), seq_len=8)
    ckpt.write_params(wd, trunk, params, 0)
  return prepare


def vocab_threshold_plan(preset: str, tmp: Path) -> list[TimedRun]:
  """Per V of a vocab_threshold preset what it trains: its trunk (the full run), and its
  protocol-(a) heads as the ONE population of padded heads of every rank x head lr on the
  frozen trunk (``rank_sweep.group_configs``, as ``run_plan`` builds it; a preset whose heads
  are separate runs, ``Plan.head_population`` off, is refused). Random token files of each V
  stand in for the shipped ones (under ``tmp``), and a freshly initialised trunk
  (``_trunk_checkpoint``, written before the heads are timed) for the trained one."""
  from experiments.vocab_threshold.presets import get_preset
  from experiments.vocab_threshold.run import TOKEN_FILES, make_plan
  from sbjax.data import make_dataset
  from sbjax.studies import rank_sweep as rs
  from sbjax.train import resolve_vocab

  out = []
  rng = np.random.default_rng(0)
  for v in get_preset(preset).knobs.vocabs:
    (tmp / f"V{v}").mkdir(parents=True, exist_ok=True)
    for f in TOKEN_FILES[:2]:
      rng.integers(0, v, 1 << 18, dtype=np.uint16).tofile(tmp / f"V{v}" / f)
    p = make_plan(preset, str(tmp), v)
    if not p.head_population:
      raise SystemExit(f"error: vocab_threshold:{preset} trains its heads as separate runs; "
                       "step_timing times the device presets (gpu, gpu-test), whose heads are "
                       "one population (Plan.head_population)")
    trunk = rs.run_config(p, next(s for s in rs.specs(p) if s.protocol == "full"))
    tc = trunk.train
    ds = make_dataset(trunk.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                      workdir=str(tmp / f"V{v}"))
    trunk = resolve_vocab(trunk, ds.vocab_size)
    (grp,) = [g for g in rs.groups(p) if g[0].protocol == "a"]
    heads, pad = rs.group_configs(p, grp, str(tmp / f"V{v}" / "trunk"), 0)
    out += [TimedRun(f"V{v}-trunk", [trunk], [ds]),
            TimedRun(f"V{v}-heads-pad{pad}", heads, [ds],
                     _trunk_checkpoint(trunk, tmp / f"V{v}" / "trunk"))]
  return out


def plan(run: str, train_tokens: int, tmp: Path | None = None) -> list[TimedRun]:
  """The runs of ``EXPERIMENT:PRESET``."""
  exp, _, preset = run.partition(":")
  if exp == "saturation":
    return [TimedRun(*r) for r in saturation_plan(preset)]
  if exp == "collapse":
    return [TimedRun(*r) for r in collapse_plan(preset, train_tokens)]
  if exp == "vocab_threshold":
    return vocab_threshold_plan(preset, tmp or Path(tempfile.mkdtemp()))
  raise SystemExit(f"error: --runs: unknown experiment {exp!r} in {run!r}; use "
                   "saturation:PRESET, collapse:PRESET or vocab_threshold:PRESET")


def _save(out: str, result: dict) -> None:
  if out:
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "timing.json").write_text(json.dumps(result, indent=1))


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--runs", default="saturation:gpu-planted,collapse:gpu,collapse:gpu-grid,"
                  "vocab_threshold:gpu")
  ap.add_argument("--warmup", type=int, default=10)
  ap.add_argument("--steps", type=int, default=50)
  ap.add_argument("--collapse_tokens", type=int, default=2_000_000)
  ap.add_argument("--only", default="", help="comma-separated run names (e.g. d32); "
                  "default: every run of each preset")
  ap.add_argument("--out", default="")
  a = ap.parse_args(argv)
  if a.warmup < 1 or a.steps < 1:
    raise SystemExit(f"error: --warmup={a.warmup} and --steps={a.steps} must be >= 1")
  tmp = tempfile.TemporaryDirectory()
  result = {"device": str(jax.devices()[0]), "backend": jax.default_backend(),
            "warmup": a.warmup, "timed_steps": a.steps, "runs": [], "presets": {}}
  for spec in a.runs.split(","):
    t0 = time.perf_counter()
    only = set(filter(None, a.only.split(",")))
    for name, cfgs, dss, prepare in plan(spec, a.collapse_tokens, Path(tmp.name)):
      if only and name not in only:
        continue
      if prepare is not None:
        prepare()
      build_s = time.perf_counter() - t0
      tc = cfgs[0].train
      rec = {"preset": spec, "run": name, "members": len(cfgs), "steps": tc.steps,
             "d": cfgs[0].model.d_model, "batch": tc.batch_size, "seq_len": tc.seq_len,
             "frozen_trunk": tc.freeze_trunk, "build_s": round(build_s, 2),
             **time_run(cfgs, dss, a.warmup, a.steps)}
      result["runs"].append(emit(rec))
      t0 = time.perf_counter()
      _save(a.out, result)  # after every run: a command cut off keeps what it measured
    total = sum(r["projected_s"] for r in result["runs"] if r["preset"] == spec)
    result["presets"][spec] = {"projected_s": total, "fits_480_s": total <= LIMIT_S}
    _save(a.out, result)
  tmp.cleanup()
  print(f"{'run':<40} {'members':>7} {'steps':>7} {'compile s':>9} {'s/step':>9} "
        f"{'projected s':>11}")
  for r in result["runs"]:
    print(f"{r['preset'] + ' ' + r['run']:<40} {r['members']:>7} {r['steps']:>7} "
          f"{r['compile_s']:>9.2f} {r['s_per_step']:>9.4g} {r['projected_s']:>11.1f}")
  for spec, p in result["presets"].items():
    print(f"{spec}: projected training {p['projected_s']:.0f} s "
          f"({'within' if p['fits_480_s'] else 'OVER'} the {LIMIT_S:g} s of one command)")
  return result


if __name__ == "__main__":
  main()
