"""Typed, validated configuration: model, head, data and training.

Configs are data, not code. The named configs (``sbjax.configs``) are built from
the frozen dataclasses below, which validate every field and raise ``ValueError`` naming the
field and the allowed range; dotted overrides apply to them (``sbjax.overrides``).
``Config.to_dict`` gives the JSON that is written to ``WORKDIR/config.json``;
``Config.from_dict`` reads it back (and the flat files of earlier versions:
``sbjax.config_legacy``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers

from sbjax import config_legacy
from sbjax.data import sources as data_sources
from sbjax.data.sources import SourceOptions
from sbjax.errors import config_error
from sbjax.heads import base as head_registry
from sbjax.heads.base import HeadConfig

POS_KINDS = ("rotary", "learned")
GELU_KINDS = ("exact", "tanh")
ATTN_IMPLS = ("auto", "dpa", "einsum", "cudnn", "splash")  # sbjax.attention
MATMUL_PRECISIONS = ("auto", "highest", "high", "default")  # sbjax.precision
REMAT_KINDS = ("none", "full", "dots")
ATTN_KINDS = ("global", "local")
DTYPES = ("float32", "bfloat16", "float16", "float64")
TRAIN_OBJECTIVES = ("sampled", "expected")  # train.objective (sbjax.train.objective)


_err = config_error


def _finite(x) -> bool:
  """A real number that is neither NaN nor infinite."""
  return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """A decoder-only transformer (GPT-NeoX/Pythia or GPT-Neo style)."""

  vocab_size: int = 256  # 0 = take it from the data (tokenizer or planted language)
  d_model: int = 64
  n_layers: int = 2
  n_heads: int = 4
  d_ff: int = 0  # 0 means 4 * d_model
  max_len: int = 256
  # positions
  pos: str = "rotary"  # "rotary" (Pythia) or "learned" (GPT-Neo)
  rotary_pct: float = 0.25
  rotary_base: float = 10000.0
  # block
  parallel_residual: bool = True  # GPT-NeoX/Pythia: x + attn(ln1 x) + mlp(ln2 x)
  ln_eps: float = 1e-5
  gelu: str = "exact"  # "exact" (erf, Pythia) or "tanh" (gelu_new, GPT-Neo)
  qkv_bias: bool = True  # GPT-Neo has no q/k/v bias
  attn_scale: bool = True  # GPT-Neo does not scale scores by 1/sqrt(head_dim)
  attention_layers: tuple = ()  # per layer "global"/"local"; () = all global
  window_size: int = 256  # local attention window (GPT-Neo)
  # head: a typed config of a kind registered in sbjax.heads, with that kind's own fields,
  # e.g. LowRankHead(rank=8) (JSON {"kind": "lowrank", "rank": 8, "init": "scaled"}); a kind
  # name or such a dict is accepted and turned into it (sbjax.heads.head_config)
  head: HeadConfig | str | dict = "dense"
  # numerics / memory
  init_std: float = 0.02
  param_dtype: str = "float32"
  dtype: str = "float32"  # compute dtype; softmax and loss are always float32
  remat: str = "none"  # none | full | dots
  # precision of every dot/einsum of the model, heads, losses and attention (sbjax.precision):
  # "auto" = highest for float32 compute (TF32 on a GPU / one bf16 pass on a TPU otherwise),
  # the backend default for bf16; or highest | high | default
  matmul_precision: str = "auto"
  scan_layers: bool = False
  # attention core: "dpa" = jax.nn.dot_product_attention (cuDNN flash on GPU, a Pallas
  # kernel on TPU), "einsum" = the plain einsum reference, "auto" = einsum on CPU (measured
  # 1.9-2.7x faster fwd+bwd there, benchmarks/profile_step.py) and dpa elsewhere. Same values.
  # "cudnn" (GPU) and "splash" (the Pallas TPU kernel): see sbjax.attention, which also
  # says what "auto" picks on a GPU.
  attn_impl: str = "auto"
  # tokens per chunk of the training/eval cross-entropy (sbjax.losses): the B·T×V logits
  # are never formed at once; 0 = off (full logits). Same loss and gradients either way.
  loss_chunk: int = 0

  def __post_init__(self):
    if isinstance(self.attention_layers, list):
      object.__setattr__(self, "attention_layers", tuple(self.attention_layers))
    if not isinstance(self.head, head_registry.HeadConfig):
      object.__setattr__(self, "head", head_registry.head_config(self.head))
    if not isinstance(self.vocab_size, int) or self.vocab_size < 0:
      raise _err("model.vocab_size", self.vocab_size, "an integer >= 1, or 0 to take it from the data")
    for f in ("d_model", "n_layers", "n_heads", "max_len"):
      v = getattr(self, f)
      if not isinstance(v, int) or v < 1:
        raise _err(f"model.{f}", v, "an integer >= 1")
    if self.d_model % self.n_heads:
      raise _err("model.n_heads", self.n_heads,
                 f"a divisor of model.d_model={self.d_model}")
    if self.d_ff < 0:
      raise _err("model.d_ff", self.d_ff, "0 (meaning 4*d_model) or a positive integer")
    if self.pos not in POS_KINDS:
      raise _err("model.pos", self.pos, " | ".join(POS_KINDS))
    if not 0.0 <= self.rotary_pct <= 1.0:
      raise _err("model.rotary_pct", self.rotary_pct, "0.0 .. 1.0")
    if self.pos == "rotary" and int(self.head_dim * self.rotary_pct) % 2:
      raise _err("model.rotary_pct", self.rotary_pct,
                 f"a fraction giving an even number of rotary dims of head_dim={self.head_dim}")
    if self.gelu not in GELU_KINDS:
      raise _err("model.gelu", self.gelu, " | ".join(GELU_KINDS))
    head_registry.validate(self)  # a registered head kind, and its own fields (sbjax.heads)
    for f in ("param_dtype", "dtype"):
      if getattr(self, f) not in DTYPES:
        raise _err(f"model.{f}", getattr(self, f), " | ".join(DTYPES))
    if not isinstance(self.loss_chunk, int) or isinstance(self.loss_chunk, bool) \
        or self.loss_chunk < 0:
      raise _err("model.loss_chunk", self.loss_chunk,
                 "0 (off) or a positive number of tokens per cross-entropy chunk, e.g. 1024")
    if self.remat not in REMAT_KINDS:
      raise _err("model.remat", self.remat, " | ".join(REMAT_KINDS))
    if self.attn_impl not in ATTN_IMPLS:
      raise _err("model.attn_impl", self.attn_impl, " | ".join(ATTN_IMPLS))
    if self.matmul_precision not in MATMUL_PRECISIONS:
      raise _err("model.matmul_precision", self.matmul_precision, " | ".join(MATMUL_PRECISIONS))
    if self.attention_layers:
      if len(self.attention_layers) != self.n_layers:
        raise _err("model.attention_layers", self.attention_layers,
                   f"empty or one entry per layer (n_layers={self.n_layers})")
      bad = [a for a in self.attention_layers if a not in ATTN_KINDS]
      if bad:
        raise _err("model.attention_layers", bad, " | ".join(ATTN_KINDS))
      if self.scan_layers and len(set(self.attention_layers)) > 1:
        raise _err("model.scan_layers", True, "False when attention_layers mixes global and local")
    if self.window_size < 1:
      raise _err("model.window_size", self.window_size, "an integer >= 1")

  @property
  def head_dim(self) -> int:
    return self.d_model // self.n_heads

  @property
  def ff_dim(self) -> int:
    return self.d_ff or 4 * self.d_model

  @property
  def rank(self) -> int:
    """The rank of the head: its rank for lowrank heads, else d_model."""
    return head_registry.get(self.head).rank(self)

  @property
  def rotary_dim(self) -> int:
    return int(self.head_dim * self.rotary_pct) if self.pos == "rotary" else 0

  def layer_kinds(self) -> tuple:
    return self.attention_layers or ("global",) * self.n_layers


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Where tokens come from. ``source`` names a source registered in sbjax.data.sources:
  planted | planted_mix | planted_mos (exact P(.|context) known) | text | tfds | tokens (token
  files on disk, sbjax.data.tokens), or one a file registers; ``options`` holds that source's
  own fields (a ``SourceOptions`` of ``sbjax.data.options``, e.g. ``PlantedOptions(vocab=64,
  rank=4)``; a dict or None, its defaults, is turned into it). JSON: ``{"source": "planted",
  "options": {"vocab": 64, ...}}``."""

  source: str = "planted"
  options: SourceOptions | dict | None = None

  def __post_init__(self):
    source = data_sources.get(self.source)  # a registered source, else the list of them
    object.__setattr__(self, "options", data_sources.options_for(self.source, self.options))
    source.validate(self)

  def replace_options(self, **fields) -> "DataConfig":
    """This config with some of its options' fields replaced."""
    return dataclasses.replace(self, options=dataclasses.replace(self.options, **fields))


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Optimisation, evaluation, logging and checkpointing."""

  steps: int = 1000
  batch_size: int = 32  # global batch, in sequences
  seq_len: int = 128
  grad_accum: int = 1  # microbatches per step (batch_size must divide)
  lr: float = 1e-3
  warmup_steps: int = 100
  min_lr_ratio: float = 0.1  # cosine decays to this fraction of lr (Pythia: 10%)
  b1: float = 0.9
  b2: float = 0.95
  eps: float = 1e-8
  weight_decay: float = 0.1  # applied to matrices only
  clip: float = 1.0
  seed: int = 0  # parameter init
  data_seed: int = 0  # data order
  eval_every: int = 100
  eval_batches: int = 4
  log_every: int = 10
  ckpt_every: int = 1000  # after the log-spaced steps 0,1,2,4,..,512
  ckpt_log_spaced: bool = True
  keep_every_n: int = 1  # keep all checkpoints by default (analysis needs them)
  async_checkpoint: bool = False
  freeze_trunk: bool = False  # train only the head (Godey E5)
  init_from: str = ""  # a workdir whose latest (or init_step) params initialise the trunk
  init_step: int = -1
  skip_nonfinite_steps: int = 0
  # sampled: -log q(next token); expected: the Rao-Blackwellised loss against a planted
  # language's exact P(.|context) (sbjax.train.objective)
  objective: str = "sampled"

  def __post_init__(self):
    if self.objective not in TRAIN_OBJECTIVES:
      raise _err("train.objective", self.objective, " | ".join(TRAIN_OBJECTIVES))
    for f in ("steps", "batch_size", "seq_len", "grad_accum", "eval_every", "log_every",
              "ckpt_every", "eval_batches", "keep_every_n"):
      v = getattr(self, f)
      if not isinstance(v, int) or v < 1:
        raise _err(f"train.{f}", v, "an integer >= 1")
    if self.batch_size % self.grad_accum:
      raise _err("train.grad_accum", self.grad_accum,
                 f"a divisor of train.batch_size={self.batch_size}")
    # NaN passes every comparison: each float is checked to be a finite number first
    if not (_finite(self.lr) and self.lr > 0):
      raise _err("train.lr", self.lr, "a finite number > 0")
    for f in ("b1", "b2"):
      if not (_finite(getattr(self, f)) and 0.0 <= getattr(self, f) < 1.0):
        raise _err(f"train.{f}", getattr(self, f), "a number in [0, 1)")
    if not (_finite(self.eps) and self.eps > 0):
      raise _err("train.eps", self.eps, "a finite number > 0")
    if not (_finite(self.weight_decay) and self.weight_decay >= 0):
      raise _err("train.weight_decay", self.weight_decay, "a finite number >= 0")
    if not (_finite(self.clip) and self.clip > 0):
      raise _err("train.clip", self.clip, "a finite number > 0 (the global gradient-norm bound)")
    if self.warmup_steps < 0:
      raise _err("train.warmup_steps", self.warmup_steps, ">= 0")
    if not 0.0 <= self.min_lr_ratio <= 1.0:
      raise _err("train.min_lr_ratio", self.min_lr_ratio, "0.0 .. 1.0")
    if self.freeze_trunk and not self.init_from:
      raise _err("train.init_from", self.init_from,
                 "a trained workdir when train.freeze_trunk=True")
    if self.skip_nonfinite_steps < 0:
      raise _err("train.skip_nonfinite_steps", self.skip_nonfinite_steps, ">= 0")


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """Device mesh sizes for the named axes; -1 fills from the device count."""

  data: int = -1
  fsdp: int = 1
  tensor: int = 1


@dataclasses.dataclass(frozen=True)
class Config:
  # a factory, not an instance: building a ModelConfig loads the head kinds (jax, flax) to
  # validate it, which importing this module must not do
  model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
  data: DataConfig = DataConfig()
  train: TrainConfig = TrainConfig()
  mesh: MeshConfig = MeshConfig()
  name: str = "run"

  def __post_init__(self):
    if self.train.seq_len > self.model.max_len:
      raise _err("train.seq_len", self.train.seq_len,
                 f"<= model.max_len={self.model.max_len}")
    if self.train.objective == "expected" and not data_sources.get(self.data.source).planted:
      raise _err("train.objective", self.train.objective,
                 "sampled when data.source is not a planted language (expected needs the "
                 f"exact next-token distributions; data.source={self.data.source!r})")

  @classmethod
  def from_dict(cls, d: dict) -> "Config":
    """A Config from its JSON form (config.json), also the flat form of earlier versions
    (``sbjax.config_legacy``); missing fields take their defaults."""
    d = config_legacy.typed(d)
    parts = {}
    for name, sub in (("model", ModelConfig), ("data", DataConfig), ("train", TrainConfig),
                      ("mesh", MeshConfig)):
      vals = dict(d.pop(name, {}) or {})
      known = {f.name for f in dataclasses.fields(sub)}
      unknown = sorted(set(vals) - known)
      if unknown:
        raise ValueError(f"unknown config keys in '{name}': {unknown}; known: {sorted(known)}")
      parts[name] = sub(**vals)
    unknown = sorted(set(d) - {"name"})
    if unknown:
      raise ValueError(f"unknown top-level config keys: {unknown}")
    return cls(**parts, **d)

  def to_dict(self) -> dict:
    """The JSON form (config.json): the head as {"kind": name, field: value, ...}, the data as
    {"source": name, "options": {field: value, ...}}."""
    d = dataclasses.asdict(self)
    d["model"]["head"] = self.model.head.to_dict()
    d["data"]["options"] = self.data.options.to_dict()
    return json.loads(json.dumps(d))

  def replace(self, **sections) -> "Config":
    return dataclasses.replace(self, **sections)
