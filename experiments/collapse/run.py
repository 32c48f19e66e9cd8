"""Run the collapse experiment: the corpus subset, every architecture group (trained together,
measured), the CSVs and the tables (``measure.py``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from .budget import Clock, OverBudget
from .ceiling import run_ceiling
from .measure import POINTS, SETTINGS, model_config, run_group, train_config
from .tables import write_tables
from .presets import Preset, get_preset, seed_shapes
from .. import shared
from ..shared import RunsProgress, upath, write_rows
from sbjax import overrides
from sbjax.config import Config
from sbjax.data import make_dataset
from sbjax.data import tokens as tok_lib
from sbjax.data.tokenizer import Tokenizer
from sbjax.optim import lr_schedule
from sbjax.paths import local_file
from sbjax.studies.collapse_grid import Member
from sbjax.studies.corpus import corpus_overrides


def groups(p: Preset) -> list:
  """[(name, kind, L, d, [Member], snapshot epochs)]: the first seed group, then the grid by
  increasing cost, then the seed groups of ``extra_seed_archs`` (an interrupted run has the
  permutation test and the cheap models)."""
  k = p.knobs
  ms = [Member(seed=s, data_seed=s, weight_decay=k.seed_weight_decay) for s in range(k.seeds)]
  seed_groups = [(f"seeds-L{n_layers}-d{d}", "seeds", n_layers, d, ms, (max(k.epochs),))
                 for n_layers, d in seed_shapes(k)] if ms else []  # (grid-only: none)
  grid = [(f"L{n_layers}-d{d}", "grid", n_layers, d,
           [Member(seed=0, data_seed=0, weight_decay=float(wd)) for wd in k.weight_decays],
           tuple(k.epochs)) for d in k.widths for n_layers in k.depths]
  return seed_groups[:1] + grid + seed_groups[1:]


def validate(p: Preset, vocab: int | None = None) -> list:
  """Build and validate every model and train config of the preset (no data, no training)."""
  vocab = vocab or p.overrides["data.options.vocab_size"]
  return [(model_config(p, n_layers, d, vocab), train_config(p, 1))
          for _, _, n_layers, d, _, _ in groups(p)]


TOKEN_SUFFIXES = (".bin", ".npy")


def is_token_files(data: str | None) -> bool:
  """``--data=TRAIN[,VAL]`` names token files (.bin / .npy) rather than a text directory."""
  return bool(data) and Path(str(data).split(",")[0]).suffix in TOKEN_SUFFIXES


def token_file_corpus(data: str | None, vocab: int, dtype: str = "uint16"):
  """(train, val) flat token streams of ``--data=TRAIN[,VAL]``: token files of ids in
  [0, vocab) (a flat .bin of ``dtype``, or an integer .npy [N] or [n, W] whose rows are
  concatenated in file order), e.g. TinyStories through the GPT-Neo tokenizer; without VAL
  the last tenth of TRAIN is the validation stream (a contiguous tail)."""
  if not is_token_files(data):
    raise ValueError(f"--data={data!r}: this preset trains on token files; pass "
                     "--data=TRAIN.bin[,VAL.bin] (flat uint16 ids, or an integer .npy) of "
                     f"token ids in [0, {vocab}), e.g. TinyStories through the GPT-Neo "
                     "tokenizer; nothing is downloaded")
  paths = str(data).split(",")
  arrs = [tok_lib.read_tokens(q, dtype).reshape(-1) for q in paths[:2]]
  for q, a in zip(paths, arrs):
    tok_lib.check_ids(a, vocab, f"token file {q}: ", "data.options.vocab_size of the preset")
  if len(arrs) == 2:
    return arrs[0], arrs[1]
  n_val = len(arrs[0]) // 10
  return arrs[0][:len(arrs[0]) - n_val], arrs[0][len(arrs[0]) - n_val:]


def beside_tokenizer(data: str, vocab: int) -> str | None:
  """The absolute local path of the ``tokenizer.model`` beside the TRAIN token file (as
  benchmarks/build_device_tokens.py ships one per V), when its vocabulary is ``vocab``: the
  report's token table then shows pieces; None (token ids) when there is none or it differs."""
  tp = upath(str(data).split(",")[0]).with_name("tokenizer.model")
  if not tp.is_file():
    return None
  local = str(Path(local_file(tp)).resolve())
  return local if Tokenizer(local).vocab_size == vocab else None


def load_corpus(p: Preset, out: Path, corpus: str | None):
  """(train_tokens, val_tokens, vocab_size, tokenizer_path) of the preset's corpus subset:
  token files (source ``tokens``, or any preset given ``--data=FILE.bin|.npy``), a TFDS
  name, or a directory of .txt files (tokenized here)."""
  o, k = p.overrides, p.knobs
  if o["data.source"] == "tokens" or is_token_files(corpus):
    vocab = o["data.options.vocab_size"]
    tr, va = token_file_corpus(corpus, vocab)
    tok_path = beside_tokenizer(corpus, vocab)
  else:
    keep = {k: o[k] for k in ("data.options.vocab_size", "data.options.name") if k in o}
    dc = overrides.apply(Config(), {**keep, **corpus_overrides(o["data.source"], corpus)}).data
    ds = make_dataset(dc, seq_len=o["train.seq_len"], global_batch_size=o["train.batch_size"],
                      seed=0, workdir=str(out / "data"), process_index=0, process_count=1)
    tr, va, vocab, tok_path = ds.train_tokens, ds.val_tokens, ds.vocab_size, ds.tokenizer_path
  if k.epoch_tokens and len(tr) > k.epoch_tokens + 1:
    tr = tr[:k.epoch_tokens + 1]
  if k.val_tokens and len(va) > k.val_tokens + 1:
    va = va[:k.val_tokens + 1]
  return np.asarray(tr), np.asarray(va), vocab, tok_path


def result_knobs(p: Preset) -> dict:
  """The knobs that shape the results (the time budget does not: an output written before
  ``budget_s`` existed is still the same experiment; nor does an empty ``extra_seed_archs``,
  for the same reason)."""
  return {k: v for k, v in dataclasses.asdict(p.knobs).items()
          if k not in ("budget_s", "estimate_at") and not (k == "extra_seed_archs" and not v)}


def check_same_experiment(out: Path, key: dict) -> None:
  """Finished groups are reused only by the same preset, corpus and settings."""
  path = out / "groups" / "_experiment.json"
  key = json.loads(json.dumps(key))
  if path.exists():
    old = json.loads(path.read_text())
    if old != key:
      diff = sorted(k for k in set(old) | set(key) if old.get(k) != key.get(k))
      raise ValueError(f"{out} holds groups of another collapse experiment (differs in "
                       f"{diff}); nothing was changed; use a new --out")
    return
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(key, indent=1))


def weight_decay_strength(p: Preset, n_train_tokens: int) -> dict:
  """Γ = λ · Σ_t lr(t) over the run (decoupled decay shrinks weights by ~exp(-Γ)): a decay
  with Γ << 1 does nothing."""
  o = p.overrides
  spe = max(1, (n_train_tokens // o["train.seq_len"]) // o["train.batch_size"])
  steps = spe * max(p.knobs.epochs)
  sched = lr_schedule(train_config(p, steps))
  sum_lr = float(np.sum(np.asarray(sched(np.arange(steps)), np.float64)))
  lams = sorted(set(p.knobs.weight_decays) | {p.knobs.seed_weight_decay})
  return {"steps_per_epoch": spe, "steps": steps, "sum_lr": sum_lr,
          "gamma": {f"{lam:g}": lam * sum_lr for lam in lams}}


META = "collapse_meta.json"
# one call's record in collapse_meta.json's "runs" (``experiments.shared.with_history``):
# "trained": the groups whose training ended in that call; "stopped": the budget stop's text
# (None: no stop); "not_run": the groups without a record in OUT/groups/ when it was written
CALL_KEYS = ("preset", "started", "ended", "seconds", "cpu_seconds", "trained", "stopped",
             "not_run", "estimates")


class CallRecord(shared.CallRecord):
  """collapse_meta.json during one call (``experiments.shared.CallRecord``), written when the
  call starts, after every group, at each estimate and at its end; ``not_run``: the preset's
  groups without a record in OUT/groups/ at that write."""

  def __init__(self, out: Path):  # the call's clocks start here
    super().__init__(out / META, CALL_KEYS)
    self.names = []

  def open(self, meta: dict) -> None:
    """The experiment's fields (``experiment_meta``); the call's first record is written."""
    self.meta, self.names = {**meta, "stopped": None}, [g["name"] for g in meta["groups"]]
    self.write()

  def not_run(self) -> list[str]:
    return [n for n in self.names if not (self.path.parent / "groups" / f"{n}.json").exists()]

  def write(self, **fields) -> dict:
    return super().write(**fields, not_run=self.not_run())


def train_groups(p: Preset, out: Path, tr, va, vocab: int, verbose: bool,
                 record: CallRecord | None = None) -> list[dict]:
  """Every group's rows (finished groups read back), collapse_models.csv and ``record``
  after each; with ``Knobs.budget_s`` the run stops cleanly (``budget.OverBudget``) before
  overrunning it."""
  rows, gs = [], groups(p)
  clock = Clock(p.knobs.budget_s, p.knobs.estimate_at) if p.knobs.budget_s else None
  if record is not None:
    record.watch(clock)
  progress = RunsProgress(len(gs), "collapse", disable=not verbose)
  seq_len, batch = p.overrides["train.seq_len"], p.overrides["train.batch_size"]
  try:
    for g in gs:
      progress.start(f"{g[0]} ({len(g[4])} models)")
      cached = (out / "groups" / f"{g[0]}.json").exists()
      if clock is not None and not cached:
        steps = max(1, (len(tr) - 1) // seq_len // batch) * max(g[5])
        clock.check_start(g[0], steps * batch * seq_len * len(g[4]))
      rows += run_group(p, g, tr, va, vocab, out, verbose, clock=clock)
      write_rows(out / "collapse_models.csv", rows)
      if record is not None:
        record.trained.extend([] if cached else [g[0]])
        record.write()
      progress.finish(trained=not cached)
  finally:
    progress.close()
  return rows


def experiment_meta(p: Preset, preset: str, out: Path, vocab: int, tok_path, n_train: int,
                    n_val: int) -> dict:
  """collapse_meta.json's fields of the experiment (the same in every call): preset, knobs,
  settings, corpus sizes, Γ, the tokenizer, and ``groups``: every group of the preset in run
  order with its kind and number of runs (what a partial report counts against)."""
  tok = Path(tok_path).resolve() if tok_path else None
  return {
      "preset": preset, "base": p.base,
      "overrides": p.overrides, "knobs": dataclasses.asdict(p.knobs), "settings": SETTINGS,
      "vocab_size": vocab, "n_permutations": p.knobs.n_perm,
      "min_counts": list(p.knobs.min_counts), "points": POINTS,
      "weight_decay": weight_decay_strength(p, n_train),
      "tokenizer": (str(tok.relative_to(out.resolve())) if tok and
                    tok.is_relative_to(out.resolve()) else tok_path),
      "train_tokens": n_train, "val_tokens": n_val,
      "epoch_definition": "one pass over the first train_tokens tokens of the training "
                          "split (windows of seq_len, reshuffled every epoch)",
      "groups": [{"name": g[0], "kind": g[1], "runs": len(g[4])} for g in groups(p)]}


def run(out: Path, preset: str, *, data: str | None = None, verbose: bool = True) -> dict:
  """Run the experiment into ``out`` (finished groups are skipped); see the package doc.
  ``data``: a directory of .txt files (default: the packaged sample corpus), token files
  ``TRAIN.bin[,VAL.bin]`` / ``.npy`` (the tpu preset: TinyStories ids of the GPT-Neo
  tokenizer), or a TFDS name (a preset whose source is tfds). Returns collapse_meta.json.
  A budget stop (``budget.OverBudget``) records it in collapse_meta.json (``stopped``,
  ``not_run``, ``estimates``, ``runs``) and is raised again; ``report.write_section`` then
  writes the tables and the report of the groups that finished."""
  p = get_preset(preset)
  out = upath(out)
  out.mkdir(parents=True, exist_ok=True)
  record = CallRecord(out)
  tr, va, vocab, tok_path = load_corpus(p, out, data)
  name = preset if isinstance(preset, str) else "custom"  # a Preset object: "custom"
  check_same_experiment(out, {"preset": name, "base": p.base, "overrides": p.overrides,
                              "knobs": result_knobs(p), "vocab": int(vocab),
                              "train_tokens": int(len(tr)), "val_tokens": int(len(va)),
                              "settings": SETTINGS})
  record.open(experiment_meta(p, name, out, vocab, tok_path, int(len(tr) - 1),
                              int(len(va) - 1)))
  try:
    train_groups(p, out, tr, va, vocab, verbose, record)
  except OverBudget as e:
    record.write(stopped=str(e))
    raise
  run_ceiling(out, p, verbose)  # the planted language's ceiling and models trained towards it
  full = record.write()
  write_tables(out, p.knobs.n_perm)
  return full
