r"""Linguistic collapse (Wu & Papyan 2024): neural-collapse metrics against validation loss.

  python -m experiments.collapse --preset=cpu --out=out/collapse [--data=DIR_OF_TXT]
  python -m experiments.collapse --preset=tpu --data=TRAIN.bin[,VAL.bin] --out=out/collapse

A grid of GPT-Neo-like models (``sbjax.configs.neo``; a group per shape L x d, its members the
weight decays) and seed-only groups (one shape each, members the seeds), trained on the first
``epoch_tokens`` tokens at a constant lr after warm-up, checkpointed after each of
``Knobs.epochs``; each snapshot measured by the collapse pass (``stream.py``) at every
``min_count``; with ``Knobs.ceiling``, a planted language's ceiling (``ceiling.py``).

Outputs (``tables.py``): ``collapse_models.csv``, ``collapse_r2.csv`` (per metric and points,
last: one point per run, all: every snapshot), ``collapse_seeds.csv``,
``collapse_ceiling*.csv``, ``summary.json`` (Γ = λ·Σ lr, verdicts, the decision of
``Knobs.rule``) and two figures.
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from sbjax import overrides
from sbjax.config import Config
from sbjax.data import tokens as tok_lib
from sbjax.data.dataset import Dataset
from sbjax.data.planted import PlantedLanguage
from sbjax.experiment import Experiment, Group
from sbjax.model import Model
from sbjax.optim import lr_schedule
from sbjax.studies.corpus import corpus_overrides

from ..common import write_json, write_rows
from . import tables as T
from .ceiling import ceiling_rows, true_nll
from .presets import PRESETS
from .report import figures, report
from .stream import collapse_pass, stack, windows

SETTINGS = {"cdnv_exponent": 2.0, "weighted_mean": False, "nc4_search": "analyzed",
            "norm_variant": "norm", "angle_variant": "cos", "gnc2_centered": True,
            "variance": "two_pass", "ddof": 1}
PASS = {k: SETTINGS[k] for k in ("cdnv_exponent", "weighted_mean", "nc4_search")}


def is_token_files(data) -> bool:
  """``--data=TRAIN[,VAL]`` names token files (.bin / .npy) rather than a text directory."""
  return bool(data) and Path(str(data).split(",")[0]).suffix in (".bin", ".npy")


def token_file_corpus(data, vocab: int) -> tuple[np.ndarray, np.ndarray]:
  """(train, val) token streams of ``--data=TRAIN[,VAL]`` (a flat .bin that names its dtype,
  e.g. ``train.uint16.bin``, or an integer .npy, rows concatenated); without VAL, the last
  tenth of TRAIN."""
  if not is_token_files(data):
    raise ValueError(f"--data={data!r}: this preset trains on token files; pass --data=TRAIN.bin"
                     f"[,VAL.bin] (flat uint16 ids, or an integer .npy) of ids in [0, {vocab}), "
                     "e.g. TinyStories through the GPT-Neo tokenizer; nothing is downloaded")
  paths = str(data).split(",")
  arrs = [tok_lib.read_tokens(q).reshape(-1) for q in paths[:2]]
  for q, a in zip(paths, arrs):
    tok_lib.check_ids(a, vocab, f"token file {q}: ", "data.options.vocab_size of the preset")
  if len(arrs) == 2:
    return arrs[0], arrs[1]
  n = len(arrs[0]) - len(arrs[0]) // 10
  return arrs[0][:n], arrs[0][n:]


def corpus(ctx) -> dict:
  """{tr, va, vocab, tokenizer, data}: the preset's token streams cut to its budgets, the
  tokenizer (None: token files) and the data section of the run configs."""
  o, k = ctx.preset.overrides, ctx.knobs
  if o["data.source"] == "tokens" or is_token_files(ctx.data):
    vocab, paths = o["data.options.vocab_size"], str(ctx.data).split(",")
    (tr, va), tok = token_file_corpus(ctx.data, vocab), None
    data = {"data.source": "tokens", "data.options.path": paths[0],
            "data.options.val_path": ",".join(paths[1:2])}
  else:
    data = {**{key: o[key] for key in ("data.options.vocab_size", "data.options.name") if key in o},
            **corpus_overrides(o["data.source"], ctx.data)}
    ds = ctx.dataset(overrides.apply(Config(), {**data, "train.seq_len": o["train.seq_len"],
                                                "train.batch_size": o["train.batch_size"]}), 0)
    tr, va, vocab, tok = ds.train_tokens, ds.val_tokens, ds.vocab_size, ds.tokenizer_path
  tr = tr[:k.epoch_tokens + 1] if k.epoch_tokens else tr
  va = va[:k.val_tokens + 1] if k.val_tokens else va
  return {"tr": np.asarray(tr), "va": np.asarray(va), "vocab": int(vocab), "tokenizer": tok,
          "data": overrides.apply(Config(), data).data}


def _group(ctx, name, kind, arch, c, members, steps, every) -> Group:
  """The members (seed, data seed, λ) of one shape trained ``steps`` steps on ``c``'s streams,
  checkpointed every ``every`` steps."""
  p, (n_layers, d) = ctx.preset, arch
  o = {key: v for key, v in p.overrides.items() if not key.startswith("data.")}
  base = overrides.config_from(f"{p.base}-L{n_layers}-d{d}", o)
  mc = replace(base.model, vocab_size=c["vocab"],
               window_size=min(base.model.window_size, o["train.seq_len"]))
  tc = replace(base.train, steps=steps, ckpt_every=every, ckpt_log_spaced=False, eval_every=steps,
               warmup_steps=min(o["train.warmup_steps"], max(steps - 1, 0)),
               eval_batches=max(1, min(base.train.eval_batches, (len(c["va"]) - 1) // o[
                   "train.seq_len"] // o["train.batch_size"])))
  cfgs = [base.replace(name=f"collapse-{name}", model=mc, data=c["data"], train=replace(
      tc, seed=s, data_seed=ds, weight_decay=float(wd))) for s, ds, wd in members]
  sets = [Dataset(c["tr"], c["va"], seq_len=tc.seq_len, global_batch_size=tc.batch_size, seed=ds,
                  vocab_size=c["vocab"]) for _, ds, _ in members]
  labels = [{"kind": kind, "n_layers": n_layers, "d_model": d, "weight_decay": float(wd),
             "seed": s, "data_seed": ds, **c.get("labels", {})} for s, ds, wd in members]
  return Group(name, cfgs, labels, sets)


def plan(ctx):
  """The first seed group, the grid by shape, the other seed groups, the ceiling's run."""
  k, c = ctx.knobs, corpus(ctx)
  spe = max(1, (len(c["tr"]) - 1) // ctx.preset.overrides["train.seq_len"]
            // ctx.preset.overrides["train.batch_size"])
  last = spe * max(k.epochs)
  seeds = [(f"seeds-L{a}-d{b}", (a, b)) for a, b in (tuple(k.seed_arch), *k.extra_seed_archs)]
  seeds = [_group(ctx, n, "seeds", arch, c, [(s, s, k.seed_weight_decay) for s in range(k.seeds)],
                  last, last) for n, arch in seeds] if k.seeds else []
  every = spe * math.gcd(*k.epochs)
  grid = [_group(ctx, f"L{a}-d{b}", "grid", (a, b), c, [(0, 0, wd) for wd in k.weight_decays],
                 last, every) for b in k.widths for a in k.depths]
  yield from seeds[:1] + grid + seeds[1:]
  if k.ceiling and k.ceiling_steps:
    lang = PlantedLanguage(vocab=k.ceiling[0], rank=k.ceiling[1], seed=0)
    seq_len = ctx.preset.overrides["train.seq_len"]
    cc = {"tr": lang.sample(np.random.default_rng([k.ceiling[0], 1]), k.ceiling_tokens + 1),
          "va": lang.sample(np.random.default_rng([k.ceiling[0], 2]),
                            max(k.ceiling_tokens // 8, 4 * seq_len) + 1),
          "vocab": lang.vocab, "data": overrides.apply(Config(), {
              "data.options.vocab": k.ceiling[0], "data.options.rank": k.ceiling[1]}).data}
    cc["labels"] = {"val_true_nll": true_nll(lang, windows(cc["va"], seq_len))}
    yield _group(ctx, "ceiling-L{}-d{}".format(*k.ceiling_arch), "ceiling", k.ceiling_arch, cc,
                 [(0, 0, wd) for wd in k.weight_decays], max(k.ceiling_steps),
                 math.gcd(*k.ceiling_steps))


def snapshots(ctx, group: Group, j: int) -> dict:
  """{step: epoch} of the checkpoints measured (the ceiling's: {step: step})."""
  kind, steps, k = group.labels[j]["kind"], group.configs[j].train.steps, ctx.knobs
  if kind == "ceiling":
    return {s: s for s in k.ceiling_steps}
  epochs = (max(k.epochs),) if kind == "seeds" else k.epochs
  return {steps // max(k.epochs) * e: e for e in epochs}


def measure(ctx, group: Group, j: int, steps: list, params: list) -> list[dict]:
  """The collapse pass of member j's snapshot checkpoints, stacked (one row per step; {} for
  a checkpoint that is no snapshot)."""
  at = [i for i, s in enumerate(steps) if s in snapshots(ctx, group, j)]
  rows = [{} for _ in steps]
  if not at:
    return rows
  ds = group.dataset[j]
  trw, vaw = windows(ds.train_tokens, ds.seq_len), windows(ds.val_tokens, ds.seq_len)
  mcs = (1,) if group.labels[j]["kind"] == "ceiling" else tuple(ctx.knobs.min_counts)
  res = collapse_pass(group.configs[j].model, stack([params[i] for i in at]), trw, vaw,
                      chunk=ctx.knobs.chunk, min_counts=mcs, **PASS)
  for i, per in zip(at, res):
    rows[i] = {key: per[mcs[0]][key] for key in ("val_loss", "val_tokens", "train_tokens")}
    for m, r in per.items():
      rows[i].update({f"{key}@{m}": np.asarray(r.get(key, math.nan)).item() for key in
                      T.METRICS + T.COUNT_KEYS} | {f"error@{m}": r["error"]})
  return rows


def _run(group: Group, j: int) -> str:
  lab = group.labels[j]
  return f"{group.name}-wd{lab['weight_decay']:g}-s{lab['seed']}"


def _measured(ctx, points: list[dict], ceiling: bool):
  """(row, group, member, {step: epoch}) of the measured snapshots, in plan order."""
  order = list(ctx.groups)
  for r in sorted(points, key=lambda r: (order.index(r["group"]), r["step"], r["member"])):
    g, j = ctx.groups[r["group"]], int(r["member"])
    snaps = snapshots(ctx, g, j)
    if (r["kind"] == "ceiling") == ceiling and r["step"] in snaps:
      yield r, g, j, snaps


def model_rows(ctx, points: list[dict]) -> list[dict]:
  """collapse_models.csv: a row per measured snapshot (``ctx.measured``) and min_count."""
  rows = []
  for r, g, j, snaps in _measured(ctx, points, False):
    e, mc, tc = snaps[r["step"]], g.configs[j].model, g.configs[j].train
    rows += [{"model": f"{_run(g, j)}-e{e}", "run": _run(g, j), "group": g.name,
              "kind": r["kind"], "n_layers": mc.n_layers, "d_model": mc.d_model,
              "n_heads": mc.n_heads, "vocab_size": mc.vocab_size,
              "n_params": Model(mc).param_count(), "weight_decay": tc.weight_decay,
              "seed": tc.seed, "data_seed": tc.data_seed, "epochs": e,
              "last_snapshot": int(e == max(ctx.knobs.epochs)), "min_count": m,
              "steps": r["step"], "train_tokens_seen": r["step"] * tc.batch_size * tc.seq_len,
              **{key: r[key] for key in ("val_loss", "val_tokens", "train_tokens")},
              **{key: r[f"{key}@{m}"] for key in T.METRICS + T.COUNT_KEYS}, **SETTINGS,
              "error": r[f"error@{m}"]}
             for m in ctx.knobs.min_counts]
  return rows


def ceiling_trained(ctx, points: list[dict]) -> list[dict]:
  """collapse_ceiling_trained.csv: the ceiling run's snapshots, with the gap to the entropy."""
  return [{"step": r["step"], "run": _run(g, j), "n_layers": g.configs[j].model.n_layers,
           "d_model": g.configs[j].model.d_model, "weight_decay": r["weight_decay"],
           "val_loss": r["val_loss"], "val_true_nll": r["val_true_nll"],
           "gap": r["val_loss"] - r["val_true_nll"], **{k: r[f"{k}@1"] for k in T.METRICS},
           "n_classes": r["n_classes@1"], "error": r["error@1"]}
          for r, g, j, _ in sorted(_measured(ctx, points, True),
                                   key=lambda x: (x[0]["step"], x[0]["member"]))]


def write_tables(ctx) -> None:
  k, c = ctx.knobs, corpus(ctx)
  points = [r for rows in ctx.measured.values() for r in rows]
  models = model_rows(ctx, points)
  write_rows(ctx.out / "collapse_models.csv", models)
  r2 = T.r2_rows(models, k.min_counts)
  write_rows(ctx.out / "collapse_r2.csv", r2)
  seeds = T.seed_rows(models, k.min_counts, k.n_perm)
  if seeds:
    write_rows(ctx.out / "collapse_seeds.csv", seeds)
  if k.ceiling:
    write_rows(ctx.out / "collapse_ceiling.csv", ctx.memo("ceiling", k.ceiling,
                                                          lambda: ceiling_rows(*k.ceiling)))
    if k.ceiling_steps:
      write_rows(ctx.out / "collapse_ceiling_trained.csv", ceiling_trained(ctx, points))
  write_json(ctx.out / "summary.json", {
      "vocab_size": c["vocab"], "train_tokens": len(c["tr"]) - 1, "val_tokens": len(c["va"]) - 1,
      "tokenizer": c["tokenizer"], "settings": SETTINGS, "min_counts": list(k.min_counts),
      "n_permutations": k.n_perm, "weight_decay": gamma(ctx),
      "anchors": {f"{r['metric']}@{r['min_count']}": r["ci_verdict"] for r in r2
                  if r["points"] == "last" and r["metric"] in T.ANCHORS},
      "rule": k.rule and {"text": " ".join(T.decide.__doc__.split()), **asdict(k.rule),
                          "intervals": T.rule_intervals(r2, k.rule)},
      "decision": k.rule and T.decide(T.rule_intervals(r2, k.rule), k.rule),
      "seeds": {f"{r['group']}/{r['metric']}@{r['min_count']}": r["ci_verdict"] for r in seeds}})


def gamma(ctx) -> dict:
  """Γ = λ·Σ_t lr(t) over a run (decoupled decay shrinks weights by ~exp(-Γ))."""
  g = next(g for g in ctx.groups.values() if g.labels[0]["kind"] != "ceiling")
  tc = g.configs[0].train
  sum_lr = float(np.sum(np.asarray(lr_schedule(tc)(np.arange(tc.steps)), np.float64)))
  lams = sorted(set(ctx.knobs.weight_decays) | {ctx.knobs.seed_weight_decay})
  return {"steps": tc.steps, "sum_lr": sum_lr, "gamma": {f"{x:g}": x * sum_lr for x in lams}}


EXPERIMENT = Experiment("collapse", PRESETS, plan, measure=measure, measure_steps="all",
                        measure_chunk=64, tables=write_tables, figures=figures, report=report,
                        doc=__doc__)
