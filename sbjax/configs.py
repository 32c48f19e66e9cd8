"""Named configurations, and the absl ``--config`` flag that selects them.

(A *preset* in sbjax is only an experiment's scale: ``test``, ``quick``, ``cpu``, ``tpu``, in
``experiments/NAME/presets.py``; the model/data/training configurations here are *named
configs*.)

``--config`` takes one of:
- a config name (``tiny``, ``planted``, ``planted-knee``, ``planted-mix``, ``pythia-14m`` … ``pythia-410m``,
  GPT-Neo TinyStories-like grids ``neo-L<layers>-d<width>``), see ``NAMED``;
- a JSON file (e.g. a run's ``config.json``): data, never executed;
- an ml_collections ``.py`` config file (``get_config()``) that the user chose to run.

Any field can then be overridden with ``--config.section.key=value``. The editable dicts here
(and the ConfigDict of the flag) hold the head in its flat form, ``model.head`` a kind name
beside ``model.head_rank``, ``model.head_init``, ``model.n_mix``, ``model.mos_dim`` and
``model.mos_act`` (``sbjax.heads._legacy``), so ``--config.model.head=lowrank
--config.model.head_rank=8`` works as before, and the data source's fields in theirs,
``data.source`` beside ``data.planted_vocab``, ``data.path``, ``data.tfds_name``, ...
(``sbjax.data._legacy``; ``data.options`` only for a source with fields of its own), so
``--config.data.planted_vocab=64`` works as before; ``Config.from_dict`` types them. The
overrides of ``sbjax.overrides`` (presets, sweeps) take the new form too:
``data.options.vocab``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import ml_collections
from absl import flags
from ml_collections.config_flags import config_flags

from sbjax.config import Config, DataConfig, MeshConfig, ModelConfig, TrainConfig
from sbjax.data import _legacy as legacy_data
from sbjax.heads import _legacy as legacy_heads


def _flat_model(mc: ModelConfig) -> dict:
  return legacy_heads.to_flat({**dataclasses.asdict(mc), "head": mc.head})


def _base() -> dict:
  return {
      "model": _flat_model(ModelConfig()),
      "data": legacy_data.to_flat(dataclasses.asdict(DataConfig())),
      "train": dataclasses.asdict(TrainConfig()),
      "mesh": dataclasses.asdict(MeshConfig()),
      "name": "run",
  }


def _merge(d: dict, **sections) -> dict:
  for k, v in sections.items():
    if isinstance(v, dict):
      d[k].update(v)
    else:
      d[k] = v
  return d


def tiny() -> dict:
  """For tests: a 2-layer d=32 model on a small planted language; 50 steps in seconds."""
  return _merge(
      _base(), name="tiny",
      model=dict(vocab_size=0, d_model=32, n_layers=2, n_heads=2, max_len=64),
      data=dict(source="planted", planted_vocab=64, planted_rank=4, planted_train_tokens=200_000,
                planted_val_tokens=8192),
      train=dict(steps=50, batch_size=8, seq_len=32, lr=3e-3, warmup_steps=5, eval_every=25,
                 eval_batches=2, log_every=5, ckpt_every=25))


def planted() -> dict:
  """The planted-rank language (V=256, k=8) with a d=64 model: the main experiment's base."""
  return _merge(
      _base(), name="planted",
      model=dict(vocab_size=0, d_model=64, n_layers=2, n_heads=4, max_len=128),
      data=dict(source="planted", planted_vocab=256, planted_rank=8, planted_alpha=4.0,
                planted_train_tokens=2_000_000, planted_val_tokens=65_536),
      train=dict(steps=600, batch_size=32, seq_len=64, lr=3e-3, warmup_steps=50, eval_every=200,
                 eval_batches=8, log_every=50, ckpt_every=200))


def planted_knee() -> dict:
  """The planted-rank knee experiment's base (experiments.planted): V=256, k=8, a 1-layer d=64
  model with a lowrank head. The language is a bigram chain (context = the last token), so
  one layer suffices; no weight decay and a cosine decay to 0 let it converge to H."""
  return _merge(
      _base(), name="planted-knee",
      model=dict(vocab_size=0, d_model=64, n_layers=1, n_heads=4, max_len=64, head="lowrank",
                 head_rank=64),
      data=dict(source="planted", planted_vocab=256, planted_rank=8, planted_alpha=4.0,
                planted_train_tokens=2_000_000, planted_val_tokens=131_072),
      train=dict(steps=1500, batch_size=32, seq_len=64, lr=1e-2, warmup_steps=50,
                 min_lr_ratio=0.0, weight_decay=0.0, eval_every=1500, eval_batches=8,
                 log_every=100, ckpt_every=1500, ckpt_log_spaced=False))


def planted_mixture() -> dict:
  """The high-rank counterpart (experiments.planted, part 2): a mixture of 4 softmaxes of
  planted rank 8 each (V=256); same model and training as ``planted_knee``."""
  d = planted_knee()
  d["name"] = "planted-mix"
  d["data"].update(source="planted_mix", planted_mix=4)
  return d


PYTHIA = {  # name: (d_model, n_layers, n_heads)
    "pythia-14m": (128, 6, 4),
    "pythia-31m": (256, 6, 8),
    "pythia-70m": (512, 6, 8),
    "pythia-160m": (768, 12, 12),
    "pythia-410m": (1024, 24, 16),
}


def pythia(name: str) -> dict:
  """Pythia (GPT-NeoX) shapes: parallel residual, rotary 25%, untied head, V=50304."""
  d, n_layers, n_heads = PYTHIA[name]
  return _merge(
      _base(), name=name,
      model=dict(vocab_size=50304, d_model=d, n_layers=n_layers, n_heads=n_heads, max_len=2048,
                 pos="rotary", rotary_pct=0.25, parallel_residual=True, gelu="exact",
                 head="dense", loss_chunk=1024),
      data=dict(source="planted", planted_vocab=4096, planted_rank=64),
      train=dict(steps=143_000, batch_size=1024, seq_len=2048, lr=1e-3, warmup_steps=1430,
                 eval_every=1000, ckpt_every=1000, log_every=10))


def neo(n_layers: int, d: int) -> dict:
  """GPT-Neo TinyStories-like (Eldan & Li): learned positions, sequential residual,
  alternating global/local attention (window 256), tied head, gelu_new."""
  n_heads = max(1, d // 64) if d >= 64 else 1
  return _merge(
      _base(), name=f"neo-L{n_layers}-d{d}",
      model=dict(vocab_size=50257, d_model=d, n_layers=n_layers, n_heads=n_heads, max_len=2048,
                 pos="learned", parallel_residual=False, gelu="tanh", qkv_bias=False,
                 attn_scale=False, head="tied", window_size=256, loss_chunk=1024,
                 attention_layers=tuple("global" if i % 2 == 0 else "local"
                                        for i in range(n_layers))),
      data=dict(source="planted", planted_vocab=4096, planted_rank=64),
      train=dict(steps=10_000, batch_size=64, seq_len=512, lr=1e-3, warmup_steps=500))


NAMED = {"tiny": tiny, "planted": planted, "planted-knee": planted_knee,
           "planted-mix": planted_mixture, **{k: (lambda k=k: pythia(k)) for k in PYTHIA}}
NEO_RE = re.compile(r"^neo-L(\d+)-d(\d+)$")


def get(name: str) -> dict:
  """The named config ``name`` as a plain dict of sections."""
  if name in NAMED:
    return NAMED[name]()
  m = NEO_RE.match(name)
  if m:
    return neo(int(m.group(1)), int(m.group(2)))
  raise ValueError(f"unknown config name {name!r}; known: {sorted(NAMED)} and neo-L<layers>-d<width>"
                   " (e.g. neo-L2-d128), or a path to a .json / .py config file")


def to_configdict(d: dict) -> ml_collections.ConfigDict:
  d = json.loads(json.dumps(d))  # tuples -> lists, a plain JSON-able copy
  return ml_collections.ConfigDict(d)


def load(spec: str) -> ml_collections.ConfigDict:
  """A ConfigDict from a config name or a JSON file (with all defaults filled in)."""
  if spec.endswith(".json"):
    path = Path(spec)
    if not path.exists():
      raise ValueError(f"config file {spec} does not exist")
    d = _base()
    for k, v in json.loads(path.read_text()).items():
      if k == "model" and isinstance(v, dict):
        v = legacy_heads.to_flat(legacy_heads.from_flat(v))  # either form -> the flat one
      elif k == "data" and isinstance(v, dict):
        v = legacy_data.to_flat(legacy_data.from_flat(v))
      if isinstance(v, dict) and k in d:
        d[k].update(v)
      else:
        d[k] = v
    return to_configdict(d)
  return to_configdict(get(spec))


def build(cd) -> Config:
  """A validated Config from a ConfigDict (or dict)."""
  d = cd.to_dict() if hasattr(cd, "to_dict") else dict(cd)
  return Config.from_dict(d)


class _ConfigParser(config_flags.ConfigFileFlagParser):
  def parse(self, path):
    if isinstance(path, ml_collections.ConfigDict):
      return path
    if path.endswith(".py") or ".py:" in path:
      return super().parse(path)
    return load(path)


def DEFINE_config(name: str = "config", default: str = "tiny",  # noqa: N802 - absl style
                  help_string: str = "a config name, a .json config, or an ml_collections .py "
                                     "file; override fields with --config.section.key=value"):
  # sys_argv=[]: ml_collections would scan the command line for ``--config.KEY`` overrides of
  # its own, typed from the flat ConfigDict, already when the flag is defined (at import,
  # before the CLI turns them into ``--config_override``): a key of the nested form
  # (``--config.data.options=...``) ended there in an AttributeError traceback. The overrides
  # go through the one override path only (``sbjax.overrides``, ``sbjax.cli.train``).
  flag = config_flags._ConfigFlag(  # pylint: disable=protected-access
      parser=_ConfigParser(name=name, lock_config=True), sys_argv=[],
      serializer=flags.ArgumentSerializer(), name=name, default=default,
      help_string=help_string, flag_values=flags.FLAGS)
  return flags.DEFINE_flag(flag, flags.FLAGS)
