r"""A full-shape rehearsal of issue 32's device parts on the CPU: each part's REAL ``gpu``
preset, every shape kept, only its step counts (and where unavoidable its number of V or
groups) cut, run end to end through the same run and report functions that
benchmarks/device_science.sh calls, so that a shape-, dtype-, path- or format-dependent bug
shows here and not in a GPU session.

  PYTHONPATH=. python benchmarks/device_rehearsal.py \
      --parts=vocab_threshold,collapse,collapse-grid,saturation --out=DIR [--tokens=device_tokens]

Each part runs in its own child process (its CPU seconds and peak RSS are its own) into
DIR/PART, then prints its wall and CPU seconds per phase (run, report), its peak RSS, whether
section.md was written and its first lines. The exit status is non-zero when a part raised.

What is cut (the shrunk preset is ``dataclasses.replace`` of the real Preset, its overrides
dict and its knobs; every other field is the device preset's; ``--help`` prints the same list):

- vocab_threshold (``experiments.vocab_threshold`` preset ``gpu``; ``run`` then
  ``report.write_section``): train.steps 1200 -> 2, train.warmup_steps 100 -> 1,
  train.eval_every and train.ckpt_every 200 -> 1 (so the trunk has two evaluated checkpoints
  to pick its best from), train.eval_batches 4 -> 2 (a d512 L6 eval batch costs ~6 s of CPU
  here; the preset's 4 x 64 windows are first checked against the validation split of every
  V of the shipped files, without training), head_steps 400 -> 2, vocabs (1024, 2048, 4096, 8192) -> (1024,): V 8192's head population
  needs 33.7 GiB (BUILD_NOTES "Session 16"), and each V costs ~3 min of CPU. Kept: d512, 6
  layers, batch 64 x 256, bf16, the 20 padded heads (ranks 16..512 x 2 head lrs) on the frozen
  best trunk, async checkpoints, the shipped token files and tokenizer, r* at TOL_CHAR.
- collapse (preset ``gpu``; ``run`` then ``report.write_section``): epoch_tokens 0 (the whole
  train split, ~249 steps per epoch) -> 8,193 tokens (1 step per epoch, 3 steps), which also
  cuts the collapse pass's train windows (the class means) from ~7,980 to 32 (the warm-up,
  60 steps, is clamped to steps - 1 = 2 by the experiment itself). Kept: the 24 data-order seeds of L2-d256 as one population,
  V 1024, batch 32 x 256, the whole validation split (val_tokens 0), chunk 16, 10,000
  permutations, the Fisher CIs and tables.
- collapse-grid (preset ``gpu-grid``): as collapse, and depths (1, 2, 4) x widths (64, 128,
  256, 512) -> (1, 4) x (64, 512): the grid's four corners (8 runs of the 24), its smallest
  and largest shapes, to fit ~5 min of CPU.
- saturation (``experiments.saturation`` preset ``gpu-planted``; ``run_planted`` then
  ``planted_report.write_section``): train.steps 14,377 -> 6, train.warmup_steps 144 -> 1,
  train.eval_every 14,377 -> 6, train.ckpt_every 1000 -> 2 (checkpoints 0, 1, 2, 4, 6),
  train.log_every 100 -> 2. Kept: the tail language (V 4096, M 8, k 32, Zipf 1.5, its exact H,
  the svd floor bound, the rarest-token counts), the device sampler, all 12 arms in their
  three populations (d 32 x 6, d 128 x 4, d 512 x 2, bf16), 2 layers, batch 64 x 128, 64
  validation windows.

The budget clocks are kept running (their hooks, estimates and start checks are exercised)
with budget_s 450 -> 86,400 s: on this CPU a part takes longer than 450 s, so the real budget
would refuse the later runs at their start check; at these step counts no run reaches its
estimate step (10 + 200), so no estimate is made.

A warning that validation windows repeat (a preset asking more eval windows than the shipped
token files hold: ``Dataset.eval_windows``) is an error here, so that the rehearsal, which
reads the real files, fails on it. What the rehearsal cannot show: GPU
numerics, speed, the memory at V > 1024 (V 8192's heads), and anything that depends on the
step count (convergence, the rise statistic's verdicts: its numbers here are of 6 steps).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

PARTS = ("vocab_threshold", "collapse", "collapse-grid", "saturation")
BUDGET_S = 86_400.0  # the clocks run, and stop nothing (module doc)


def _cut(cuts: list, what: str, old, new, why: str = "") -> object:
  cuts.append(f"{what} {old} -> {new}" + (f" ({why})" if why else ""))
  return new


def _overrides(p, cuts: list, new: dict, why: dict) -> dict:
  """The preset's overrides with ``new`` over them, each change recorded in ``cuts``."""
  for k, v in new.items():
    _cut(cuts, k, p.overrides.get(k), v, why.get(k, ""))
  return {**p.overrides, **new}


def vocab_threshold_preset():
  from experiments.vocab_threshold.presets import PRESETS
  p, cuts = PRESETS["gpu"], []
  o = _overrides(p, cuts, {"train.steps": 2, "train.warmup_steps": 1, "train.eval_every": 1,
                           "train.ckpt_every": 1, "train.eval_batches": 2},
                 {"train.eval_every": "two evaluated checkpoints for the best trunk",
                  "train.eval_batches": "~6 s of CPU per d512 L6 batch; the preset's 4 are "
                                        "checked against every V's files first"})
  k = p.knobs
  plan = dataclasses.replace(k.plan, head_steps=_cut(cuts, "head_steps", k.plan.head_steps, 2))
  knobs = dataclasses.replace(
      k, plan=plan,
      vocabs=_cut(cuts, "vocabs", k.vocabs, (1024,), "V 8192's head population needs 33.7 GiB "
                  "(BUILD_NOTES Session 16); each V ~3 min of CPU"),
      budget_s=_cut(cuts, "budget_s", k.budget_s, BUDGET_S, "clock kept, stops nothing"))
  return dataclasses.replace(p, overrides=o, knobs=knobs), cuts


def eval_windows_fit(tokens: str) -> str:
  """vocab_threshold gpu's evaluation windows (its real eval_batches x batch) against the
  validation split of every V of the shipped files; a repeat is an error (module doc)."""
  import tempfile
  from experiments.vocab_threshold.presets import PRESETS
  from experiments.vocab_threshold.run import make_plan, sweep_dataset
  said = []
  for v in PRESETS["gpu"].knobs.vocabs:
    plan = make_plan("gpu", tokens, v)
    with tempfile.TemporaryDirectory() as d:
      ds = sweep_dataset(plan, Path(d))
      n = plan.base.train.eval_batches
      ds.eval_windows(n)  # warns (here: raises) when the split has fewer windows
      said.append(f"V{v} {n * plan.base.train.batch_size} of {ds.n_val_windows}")
  return "eval windows of the real preset fit every V: " + ", ".join(said)


def _collapse(name: str, grid: bool):
  from experiments.collapse.presets import PRESETS
  p, cuts = PRESETS[name], []
  o, k = p.overrides, p.knobs  # (its warm-up is clamped to steps - 1 by measure.train_config)
  batch, seq = o["train.batch_size"], o["train.seq_len"]
  extra = {}
  if grid:
    extra = dict(depths=_cut(cuts, "depths", k.depths, (1, 4), "the grid's corners"),
                 widths=_cut(cuts, "widths", k.widths, (64, 512), "the grid's corners"))
  knobs = dataclasses.replace(
      k, **extra,
      epoch_tokens=_cut(cuts, "epoch_tokens", k.epoch_tokens, batch * seq + 1,
                        "1 step per epoch; the pass's train windows ~7,980 -> 32"),
      budget_s=_cut(cuts, "budget_s", k.budget_s, BUDGET_S, "clock kept, stops nothing"))
  return dataclasses.replace(p, overrides=o, knobs=knobs), cuts


def saturation_preset():
  from experiments.saturation.planted_presets import PLANTED_PRESETS
  p, cuts = PLANTED_PRESETS["gpu-planted"], []
  o = _overrides(p, cuts, {"train.steps": 6, "train.warmup_steps": 1, "train.eval_every": 6,
                           "train.ckpt_every": 2, "train.log_every": 2},
                 {"train.ckpt_every": "checkpoints 0, 1, 2, 4, 6"})
  knobs = dataclasses.replace(p.knobs, budget_s=_cut(cuts, "budget_s", p.knobs.budget_s,
                                                     BUDGET_S, "clock kept, stops nothing"))
  return dataclasses.replace(p, overrides=o, knobs=knobs), cuts


def shrunk(part: str):
  """(the shrunk Preset, [what was cut]) of one part."""
  if part == "vocab_threshold":
    return vocab_threshold_preset()
  if part in ("collapse", "collapse-grid"):
    return _collapse("gpu" if part == "collapse" else "gpu-grid", part == "collapse-grid")
  return saturation_preset()


def _cpu() -> float:
  r = resource.getrusage(resource.RUSAGE_SELF)
  return r.ru_utime + r.ru_stime


def _phase(times: dict, name: str, fn):
  t, c = time.perf_counter(), _cpu()
  try:
    return fn()
  finally:
    times[name] = {"wall_s": round(time.perf_counter() - t, 1),
                   "cpu_s": round(_cpu() - c, 1)}


def run_part(part: str, out: Path, tokens: str) -> dict:
  """One part, in this process, into ``out``: its run and report phases' times."""
  preset, cuts = shrunk(part)
  print(f"== {part}: cut: " + "; ".join(cuts), flush=True)
  out.mkdir(parents=True, exist_ok=True)
  times: dict = {}
  if part == "vocab_threshold":
    from experiments.vocab_threshold import report, run
    print(_phase(times, "preflight", lambda: eval_windows_fit(tokens)), flush=True)
    _phase(times, "run", lambda: run(out, preset, data=tokens))
    _phase(times, "report", lambda: report.write_section(out))
  elif part in ("collapse", "collapse-grid"):
    from experiments.collapse.report import write_section
    from experiments.collapse.run import run
    v = preset.overrides["data.options.vocab_size"]
    data = ",".join(str(Path(tokens) / f"V{v}" / f) for f in ("train.uint16.bin",
                                                              "val.uint16.bin"))
    _phase(times, "run", lambda: run(out, preset, data=data))
    _phase(times, "report", lambda: write_section(out))
  else:
    from experiments.saturation.planted_report import write_section
    from experiments.saturation.planted_run import run_planted
    _phase(times, "run", lambda: run_planted(out, preset))
    _phase(times, "report", lambda: write_section(out))
  return {"part": part, "cuts": cuts, "phases": times}


def child(part: str, out: Path, tokens: str) -> None:
  """The child process: run the part, write OUT/rehearsal.json (module doc: a repeated
  validation window is an error)."""
  warnings.filterwarnings("error", message=r".*windows repeat")
  res = run_part(part, out, tokens)
  (out / "rehearsal.json").write_text(json.dumps(res, indent=1))


def spawn(part: str, out: Path, tokens: str) -> dict:
  """Run one part in a child process; its exit status, wall, CPU and peak RSS."""
  t = time.perf_counter()
  proc = subprocess.Popen([sys.executable, __file__, f"--parts={part}", f"--out={out.parent}",
                           f"--tokens={tokens}", "--child"])
  _, status, ru = os.wait4(proc.pid, 0)
  proc.returncode = os.waitstatus_to_exitcode(status)
  res = {"part": part, "rc": proc.returncode, "wall_s": round(time.perf_counter() - t, 1),
         "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
         "peak_rss_gib": round(ru.ru_maxrss / 2**20, 2)}  # ru_maxrss: KiB on Linux
  f = out / "rehearsal.json"
  if f.exists():
    res["phases"] = json.loads(f.read_text())["phases"]
  return res


def report(res: dict, out: Path) -> None:
  sec = out / "section.md"
  print(f"== {res['part']}: exit status {res['rc']}, {res['wall_s']} s wall, {res['cpu_s']} s "
        f"CPU, peak RSS {res['peak_rss_gib']} GiB; phases {res.get('phases', {})}")
  if sec.exists():
    head = sec.read_text().splitlines()[:8]
    print(f"   section.md written ({sec.stat().st_size} bytes); first lines:")
    print("\n".join(f"   | {line}" for line in head))
  else:
    print("   section.md NOT written")


def parse(argv):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {PARTS}")
  ap.add_argument("--out", required=True, help="output directory (one folder per part)")
  ap.add_argument("--tokens", default="device_tokens",
                  help="the token folder of benchmarks/build_device_tokens.py (V<V>/...)")
  ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  a = ap.parse_args(argv)
  parts = [s for s in a.parts.split(",") if s]
  bad = [s for s in parts if s not in PARTS]
  if bad or not parts:
    print(f"error: unknown part {', '.join(map(repr, bad)) or '(none given)'}; use --parts= a "
          f"comma-separated list of {', '.join(PARTS)}", file=sys.stderr)
    sys.exit(2)
  return a, parts


def main(argv=None) -> int:
  a, parts = parse(argv)
  out = Path(a.out)
  if a.child:
    child(parts[0], out / parts[0], a.tokens)
    return 0
  failed = []
  for part in parts:
    res = spawn(part, out / part, a.tokens)
    report(res, out / part)
    failed += [part] if res["rc"] != 0 else []
  (out / "rehearsal_summary.json").write_text(json.dumps({"failed": failed}, indent=1))
  if failed:
    print(f"error: part(s) {', '.join(failed)} raised (their tracebacks above)", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
