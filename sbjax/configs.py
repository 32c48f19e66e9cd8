"""Named configurations, and ``load``: a Config from a name or a file (the ``--config`` flag).

``load`` takes a config name (``tiny``, ``planted``, ``planted-knee``, ``planted-mix``,
``pythia-14m`` … ``pythia-410m``, the GPT-Neo TinyStories-like grid ``neo-L<layers>-d<width>``),
a JSON file (e.g. a run's ``config.json``: data, never executed) or an ml_collections ``.py``
config file (``get_config()``) that the user chose to run. (An experiment's scale, ``test`` …
``tpu``, is a *preset*: ``experiments/NAME/presets.py``.)
"""

from __future__ import annotations

import dataclasses
import json
import re
import runpy
from pathlib import Path


from sbjax.config import Config, DataConfig, ModelConfig, TrainConfig
from sbjax.data.options import PlantedMixOptions, PlantedOptions


def tiny() -> Config:
  """For tests: a 2-layer d=32 model on a small planted language; 50 steps in seconds."""
  return Config(
      name="tiny",
      model=ModelConfig(vocab_size=0, d_model=32, n_layers=2, n_heads=2, max_len=64),
      data=DataConfig("planted", PlantedOptions(vocab=64, rank=4, train_tokens=200_000,
                                                val_tokens=8192)),
      train=TrainConfig(steps=50, batch_size=8, seq_len=32, lr=3e-3, warmup_steps=5,
                        eval_every=25, eval_batches=2, log_every=5, ckpt_every=25))


def planted() -> Config:
  """The planted-rank language (V=256, k=8) with a d=64 model: the main experiment's base."""
  return Config(
      name="planted",
      model=ModelConfig(vocab_size=0, d_model=64, n_layers=2, n_heads=4, max_len=128),
      data=DataConfig("planted", PlantedOptions(vocab=256, rank=8, alpha=4.0,
                                                train_tokens=2_000_000, val_tokens=65_536)),
      train=TrainConfig(steps=600, batch_size=32, seq_len=64, lr=3e-3, warmup_steps=50,
                        eval_every=200, eval_batches=8, log_every=50, ckpt_every=200))


def planted_knee() -> Config:
  """The planted-rank knee experiment's base (experiments.planted): V=256, k=8, a 1-layer d=64
  model with a lowrank head. The language is a bigram chain (context = the last token), so
  one layer suffices; no weight decay and a cosine decay to 0 let it converge to H."""
  return Config(
      name="planted-knee",
      model=ModelConfig(vocab_size=0, d_model=64, n_layers=1, n_heads=4, max_len=64,
                        head={"kind": "lowrank", "rank": 64}),
      data=DataConfig("planted", PlantedOptions(vocab=256, rank=8, alpha=4.0,
                                                train_tokens=2_000_000, val_tokens=131_072)),
      train=TrainConfig(steps=1500, batch_size=32, seq_len=64, lr=1e-2, warmup_steps=50,
                        min_lr_ratio=0.0, weight_decay=0.0, eval_every=1500, eval_batches=8,
                        log_every=100, ckpt_every=1500, ckpt_log_spaced=False))


def planted_mixture() -> Config:
  """The high-rank counterpart (experiments.planted, part 2): a mixture of 4 softmaxes of
  planted rank 8 each (V=256); same model and training as ``planted_knee``."""
  knee = planted_knee()
  mix = PlantedMixOptions(**dataclasses.asdict(knee.data.options), mix=4)
  return knee.replace(name="planted-mix", data=DataConfig("planted_mix", mix))


PYTHIA = {  # name: (d_model, n_layers, n_heads)
    "pythia-14m": (128, 6, 4),
    "pythia-31m": (256, 6, 8),
    "pythia-70m": (512, 6, 8),
    "pythia-160m": (768, 12, 12),
    "pythia-410m": (1024, 24, 16),
}


def pythia(name: str) -> Config:
  """Pythia (GPT-NeoX) shapes: parallel residual, rotary 25%, untied head, V=50304."""
  d, n_layers, n_heads = PYTHIA[name]
  return Config(
      name=name,
      model=ModelConfig(vocab_size=50304, d_model=d, n_layers=n_layers, n_heads=n_heads,
                        max_len=2048, pos="rotary", rotary_pct=0.25, parallel_residual=True,
                        gelu="exact", head="dense", loss_chunk=1024),
      data=DataConfig("planted", PlantedOptions(vocab=4096, rank=64)),
      train=TrainConfig(steps=143_000, batch_size=1024, seq_len=2048, lr=1e-3,
                        warmup_steps=1430, eval_every=1000, ckpt_every=1000, log_every=10))


def neo(n_layers: int, d: int) -> Config:
  """GPT-Neo TinyStories-like (Eldan & Li): learned positions, sequential residual,
  alternating global/local attention (window 256), tied head, gelu_new."""
  n_heads = max(1, d // 64) if d >= 64 else 1
  return Config(
      name=f"neo-L{n_layers}-d{d}",
      model=ModelConfig(vocab_size=50257, d_model=d, n_layers=n_layers, n_heads=n_heads,
                        max_len=2048, pos="learned", parallel_residual=False, gelu="tanh",
                        qkv_bias=False, attn_scale=False, head="tied", window_size=256,
                        loss_chunk=1024,
                        attention_layers=tuple("global" if i % 2 == 0 else "local"
                                               for i in range(n_layers))),
      data=DataConfig("planted", PlantedOptions(vocab=4096, rank=64)),
      train=TrainConfig(steps=10_000, batch_size=64, seq_len=512, lr=1e-3, warmup_steps=500))


NAMED = {"tiny": tiny, "planted": planted, "planted-knee": planted_knee,
         "planted-mix": planted_mixture, **{k: (lambda k=k: pythia(k)) for k in PYTHIA}}
NEO_RE = re.compile(r"^neo-L(\d+)-d(\d+)$")


def get(name: str) -> Config:
  """The named config ``name``."""
  if name in NAMED:
    return NAMED[name]()
  m = NEO_RE.match(name)
  if m:
    return neo(int(m.group(1)), int(m.group(2)))
  raise ValueError(f"unknown config name {name!r}; known: {sorted(NAMED)} and neo-L<layers>-d<width>"
                   " (e.g. neo-L2-d128), or a path to a .json / .py config file")


def load(spec: str) -> Config:
  """The Config of a config name, a JSON file (missing fields take their defaults) or a ``.py``
  file whose ``get_config(arg)`` returns a Config or its dict (``path.py`` or ``path.py:arg``)."""
  if spec.endswith(".json"):
    return Config.from_dict(json.loads(Path(spec).read_text()))
  if spec.endswith(".py") or ".py:" in spec:
    path, _, arg = spec.partition(".py")
    mod = runpy.run_path(path + ".py")
    cfg = mod["get_config"](*([arg[1:]] if arg else []))
    return cfg if isinstance(cfg, Config) else Config.from_dict(dict(cfg))
  return get(spec)
