r"""The head-rank sweep (Godey et al. 2024, E5) as groups for the experiment runner (the
head_rank, werror_loss and vocab_threshold experiments; mos_text takes its text trunk).

A sweep is a base Config (trunk, data, schedule) and :class:`Knobs`. Its groups, in training
order (``sweep``), each named ``<protocol>-<head>-lr<lr>[_<lr>...]``:

* ``full``: the dense head over the LR grid ``lrs``, one population (a member per lr);
* ``b``: from scratch with a rank-r ``lowrank`` head at every rank (and ``mos`` heads of
  ``n_mix`` components in ``mos_protocols``), one LR population each;
* ``a``: the best full run's trunk frozen (``train.init_from``, ``train.freeze_trunk``) and a
  new head trained for ``head_steps`` steps (checkpoints at step 0 and the end), one run per
  (rank, head lr); with ``head_population`` every rank and head lr is ONE population of
  ``padded_lowrank`` heads, pad = the largest rank (``a-lowrank-pad<R>``).

The best full run: the smallest validation loss (ties: the first lr). Its trunk is its last
step (``trunk="last"``) or its checkpointed eval step > 0 of the smallest validation loss
(``"best"``; ties: the earliest). In each (protocol, head, rank, n_mix) the run of the smallest
validation loss is flagged ``best`` = 1:  best(g) = argmin_{lr in grid} eval_loss(g, lr).

``head_rank.csv`` (``COLUMNS``): ``matched_rank`` is the sweep rank whose lowrank head has
the nearest parameter count, ``param_ratio`` = params / lowrank_params(matched_rank),
``n_params`` the whole model's, ``run`` the workdir under ``OUT/runs``; ``full_head.npy``: the
V x d head matrix of the best full run at the trunk's step.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from sbjax import checkpoint as ckpt
from sbjax import heads
from sbjax.config import Config, ModelConfig, TrainConfig
from sbjax.experiment import Group
from sbjax.paths import upath
from sbjax.train import read_metrics

BASE = "tiny"
# "tiny" sets a small planted language and its own lr; the text runs take a text source
TEXT_DATA = {"data.source": "text"}
COLUMNS = ("protocol", "head", "rank", "n_mix", "matched_rank", "lr", "steps", "params",
           "param_ratio", "n_params", "eval_loss", "eval_acc", "best", "run")
_MODEL, _TRAIN = ModelConfig(), TrainConfig()

# a text-corpus sweep's Config in dotted keys over BASE (the cpu preset's trunk and schedule)
CPU = {**TEXT_DATA, "data.options.vocab_size": 1024, "name": "head_rank-cpu",
       "model.vocab_size": 0, "model.d_model": 64, "model.n_layers": 2, "model.n_heads": 4,
       "model.max_len": 64, "model.rotary_pct": _MODEL.rotary_pct, "model.remat": _MODEL.remat,
       "train.steps": 400, "train.batch_size": 32, "train.seq_len": 64, "train.lr": _TRAIN.lr,
       "train.warmup_steps": 30, "train.eval_batches": 24, "train.ckpt_log_spaced": False}
# the test and quick presets' trunk
TINY = {"data.options.vocab_size": 96, "model.d_model": 4, "model.n_layers": 1,
        "model.n_heads": 1, "model.max_len": 16, "model.rotary_pct": 0.5, "train.batch_size": 8,
        "train.seq_len": 16, "train.warmup_steps": 2}


def overrides(o: dict) -> dict:
  """CPU with ``o`` over it, evaluated and checkpointed once, at the last step, with ten log
  lines."""
  o = {**CPU, **o}
  steps = o["train.steps"]
  return {**o, "train.eval_every": steps, "train.ckpt_every": steps,
          "train.log_every": max(1, steps // 10)}


@dataclasses.dataclass(frozen=True)
class Knobs:
  ranks: tuple = ()  # () = rank_grid(d_model)
  lrs: tuple = (1e-3, 3e-3)  # LR grid of protocols full and b
  head_lrs: tuple = (3e-3, 1e-2)  # LR grid of protocol a
  head_steps: int = 0  # steps of protocol a; 0 = train.steps
  protocols: tuple = ("a", "b")  # besides "full", which always runs
  mos_mix: tuple = ()  # n_mix of the mos heads
  mos_protocols: tuple = ("b",)
  mos_lrs: tuple = ()  # () = the protocol's own grid
  head_population: bool = False  # protocol a's lowrank heads as one padded population
  trunk: str = "last"  # protocol a's trunk: the best full run's "last" step or "best" eval


def rank_grid(d: int) -> tuple[int, ...]:
  """{1, 2, 4, ..., d}: powers of two below d, then d itself."""
  return tuple(2 ** i for i in range(max(d - 1, 0).bit_length()) if 2 ** i < d) + (d,)


def ranks(k: Knobs, d: int) -> tuple[int, ...]:
  out = tuple(sorted({int(r) for r in (k.ranks or rank_grid(d))}))
  if not 1 <= out[0] <= out[-1] <= d:
    raise ValueError(f"head-rank sweep: ranks {out} must lie in 1 .. d_model={d}")
  return out


def head_model(mc: ModelConfig, head: str, rank: int, n_mix: int, pad: int = 0) -> ModelConfig:
  """``mc`` with the run's head: its kind's own ``rank`` / ``n_mix``, its other fields from
  ``mc``'s head when that is of the same kind; ``pad`` > 0: a ``padded_lowrank`` head."""
  fields = {f.name for f in dataclasses.fields(heads.get(head).config)}
  own = {k: v for k, v in (("rank", rank), ("n_mix", n_mix)) if k in fields}
  h = heads.head_config(mc.head if mc.head.kind == head else head, **own)
  if pad:
    h = heads.head_config("padded_lowrank", rank=rank, pad=pad, init=h.init)
  return dataclasses.replace(mc, head=h)


class Trunk(NamedTuple):
  """Protocol a's trunk: the best full run's workdir, its step (-1: the newest) and the
  validation loss there (NaN when not evaluated at it)."""

  dir: object
  step: int
  eval_loss: float


def trunk(ctx, prefix: str = "", how: str = "last") -> Trunk:
  """The trunk of the best full run among the groups named ``prefix...`` (module doc)."""
  g = next(g for n, g in ctx.groups.items()
           if n.startswith(prefix) and g.labels[0]["protocol"] == "full")
  loss = [float(r["eval_loss"]) for r in ctx.results[g.name]]
  finite = [j for j, x in enumerate(loss) if math.isfinite(x)]
  if not finite:
    raise ValueError(f"head-rank sweep: every run of {g.name} ended with a non-finite "
                     "validation loss; lower its learning rates (lrs)")
  d = ctx.workdirs(g)[min(finite, key=lambda j: loss[j])]
  evals = {int(r["step"]): float(r["eval_loss"]) for r in read_metrics(d) if "eval_loss" in r}
  steps = ckpt.list_steps(d)
  if how == "last":
    return Trunk(d, -1, evals.get(steps[-1], math.nan))
  have = [s for s in steps if s > 0 and math.isfinite(evals.get(s, math.nan))]
  if not have:
    raise ValueError(f"head-rank sweep: trunk='best' but {d} has no checkpoint at an eval step; "
                     "set train.ckpt_every to a multiple of train.eval_every")
  step = min(have, key=lambda s: (evals[s], s))
  return Trunk(d, step, evals[step])


def _config(base: Config, k: Knobs, p: str, head: str, r: int, m: int, lr: float,
            t: Trunk | None = None, pad: int = 0) -> Config:
  tc = dataclasses.replace(base.train, lr=lr)
  if p == "a":
    steps = k.head_steps or tc.steps
    tc = dataclasses.replace(tc, steps=steps, freeze_trunk=True, init_from=str(t.dir),
                             init_step=t.step, eval_every=min(tc.eval_every, steps),
                             ckpt_every=steps,  # a head: step 0 and its end
                             warmup_steps=min(tc.warmup_steps, max(steps // 10, 1)))
  what = {"dense": "dense", "lowrank": f"r{r}", "mos": f"mos{m}"}[head]
  return base.replace(model=head_model(base.model, head, r, m, pad), train=tc,
                      name=f"{base.name}-{p}-{what}-lr{lr:g}")


def sweep(ctx, base: Config, k: Knobs, prefix: str = "", labels: dict | None = None,
          dataset=None):
  """The sweep's groups (module doc), named ``prefix + name``; protocol a's are built once the
  full group has trained (its results in ``ctx``). ``labels``: more columns for every member."""
  d, rs = base.model.d_model, ranks(k, base.model.d_model)

  def group(p, head, r, m, lrs, t=None, runs=None):
    runs = runs or [(r, lr) for lr in lrs]
    pad = max(x for x, _ in runs) if len(runs) > 1 and p == "a" else 0
    what = f"lowrank-pad{pad}" if pad else {"dense": "dense", "lowrank": f"r{r}",
                                            "mos": f"mos{m}"}[head]
    name = f"{p}-{what}" + ("" if pad else "-lr" + "_".join(f"{lr:g}" for lr in lrs))
    return Group(prefix + name, [_config(base, k, p, head, x, m, lr, t, pad) for x, lr in runs],
                 [{**(labels or {}), "protocol": p, "head": head, "rank": x, "n_mix": m,
                   "lr": lr} for x, lr in runs], dataset)

  yield group("full", "dense", d, 0, k.lrs)
  mos_lrs = {p: k.mos_lrs or (k.head_lrs if p == "a" else k.lrs) for p in ("a", "b")}
  if "b" in k.protocols:
    yield from (group("b", "lowrank", r, 0, k.lrs) for r in rs)
  if "b" in k.mos_protocols:
    yield from (group("b", "mos", d, m, mos_lrs["b"]) for m in k.mos_mix)
  if "a" not in k.protocols and not ("a" in k.mos_protocols and k.mos_mix):
    return
  t = trunk(ctx, prefix, k.trunk)
  if "a" in k.protocols and k.head_population:
    yield group("a", "lowrank", 0, 0, k.head_lrs, t, [(r, lr) for r in rs for lr in k.head_lrs])
  elif "a" in k.protocols:
    yield from (group("a", "lowrank", r, 0, [lr], t) for r in rs for lr in k.head_lrs)
  if "a" in k.mos_protocols:
    yield from (group("a", "mos", d, m, [lr], t) for m in k.mos_mix for lr in mos_lrs["a"])


def mark_best(rows: list[dict]) -> list[dict]:
  """``best`` = 1 on the smallest-eval_loss row of each (protocol, head, rank, n_mix)."""
  groups: dict[tuple, list[int]] = {}
  for i, r in enumerate(rows):
    groups.setdefault((r["protocol"], r["head"], int(r["rank"]), int(r["n_mix"])), []).append(i)
  for idx in groups.values():
    finite = [i for i in idx if math.isfinite(float(rows[i]["eval_loss"]))]
    win = min(finite, key=lambda i: float(rows[i]["eval_loss"])) if finite else None
    for i in idx:
      rows[i]["best"] = int(i == win)
  return rows


def best_rows(rows, protocol: str, head: str = "lowrank") -> list[dict]:
  """The best-LR rows of one protocol and head kind, by rank and n_mix."""
  sel = [r for r in rows if r["protocol"] == protocol and r["head"] == head and int(r["best"])]
  return sorted(sel, key=lambda r: (int(r["rank"]), int(r["n_mix"])))


def matched_rank(mc: ModelConfig, params: int, rs) -> tuple[int, float]:
  """(the rank in ``rs`` whose lowrank head count is nearest ``params``, params / its count)."""
  count = {r: heads.head_param_count(head_model(mc, "lowrank", r, 0)) for r in rs}
  mr = min(rs, key=lambda r: (abs(count[r] - params), r))
  return mr, params / count[mr]


def table(ctx, base: Config, k: Knobs, vocab: int, prefix: str = "") -> list[dict]:
  """The rows of ``head_rank.csv`` for the sweep's groups trained so far (module doc)."""
  mc, out = dataclasses.replace(base.model, vocab_size=vocab), []
  rs = ranks(k, mc.d_model)
  for name in (n for n in ctx.results if n.startswith(prefix)):
    g = ctx.groups[name]
    for r in ctx.results[name]:
      j, lab = r["member"], g.labels[r["member"]]
      hm = head_model(mc, lab["head"], lab["rank"], lab["n_mix"])
      params = heads.head_param_count(hm)
      mr, ratio = ((lab["rank"], 1.0) if lab["head"] == "lowrank"  # a rank-r head: itself
                   else matched_rank(hm, params, rs))
      out.append({**{c: lab[c] for c in COLUMNS[:4]}, "matched_rank": mr, "lr": lab["lr"],
                  "steps": g.configs[j].train.steps, "params": params,
                  "param_ratio": round(ratio, 6), "n_params": r["n_params"],
                  "eval_loss": float(r["eval_loss"]), "eval_acc": float(r["eval_acc"]),
                  "best": 0,
                  "run": name[len(prefix):] + (f"/member_{j}" if len(g.configs) > 1 else "")})
  return mark_best(out)


def full_head(ctx, path, prefix: str = "", how: str = "last") -> tuple[np.ndarray, Trunk]:
  """Write ``path`` (``full_head.npy``): the V x d head matrix of the best full run at the
  trunk's step; returns it and the trunk."""
  t = trunk(ctx, prefix, how)
  cfg, params, _ = ckpt.load_params(t.dir, None if t.step < 0 else t.step)
  w = np.asarray(heads.head_matrix(params, cfg.model), np.float32)
  upath(path).parent.mkdir(parents=True, exist_ok=True)
  with upath(path).open("wb") as f:  # local or gs://
    np.save(f, w, allow_pickle=False)
  return w, t
