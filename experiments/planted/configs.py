"""The planted experiment's Configs: part 1 (rank-r lowrank heads on the planted language) and
part 2 (mos and parameter-matched lowrank heads on the planted mixture)."""

from __future__ import annotations

import dataclasses

from sbjax import heads
from sbjax.experiment import Preset
from sbjax.heads import head_param_count
from sbjax.overrides import config_from

from ..common import matched_rank


def knee_configs(p: Preset) -> list:
  """(rank, Config) of part 1, validated."""
  return [(int(r), config_from(p.base, {**p.overrides, "model.head": "lowrank",
                                        "model.head.rank": int(r), "name": f"planted-r{r}"}))
          for r in p.knobs.ranks]


def _n_heads(d_model: int, want: int) -> int:
  """The largest head count <= want that divides d_model with an even rotary width."""
  for h in range(min(want, d_model), 0, -1):
    if d_model % h == 0 and int(d_model // h * 0.25) % 2 == 0:
      return h
  return 1


def mix_overrides(p: Preset) -> dict:
  """Part 2's overrides: part 1's with ``Knobs.mix`` over them, evaluation and the checkpoint
  at its last step, ten log lines per run."""
  o = {**p.overrides, **p.knobs.mix}
  steps = o["train.steps"]
  return {**o, "train.eval_every": steps, "train.ckpt_every": steps,
          "train.log_every": max(1, steps // 10)}


def run_label(arm: str, seed: int, lr: float | None = None) -> str:
  """The label of run (arm, lr, seed) of part 2: ``arm`` (``arm-lr<lr>`` when the preset has
  an lr grid), then ``-s<seed>`` for a seed other than 0."""
  label = arm if lr is None else f"{arm}-lr{float(lr):g}"
  return label if int(seed) == 0 else f"{label}-s{int(seed)}"


def arm_of(cfg) -> str:
  """The arm of a part-2 Config (its ``name`` is ``planted-mix-<arm>``)."""
  return cfg.name.removeprefix("planted-mix-")


def mix_lrs(p: Preset) -> tuple:
  """The learning rates of part 2 (``mix_lrs``, or train.lr alone)."""
  return tuple(float(x) for x in p.knobs.mix_lrs) or (float(p.overrides["train.lr"]),)


OBJECTIVE_TAG = {"sampled": "sampled", "expected": "rb"}  # arm names: rb = Rao-Blackwellised


def mix_cells(p: Preset) -> list:
  """Part 2's cells [(lang, objective, dotted overrides over ``mix_overrides``)]: every
  language of ``mix_langs`` with every objective of ``mix_objectives``; one cell (None, None,
  {}) when the preset has none (its arms keep their plain labels)."""
  if not p.knobs.mix_langs:
    return [(None, None, {})]
  return [(str(lang), str(obj), {**dict(o), "train.objective": str(obj)})
          for lang, o in p.knobs.mix_langs for obj in p.knobs.mix_objectives]


def cell_of(p: Preset) -> dict:
  """{arm: (lang, objective, run label)} of every arm of part 2 (``mix_cells`` x ``mix_runs``)."""
  return {cell_arm(lang, obj, run[0]): (lang, obj, run[0])
          for lang, obj, _ in mix_cells(p) for run in p.knobs.mix_runs}


def cell_arm(lang, objective, label: str) -> str:
  """The arm name of run ``label`` in cell (lang, objective): ``lang-<sampled|rb>-label``, or
  ``label`` for the plain cell."""
  return label if lang is None else f"{lang}-{OBJECTIVE_TAG[objective]}-{label}"


def mix_configs(p: Preset) -> list:
  """(label, Config) of part 2 for every cell, run of ``mix_runs``, lr and seed of
  ``mix_seeds`` (the seed is ``train.seed``, the init; a cell's runs share its data stream)."""
  lrs = mix_lrs(p)
  grid = len(lrs) > 1
  return [(run_label(label, s, lr if grid else None),
           dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seed=int(s), lr=lr)))
          for lang, obj, o in mix_cells(p)
          for label, cfg in _mix_arms(p, o, lang, obj)
          for lr in lrs for s in p.knobs.mix_seeds]


def _mix_arms(p: Preset, cell: dict, lang, objective) -> list:
  """(label, Config) of part 2 at seed 0 in one cell; a run with n_mix 0 gets the rank whose
  head parameter count matches the first mos run's."""
  out, mos_params = [], None
  base = {**mix_overrides(p), **cell}
  for run, head, d_model, n in p.knobs.mix_runs:
    label = cell_arm(lang, objective, run)
    o = {**base, "model.head": head, "model.d_model": int(d_model),
         "model.n_heads": _n_heads(int(d_model), p.overrides["model.n_heads"]),
         "name": f"planted-mix-{label}"}
    if head == "mos":
      o.update({"model.head.n_mix": int(n), **p.knobs.mos})
    else:
      if n == 0:
        if mos_params is None:
          raise ValueError(f"planted preset: a matched {head} run needs a mos run before it")
        n = matched_rank(config_from(p.base, {**o, "model.head.rank": 1}), mos_params)
      o["model.head.rank"] = int(n)
    cfg = config_from(p.base, o)
    if head == "mos" and mos_params is None:
      mos_params = head_param_count(cfg.model)
    out.append((label, cfg))
  return out


def fresh_runs(p: Preset, runs: list, lr: float) -> list:
  """(label, Config) of one arm's fresh runs: its run at ``lr`` among ``runs`` at each seed of
  ``fresh_seeds``."""
  cfg = next(c for _, c in runs if c.train.lr == lr)
  grid = len(mix_lrs(p)) > 1
  return [(run_label(arm_of(cfg), s, lr if grid else None),
           dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seed=int(s))))
          for s in p.knobs.fresh_seeds]


def has_rank(cfg) -> bool:
  """A head with an explicit rank (a ``rank`` field): its exact low-rank floor applies."""
  return heads.get(cfg.model.head).rank_limited and hasattr(cfg.model.head, "rank")


def mix_groups(mconfs) -> list:
  """Part 2's trainings: [(arm, [(label, Config)])], one population per arm."""
  groups: dict = {}
  for label, cfg in mconfs:
    groups.setdefault(arm_of(cfg), []).append((label, cfg))
  return list(groups.items())


def validate(p) -> None:
  """Builds every config of a preset (a head rank out of 1..d among them: the config's own
  refusal) without running; fresh seeds must be new."""
  knee_configs(p)
  mix_configs(p)
  if set(p.knobs.fresh_seeds) & set(p.knobs.mix_seeds):
    raise ValueError(f"planted preset: fresh_seeds {p.knobs.fresh_seeds} must not repeat the "
                     f"selection seeds mix_seeds {p.knobs.mix_seeds}")


def settings(p: Preset) -> dict:
  """The preset as one flat record for planted_meta.json: part 1's Config fields (its first
  run's) and the knobs."""
  c = knee_configs(p)[0][1]
  m, d, t = c.model, c.data, c.train
  return {"base": p.base, "vocab": m.vocab_size, "k": d.options.rank, "alpha": d.options.alpha,
          "d_model": m.d_model, "n_layers": m.n_layers, "n_heads": m.n_heads,
          "steps": t.steps, "batch": t.batch_size, "seq_len": t.seq_len, "lr": t.lr,
          "warmup": t.warmup_steps, "train_tokens": d.options.train_tokens,
          "val_tokens": d.options.val_tokens, **dataclasses.asdict(p.knobs)}
