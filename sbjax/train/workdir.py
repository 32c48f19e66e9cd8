"""A run's directory: config.json (checked at resume), metrics.jsonl (appended, repaired,
read back deduplicated), and the settings a run takes from its data or another run."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import jax
import numpy as np

from sbjax import checkpoint as ckpt
from sbjax import heads
from sbjax.atomic import atomic_write_text, is_local
from sbjax.config import Config
from sbjax.paths import upath

log = logging.getLogger("sbjax")

METRICS = "metrics.jsonl"

# Keys (or sections) that may differ between a workdir's saved config and a resuming command.
RESUME_MUTABLE = {"name", "mesh", "model.loss_chunk", "model.attn_impl"} | {
    f"train.{k}" for k in ("steps", "lr", "warmup_steps", "min_lr_ratio", "b1", "b2", "eps",
                           "weight_decay", "clip", "eval_every", "eval_batches", "log_every",
                           "async_checkpoint", "skip_nonfinite_steps", "keep_every_n")}


class NonFiniteLossError(RuntimeError):
  pass


class ConfigMismatchError(ValueError):
  pass


def leaves(d: dict, prefix: str = "") -> dict:
  """{dotted key: value} of a nested dict (a config's sections, the typed head's fields)."""
  out = {}
  for k, v in d.items():
    out.update(leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
  return out


def config_diff(saved: dict, new: dict, mutable=RESUME_MUTABLE) -> tuple[list[str], list[str]]:
  """(refused, allowed) lines ``key: saved -> new`` between two config dicts; a key is allowed
  when it or its section is in ``mutable``."""
  a, b = leaves(saved), leaves(new)
  refused, allowed = [], []
  for k in sorted(set(a) | set(b)):
    if a.get(k) != b.get(k):
      ok = k in mutable or k.split(".")[0] in mutable
      (allowed if ok else refused).append(f"{k}: {a.get(k)!r} -> {b.get(k)!r}")
  return refused, allowed


def check_workdir_config(workdir: Path, cfg: Config) -> None:
  if not (upath(workdir) / "config.json").exists():
    return
  saved = ckpt.read_config_dict(workdir)  # errors name the file
  try:  # a field added to sbjax after the run started takes its default, so it is no difference
    saved = Config.from_dict(saved).to_dict()
  except (TypeError, ValueError, KeyError):
    pass  # compare the raw dicts: the diff names what differs
  refused, allowed = config_diff(saved, cfg.to_dict())
  if refused:
    raise ConfigMismatchError(
        f"{workdir} holds a run with a different configuration; refusing to resume. "
        "Differences:\n  " + "\n  ".join(refused) + "\nUse a new --workdir, or the saved config.")
  for line in allowed:
    log.warning("resuming with a changed setting: %s", line)


def prepare_workdir(workdir: Path, cfg: Config, is_main: bool) -> None:
  """Create ``workdir``, refuse another run's config, write config.json (process 0)."""
  workdir = upath(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  check_workdir_config(workdir, cfg)
  if is_main and not (workdir / "config.json").exists():
    atomic_write_text(workdir / "config.json", json.dumps(cfg.to_dict(), indent=2))


def check_not_past(workdir, step: int, steps: int) -> None:
  """Refuse to resume ``workdir`` at ``step`` > ``train.steps``: its parameters are not
  those of a ``steps``-step run, and its summary would report the wrong step."""
  if step > steps:
    raise ValueError(f"the workdir {workdir} is already at step {step}, past train.steps={steps}; "
                     f"to continue it pass train.steps >= {step}, for a {steps}-step "
                     "run use a new --workdir (an earlier step of this run: "
                     "sbjax.checkpoint.load_params(workdir, step))")


def clean_for_resume(workdir: Path, prefix: str = "") -> list[str]:
  """Move aside unfinished orbax saves and cut a partial last metrics line (process 0)."""
  moved = ckpt.cleanup_tmp(workdir)
  for name in moved:
    log.warning("moved aside an unfinished checkpoint save: %s%s", prefix, name)
  repair_jsonl(upath(workdir) / METRICS)
  return moved


def append_jsonl(path, rec: dict) -> None:
  """Append one JSON line; on remote storage (no append on an object store) the object is
  rewritten whole, so a reader sees the old or the new log, never half a line."""
  line = json.dumps(rec) + "\n"
  if is_local(path):
    with open(path, "a") as f:
      f.write(line)
    return
  path = upath(path)
  old = path.read_bytes() if path.exists() else b""
  path.write_bytes(old + line.encode())


def repair_jsonl(path: Path) -> int:
  """Cut a partial last line (a write killed mid-line) off a JSONL log so that appended
  records start on a fresh line; returns the number of bytes removed (logged)."""
  path = upath(path)
  if not path.is_file():
    return 0
  data = path.read_bytes()
  if not data or data.endswith(b"\n"):
    return 0
  keep = data.rfind(b"\n") + 1
  if is_local(path):
    with open(path, "r+b") as f:
      f.truncate(keep)
  else:
    path.write_bytes(data[:keep])
  log.warning("%s ended in a partial line (%d bytes, from an interrupted write); removed it",
              path, len(data) - keep)
  return len(data) - keep


def read_metrics(workdir) -> list[dict]:
  """metrics.jsonl records, deduplicated by step (a resumed run's later record wins).
  Lines that are not valid JSON (a write cut off by a kill) are skipped with a warning."""
  path = upath(workdir) / METRICS
  if not path.exists():
    return []
  by_step: dict[int, dict] = {}
  for n, line in enumerate(path.read_bytes().decode(errors="replace").splitlines(), 1):
    if line.strip():
      try:
        rec = json.loads(line)
        step = int(rec["step"])
      except (ValueError, KeyError, TypeError):
        log.warning("%s line %d is not a metrics record (interrupted write?); skipped", path, n)
        continue
      by_step.setdefault(step, {}).update(rec)
  return [by_step[s] for s in sorted(by_step)]


def summary_from_metrics(workdir, summary: dict) -> dict:
  """Add the last logged train loss and eval record of ``workdir`` to ``summary``."""
  recs = read_metrics(workdir)
  losses = [r["loss"] for r in recs if "loss" in r]
  if losses:
    summary["loss"] = losses[-1]
  evals = [r for r in recs if "eval_loss" in r]
  if evals:
    summary["eval_loss"] = evals[-1]["eval_loss"]
    summary["eval_acc"] = evals[-1]["eval_acc"]
  return summary


def resolve_vocab(cfg: Config, data_vocab: int) -> Config:
  """Fill model.vocab_size from the data when it is 0; refuse a mismatch."""
  mc = cfg.model
  if mc.vocab_size == 0:
    return cfg.replace(model=dataclasses.replace(mc, vocab_size=data_vocab))
  if mc.vocab_size < data_vocab:
    raise ValueError(f"model.vocab_size={mc.vocab_size} is smaller than the data's vocabulary "
                     f"({data_vocab} tokens); set model.vocab_size={data_vocab} or 0")
  if mc.vocab_size > data_vocab:
    log.warning("model.vocab_size=%d is larger than the data's vocabulary (%d tokens); the "
                "extra rows are padding (as Pythia's 50304 for a 50277-piece tokenizer)",
                mc.vocab_size, data_vocab)
  return cfg


def init_trunk_from(cfg: Config, params, mesh_shardings, members: int = 0):
  """Frozen-trunk mode: copy every non-head parameter from train.init_from. ``members`` > 0:
  ``params`` have a leading member axis of that size, and every member gets the same trunk."""
  src_cfg, src, src_step = ckpt.load_params(
      cfg.train.init_from, None if cfg.train.init_step < 0 else cfg.train.init_step)
  # the head's own keys (and any head parameters of the source run) are not trunk
  skip = set(heads.get(cfg.model.head).param_keys) | {heads.HEAD_KEY}
  out = dict(params)
  for k, v in src.items():
    if k in skip:
      continue
    if k not in out:
      raise ValueError(f"train.init_from={cfg.train.init_from}: parameter {k!r} is not in this model")
    want = jax.tree.map(lambda x: x.shape[1:] if members else x.shape, out[k])
    if jax.tree.map(lambda x: x.shape, v) != want:
      raise ValueError(f"train.init_from={cfg.train.init_from}: parameter {k!r} has another shape; "
                       "the trunk config must match the source run's model")
    out[k] = jax.tree.map(lambda x: np.broadcast_to(x, (members,) + x.shape), v) if members else v
  log.info("initialised the trunk from %s step %d", cfg.train.init_from, src_step)
  return jax.device_put(out, mesh_shardings)
