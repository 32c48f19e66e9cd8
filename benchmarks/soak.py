r"""Kill-and-resume soak: SIGKILL `experiments.train` at random times, rerun it until it
finishes, and check that the result is the uninterrupted run, bit for bit.

  PYTHONPATH=. python benchmarks/soak.py --kills=12 --steps=40 --write_docs

One uninterrupted reference run (started once the soak run has compiled its step into the
persistent compilation cache) and one soak workdir, both made by the same command line::

  python -m experiments.train --config=tiny --workdir=W --config.train.steps=S \
      --config.train.ckpt_every=1 --config.train.log_every=1 \
      --config.data.options.data_dir=OUT/tfds

With a checkpoint after every step most of the training loop is spent saving, so many
kills land mid-save. A kill counts as *mid-save* when orbax's temporary directory
(``<step>.orbax-checkpoint-tmp-*``) is left in ``checkpoints/`` afterwards. Each attempt
waits for training to make progress (a new step directory) and then kills after a random
delay; some kills (``--mid_save_p``) are aimed at a save (the first moment a temporary
directory exists after the delay), and some (``--startup_kill_p``) land at a random time
after the start, often during start-up or restore.

Checks (any failure is an AssertionError naming it):
  * final parameters and optimizer state equal the reference bitwise;
  * every checkpoint left in ``checkpoints/`` restores with orbax (params, opt, meta) and
    equals the reference's checkpoint of the same step bitwise;
  * the metrics.jsonl loss sequence, deduplicated by step, equals the reference's bitwise;
  * no orbax temporary directory is left in ``checkpoints/``.
Returns / prints the counts: kills, kills mid-save, resumes, bitwise-equal, moved aside, and
the CPU seconds of all the soak's attempts against the reference run's (``cpu_ratio``: what
the kills and resumes cost).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def train_cmd(workdir: Path, steps: int, tfds_dir: Path, ckpt_every: int = 1) -> list[str]:
  return [sys.executable, "-m", "experiments.train", "--config=tiny", f"--workdir={workdir}",
          f"--config.train.steps={steps}", f"--config.train.ckpt_every={ckpt_every}",
          "--config.train.log_every=1", f"--config.data.options.data_dir={tfds_dir}"]


def soak_env(cache_dir: str | None = None) -> dict:
  """The environment for the subprocesses: CPU, and a persistent compilation cache (the one
  tests/conftest.py set up, if any) so that restarts do not recompile."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
  env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
  if "JAX_COMPILATION_CACHE_DIR" not in env:
    env["JAX_COMPILATION_CACHE_DIR"] = cache_dir or tempfile.mkdtemp(prefix="sbjax_jax_cache_")
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
  return env


def _step_dirs(workdir: Path) -> set[int]:
  d = workdir / "checkpoints"
  return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.is_dir() else set()


def _tmp_dirs(workdir: Path) -> list[str]:
  d = workdir / "checkpoints"
  return sorted(p.name for p in d.iterdir() if "tmp" in p.name) if d.is_dir() else []


def _bad_entries(workdir: Path) -> tuple[int, int]:
  """(step directories, orbax tmp directories) in WORKDIR/checkpoints_bad."""
  d = workdir / "checkpoints_bad"
  if not d.is_dir():
    return 0, 0
  names = [p.name for p in d.iterdir()]
  tmp = sum("tmp" in n for n in names)
  return len(names) - tmp, tmp


def _start(cmd, env, log_path: Path) -> tuple[subprocess.Popen, object]:
  f = open(log_path, "w")  # noqa: SIM115 - closed by the caller
  return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT), f


def _kill_plan(kills: int, rng: random.Random, plan, startup_kill_p: float,
               mid_save_p: float) -> list[str]:
  """``plan``, or ``kills`` modes drawn with ``startup_kill_p`` and ``mid_save_p``; checked."""
  if plan is None:
    plan = []
    for _ in range(kills):
      u = rng.random()
      plan.append("startup" if u < startup_kill_p else
                  "save" if u < startup_kill_p + mid_save_p else "random")
  if len(plan) != kills or set(plan) - {"random", "save", "startup"}:
    raise ValueError(f"plan must list {kills} modes out of random|save|startup, got {plan}")
  return plan


class _RefRun:
  """The uninterrupted reference run, started once: as soon as the soak run has compiled
  (persistent cache) and prepared the data, or after it at the latest."""

  def __init__(self, cmd: list[str], env: dict, log_path: Path):
    self.cmd, self.env, self.log_path = cmd, env, log_path
    self.proc = self.log = None

  def start_once(self) -> None:
    if self.proc is None:
      self.proc, self.log = _start(self.cmd, self.env, self.log_path)

  def finish(self, timeout_s: float) -> None:
    self.start_once()
    rc = self.proc.wait(timeout=timeout_s)
    self.log.close()
    if rc != 0:
      raise AssertionError(f"the reference run failed ({rc}):\n{self.log_path.read_text()[-3000:]}")


def _kill_when_due(proc, wd: Path, mode: str, rng: random.Random, before: set[int],
                   ref: _RefRun, max_delay_s: float, attempt_timeout_s: float) -> bool:
  """Watch one attempt and SIGKILL it as ``mode`` says (see ``run_soak``); starts the
  reference run once step 1 is saved. Returns whether it was killed."""
  t_start = time.perf_counter()
  deadline = t_start + rng.uniform(0.5, 4.0) if mode == "startup" else None
  while proc.poll() is None and time.perf_counter() - t_start < attempt_timeout_s:
    now = time.perf_counter()
    if ref.proc is None and 1 in _step_dirs(wd):
      ref.start_once()
    if deadline is None and len(_step_dirs(wd) - before) >= 1:
      deadline = now + rng.uniform(0.0, max_delay_s)  # training is under way
    if deadline is not None and now >= deadline and (mode != "save" or _tmp_dirs(wd)):
      os.kill(proc.pid, signal.SIGKILL)
      return True
    time.sleep(0.002)
  return False


def _attempts(wd: Path, cmd: list[str], env: dict, logs: Path, counts: dict, rng: random.Random,
              ref: _RefRun, max_delay_s: float, attempt_timeout_s: float, say) -> None:
  """Start the soak run again and again, killing it as ``counts["plan"]`` says, until an
  attempt finishes; counts the starts, kills (mid-save ones too) and resumes."""
  plan, kills = counts["plan"], len(counts["plan"])
  while True:
    counts["starts"] += 1
    k = counts["starts"]
    log_path = logs / f"attempt_{k:02d}.txt"
    before, tmp_before = _step_dirs(wd), set(_tmp_dirs(wd))
    proc, f = _start(cmd, env, log_path)
    mode = plan[counts["kills"]] if counts["kills"] < kills else None
    killed = mode is not None and _kill_when_due(proc, wd, mode, rng, before, ref, max_delay_s,
                                                 attempt_timeout_s)
    rc = proc.wait(timeout=attempt_timeout_s)
    f.close()
    text = log_path.read_text(errors="replace")
    m = re.search(r"resuming \S+ from step (\d+)", text)
    if m:
      counts["resumes"] += 1
      counts["resume_steps"].append(int(m.group(1)))
    if killed and rc == -signal.SIGKILL:
      counts["kills"] += 1
      mid = bool(set(_tmp_dirs(wd)) - tmp_before)  # a save of this attempt was cut short
      counts["kills_mid_save"] += mid
      say(f"attempt {k}: {mode} kill after step {max(_step_dirs(wd), default=None)}, "
          f"mid-save={mid}")
      continue
    if rc != 0:
      raise AssertionError(f"attempt {k} failed with exit code {rc}:\n{text[-3000:]}")
    say(f"attempt {k}: finished")
    return


def run_soak(out: Path, *, kills: int = 3, steps: int = 12, seed: int = 0,
             plan: list[str] | None = None, startup_kill_p: float = 0.0,
             mid_save_p: float = 0.5, max_delay_s: float = 0.6, env: dict | None = None,
             attempt_timeout_s: float = 300.0, verbose: bool = False) -> dict:
  """Run the soak into ``out`` (ref/, soak/, logs/); returns the counts (see module doc).

  Each kill follows a mode: "random" (a random delay after training made progress),
  "save" (the same, then the first moment an orbax temporary directory exists: a kill
  aimed at a save) or "startup" (a random time after the process starts, often during
  start-up or restore). ``plan`` gives the modes in order; otherwise they are drawn with
  ``startup_kill_p`` and ``mid_save_p``."""
  out = Path(out)
  env = env or soak_env()
  rng = random.Random(seed)
  plan = _kill_plan(kills, rng, plan, startup_kill_p, mid_save_p)
  ref_wd, wd, logs = out / "ref", out / "soak", out / "logs"
  for p in (ref_wd, wd):
    if p.exists():
      raise FileExistsError(f"{p} exists; pass an empty --out")
  logs.mkdir(parents=True, exist_ok=True)
  say = print if verbose else (lambda *a, **k: None)
  t0 = time.perf_counter()

  tfds_dir = out / "tfds"  # the planted data set, prepared once by the first soak attempt
  ref = _RefRun(train_cmd(ref_wd, steps, tfds_dir), env, logs / "ref.txt")
  counts = {"kills": 0, "kills_mid_save": 0, "starts": 0, "resumes": 0, "resume_steps": [],
            "plan": plan, "steps": steps, "seed": seed}
  # CPU seconds of reaped children: the attempts are reaped in _attempts, the reference in finish
  cpu = [_children_cpu_s()]
  _attempts(wd, train_cmd(wd, steps, tfds_dir), env, logs, counts, rng, ref, max_delay_s,
            attempt_timeout_s, say)
  cpu.append(_children_cpu_s())
  ref.finish(attempt_timeout_s)
  cpu.append(_children_cpu_s())
  counts["soak_cpu_s"], counts["ref_cpu_s"] = round(cpu[1] - cpu[0], 1), round(cpu[2] - cpu[1], 1)
  counts["cpu_ratio"] = round(counts["soak_cpu_s"] / counts["ref_cpu_s"], 2)
  counts["moved_aside_steps"], counts["moved_aside_tmp"] = _bad_entries(wd)
  counts.update(compare(ref_wd, wd, steps))
  counts["wall_s"] = round(time.perf_counter() - t0, 1)
  return counts


def _children_cpu_s() -> float:
  r = resource.getrusage(resource.RUSAGE_CHILDREN)
  return r.ru_utime + r.ru_stime


def compare(ref_wd: Path, wd: Path, steps: int) -> dict:
  """Bitwise comparison of two workdirs (see module doc); raises AssertionError on a difference."""
  import jax  # noqa: PLC0415 - keep the harness start-up light
  import numpy as np  # noqa: PLC0415

  from sbjax import checkpoint as ckpt  # noqa: PLC0415
  from sbjax.model import Model  # noqa: PLC0415
  from sbjax.optim import make_optimizer  # noqa: PLC0415
  from sbjax.train import read_metrics  # noqa: PLC0415

  from absl import logging as absl_logging  # noqa: PLC0415 - orbax's read-only notes

  absl_logging.set_verbosity(absl_logging.ERROR)
  left = _tmp_dirs(wd)
  assert not left, f"orbax temporary directories left in {wd}/checkpoints: {left}"
  cfg = ckpt.load_config(wd)
  assert cfg.to_dict() == ckpt.load_config(ref_wd).to_dict(), "the two runs' configs differ"
  ap = Model(cfg.model).abstract_params(cfg.train.seq_len)
  ao = jax.eval_shape(make_optimizer(cfg.train, cfg.model, ap).init, ap)
  ap, ao = ckpt.abstract_with_shardings(ap), ckpt.abstract_with_shardings(ao)
  s_ref, s_wd = ckpt.list_steps(ref_wd), ckpt.list_steps(wd)
  assert s_wd == s_ref, f"checkpointed steps differ: {s_wd} vs the reference {s_ref}"
  assert s_wd[-1] == steps, f"the run did not reach step {steps}: {s_wd}"
  for s in s_wd:
    got = ckpt.restore(wd, s, ap, ao)  # raises if orbax cannot restore it
    want = ckpt.restore(ref_wd, s, ap, ao)
    assert got[2] == want[2], f"step {s}: meta {got[2]} != reference {want[2]}"
    for name, a, b in (("params", got[0], want[0]), ("opt", got[1], want[1])):
      for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)):
        assert np.array_equal(np.asarray(x), np.asarray(y)), \
            f"step {s}: {name}{jax.tree_util.keystr(path)} differs from the reference"
  la = [(r["step"], r["loss"]) for r in read_metrics(wd) if "loss" in r]
  lb = [(r["step"], r["loss"]) for r in read_metrics(ref_wd) if "loss" in r]
  assert [s for s, _ in la] == list(range(steps)), f"logged steps {[s for s, _ in la]}"
  assert la == lb, "the metrics.jsonl loss sequence differs from the reference"
  ea = [(r["step"], r["eval_loss"]) for r in read_metrics(wd) if "eval_loss" in r]
  eb = [(r["step"], r["eval_loss"]) for r in read_metrics(ref_wd) if "eval_loss" in r]
  assert ea == eb, f"eval losses differ: {ea} vs {eb}"
  return {"bitwise_equal": True, "checkpoints_restored": len(s_wd), "losses_compared": len(la)}


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--kills", type=int, default=12)
  ap.add_argument("--steps", type=int, default=40)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--startup_kill_p", type=float, default=0.2,
                  help="probability that an attempt is killed during start-up / restore")
  ap.add_argument("--mid_save_p", type=float, default=0.4,
                  help="probability that a kill is aimed at a checkpoint save")
  ap.add_argument("--max_delay_s", type=float, default=0.6)
  ap.add_argument("--out", default=None, help="an empty directory (default: a new temp dir)")
  ap.add_argument("--write_docs", action="store_true", help="replace this benchmark's table "
                  "in docs/benchmarks.md")
  a = ap.parse_args()
  out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="sbjax_soak_"))
  counts = run_soak(out, kills=a.kills, steps=a.steps, seed=a.seed,
                    startup_kill_p=a.startup_kill_p, mid_save_p=a.mid_save_p,
                    max_delay_s=a.max_delay_s,
                    env=soak_env(str(out / "jax_cache")), verbose=True)
  print(json.dumps(counts))
  if a.write_docs:
    from _bench import table, write_docs  # noqa: PLC0415

    cols = ["steps", "kills", "kills_mid_save", "resumes", "bitwise_equal",
            "checkpoints_restored", "moved_aside_tmp", "soak_cpu_s", "ref_cpu_s", "cpu_ratio",
            "wall_s"]
    write_docs("soak", "Kill -9 soak", "A checkpoint after every step; cpu_ratio: the CPU "
               "seconds of all the killed and resumed attempts over the uninterrupted reference "
               "run's (same run).\n\n" + table(cols, [counts]))


if __name__ == "__main__":
  main()
