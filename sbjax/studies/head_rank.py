"""The head-rank sweep (Godey et al. 2024, E5) at the sizes the experiments share: presets
(config overrides of ``tiny`` plus the knobs of ``sbjax.studies.rank_sweep.Plan``), the plan of
a preset on a corpus, and the sweep trained with run-level progress. ``experiments.head_rank``
reports it; ``werror_loss`` reads (or first trains) it; ``vocab_threshold`` runs one per
vocabulary size; ``target_rank`` takes its text data section."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sbjax.config import Config, ModelConfig, TrainConfig
from sbjax.data import make_dataset
from sbjax.overrides import config_from
from sbjax.paths import upath
from sbjax.studies import rank_sweep
from sbjax.studies.corpus import corpus_overrides
from sbjax.studies.presets import Preset, pick_preset
from sbjax.studies.progress import RunsProgress, SweepProgress

NAME = "head_rank"

BASE = "tiny"
_MODEL, _TRAIN = ModelConfig(), TrainConfig()
# "tiny" sets a small planted language and its own lr; the text runs take a text source
TEXT_DATA = {"data.source": "text"}


@dataclasses.dataclass(frozen=True)
class Knobs:
  """The fields of ``rank_sweep.Plan`` besides its base config (same meanings, same defaults)."""
  ranks: tuple = ()  # () = rank_grid(d_model)
  lrs: tuple = (1e-3, 3e-3)  # LR grid of protocols full and b
  head_lrs: tuple = (3e-3, 1e-2)  # LR grid of protocol a
  head_steps: int = 0  # steps of protocol a; 0 = train.steps
  protocols: tuple = ("a", "b")
  mos_mix: tuple = ()
  mos_protocols: tuple = ("b",)
  mos_lrs: tuple = ()


# a text-corpus sweep's Config in dotted keys over BASE (the cpu preset's trunk and schedule);
# a preset replaces some of them (``overrides``)
CPU = {**TEXT_DATA, "data.options.vocab_size": 1024, "name": "head_rank-cpu",
       "model.vocab_size": 0, "model.d_model": 64, "model.n_layers": 2, "model.n_heads": 4,
       "model.max_len": 64,
       "model.rotary_pct": _MODEL.rotary_pct, "model.remat": _MODEL.remat,
       "train.steps": 400, "train.batch_size": 32, "train.seq_len": 64, "train.lr": _TRAIN.lr,
       "train.warmup_steps": 30, "train.eval_batches": 24, "train.ckpt_log_spaced": False}


def overrides(o: dict) -> dict:
  """CPU with the preset's dotted keys ``o`` over it (a sentencepiece vocabulary of
  data.options.vocab_size pieces, the trunk, the schedule), and a schedule that evaluates and
  checkpoints once, at the last step, with ten log lines."""
  o = {**CPU, **o}
  steps = o["train.steps"]
  return {**o, "train.eval_every": steps, "train.ckpt_every": steps,
          "train.log_every": max(1, steps // 10)}


# the test and quick presets' trunk
_TINY = {"data.options.vocab_size": 96, "model.d_model": 4, "model.n_layers": 1,
         "model.n_heads": 1, "model.max_len": 16, "model.rotary_pct": 0.5,
         "train.batch_size": 8, "train.seq_len": 16, "train.warmup_steps": 2}
PRESETS: dict[str, Preset[Knobs]] = {
    # the test suite: the quick trunk, 6 steps, rank 1 besides the dense head (r = d)
    "test": Preset(BASE, overrides({**_TINY, "name": "head_rank-test", "train.steps": 6,
                                    "train.eval_batches": 1}),
                   Knobs(ranks=(1,), lrs=(3e-3, 3e-2), head_lrs=(3e-2,), head_steps=4)),
    # smoke runs: seconds per run, mostly XLA compilation
    "quick": Preset(BASE, overrides({**_TINY, "name": "head_rank-quick", "train.steps": 12,
                                     "train.eval_batches": 2}),
                    Knobs(ranks=(1,), lrs=(3e-3, 3e-2), head_lrs=(3e-2,), head_steps=8)),
    # Trade-offs for <= 20 min on 2 cores: 400 steps (~0.4 epochs of Shakespeare), 2-point
    # LR grids, 150 head-only steps for (a), mos heads with one learning rate. A grid of
    # {3e-3, 1e-2} was won by 1e-2 at every rank, so the grid sits one step up.
    "cpu": Preset(BASE, overrides({}),
                  Knobs(lrs=(1e-2, 2e-2), head_lrs=(1e-2, 3e-2), head_steps=150,
                        mos_mix=(1, 2), mos_lrs=(1e-2,))),
    # Pythia-410m shape: ranks 1..1024; give it a corpus larger than Shakespeare with --data
    "tpu": Preset(BASE, overrides({"name": "head_rank-tpu", "data.options.vocab_size": 8192,
                                   "model.d_model": 1024, "model.n_layers": 24,
                                   "model.n_heads": 16, "model.max_len": 512,
                                   "model.remat": "full", "train.steps": 20_000,
                                   "train.batch_size": 256, "train.seq_len": 512,
                                   "train.warmup_steps": 1000, "train.eval_batches": 32}),
                  Knobs(lrs=(3e-4, 1e-3, 3e-3), head_lrs=(1e-3, 3e-3, 1e-2), head_steps=5000,
                        mos_mix=(1, 2, 4), mos_protocols=("a", "b"))),
}


def get_preset(name) -> Preset:
  return pick_preset(PRESETS, name, "head_rank")


def base_config(preset, data: str, vocab: int | None = None) -> Config:
  """The trunk/data/training config of a preset (the head fields are set per run)."""
  p = get_preset(preset)
  o = {**p.overrides, **corpus_overrides("text", data)}
  if vocab:
    o["data.options.vocab_size"] = vocab
  return config_from(p.base, o)


def make_plan(preset, data: str, vocab: int | None = None) -> rank_sweep.Plan:
  """The sweep of a preset on the corpus ``data`` (``vocab`` replaces its vocabulary size)."""
  return rank_sweep.Plan(base_config(preset, data, vocab),
                         **dataclasses.asdict(get_preset(preset).knobs))


def sweep_units(plan: rank_sweep.Plan) -> int:
  """How many progress messages ``rank_sweep.run_plan`` sends for ``plan``: one per population
  (an LR grid of protocol full or b) and one per separate run."""
  return sum(1 if plan.population and len(g) > 1 and g[0].protocol != "a" else len(g)
             for g in rank_sweep.groups(plan))


def run_sweep(plan: rank_sweep.Plan, out: Path, progress: RunsProgress, prefix: str = "") -> list:
  """Train (or read back) every run of ``plan`` into ``out``; returns the CSV rows."""
  tc = plan.base.train
  ds = make_dataset(plan.base.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                    seed=tc.data_seed, workdir=str(out / "data"))
  steps = SweepProgress(progress, prefix)
  try:
    return rank_sweep.run_plan(plan, out, ds, progress=steps)
  finally:
    steps.finish()


def train_sweep(out: Path, preset, data: str, verbose: bool = True) -> rank_sweep.Plan:
  """Train (or read back) the sweep of ``preset`` on the corpus directory ``data`` into
  ``out`` (``head_rank.csv``, ``plan.json``, ``full_head.npy``, ``runs/``); returns its plan."""
  out = upath(out)
  plan = make_plan(preset, str(data))
  out.mkdir(parents=True, exist_ok=True)
  progress = RunsProgress(sweep_units(plan), NAME, disable=not verbose)
  try:
    run_sweep(plan, out, progress)
  finally:
    progress.close()
  return plan
