"""Typed, validated configuration: model, head, data and training.

Frozen dataclasses whose fields declare their bounds (``sbjax.errors.bounded``); the named
configs are in ``sbjax.configs``, dotted overrides in ``sbjax.overrides``. ``Config.to_dict``
is the JSON of ``WORKDIR/config.json``; ``Config.from_dict`` reads it back (also the flat files
of earlier versions: ``sbjax.config_legacy``).
"""

from __future__ import annotations

import dataclasses
import json

from sbjax import config_legacy
from sbjax.data import sources as data_sources
from sbjax.data.sources import SourceOptions
from sbjax.errors import STEP_MAX, SEED_MAX, bounded, check_fields, config_error
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


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """A decoder-only transformer (GPT-NeoX/Pythia or GPT-Neo style)."""

  vocab_size: int = bounded(256, lo=0, note="0 = take it from the data")  # tokenizer or planted language
  d_model: int = bounded(64, lo=1)
  n_layers: int = bounded(2, lo=1)
  n_heads: int = bounded(4, lo=1)
  d_ff: int = bounded(0, lo=0, note="0 = 4 * d_model")
  max_len: int = bounded(256, lo=1)
  # positions
  pos: str = bounded("rotary", choices=POS_KINDS)  # "rotary" (Pythia) or "learned" (GPT-Neo)
  rotary_pct: float = bounded(0.25, lo=0.0, hi=1.0)
  rotary_base: float = bounded(10000.0, gt=0)
  # block
  parallel_residual: bool = True  # GPT-NeoX/Pythia: x + attn(ln1 x) + mlp(ln2 x)
  ln_eps: float = bounded(1e-5, gt=0)
  gelu: str = bounded("exact", choices=GELU_KINDS)  # "exact" (erf, Pythia), "tanh" (gelu_new, GPT-Neo)
  qkv_bias: bool = True  # GPT-Neo has no q/k/v bias
  attn_scale: bool = True  # GPT-Neo does not scale scores by 1/sqrt(head_dim)
  attention_layers: tuple = ()  # per layer "global"/"local"; () = all global
  window_size: int = bounded(256, lo=1)  # local attention window (GPT-Neo)
  # a config of a head kind registered in sbjax.heads, e.g. LowRankHead(rank=8); a kind name
  # or a {"kind": ...} dict is turned into one (sbjax.heads.head_config)
  head: HeadConfig | str | dict = "dense"
  # numerics / memory
  init_std: float = bounded(0.02, lo=0)
  param_dtype: str = bounded("float32", choices=DTYPES)
  dtype: str = bounded("float32", choices=DTYPES)  # compute; softmax and loss are float32
  remat: str = bounded("none", choices=REMAT_KINDS)
  # precision of every dot/einsum of the model, heads, losses and attention (sbjax.precision):
  # "auto" = highest for float32 compute (TF32 on a GPU / one bf16 pass on a TPU otherwise),
  # the backend default for bf16; or highest | high | default
  matmul_precision: str = bounded("auto", choices=MATMUL_PRECISIONS)
  scan_layers: bool = False
  # attention core (sbjax.attention): "dpa" = jax.nn.dot_product_attention, "einsum" = the
  # plain reference, "cudnn" (GPU), "splash" (the Pallas TPU kernel); "auto" picks by backend
  attn_impl: str = bounded("auto", choices=ATTN_IMPLS)
  # tokens per chunk of the training/eval cross-entropy (sbjax.losses): the B·T×V logits
  # are never formed at once; 0 = off (full logits). Same loss and gradients either way.
  loss_chunk: int = bounded(0, lo=0, note="0 = off; else tokens per chunk, e.g. 1024")

  def __post_init__(self):
    if isinstance(self.attention_layers, list):
      object.__setattr__(self, "attention_layers", tuple(self.attention_layers))
    if not isinstance(self.head, head_registry.HeadConfig):
      object.__setattr__(self, "head", head_registry.head_config(self.head))
    check_fields(self, "model")
    if self.d_model % self.n_heads:
      raise _err("model.n_heads", self.n_heads, f"a divisor of model.d_model={self.d_model}")
    if self.pos == "rotary" and int(self.head_dim * self.rotary_pct) % 2:
      raise _err("model.rotary_pct", self.rotary_pct,
                 f"a fraction giving an even number of rotary dims of head_dim={self.head_dim}")
    head_registry.validate(self)  # a registered head kind, and its own fields (sbjax.heads)
    if self.attention_layers:
      if len(self.attention_layers) != self.n_layers or set(self.attention_layers) - set(
          ATTN_KINDS):
        raise _err("model.attention_layers", self.attention_layers, "empty or one of "
                   f"{' | '.join(ATTN_KINDS)} per layer (n_layers={self.n_layers})")
      if self.scan_layers and len(set(self.attention_layers)) > 1:
        raise _err("model.scan_layers", True, "False when attention_layers mixes global and local")

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
  """Where tokens come from: ``source`` names a source registered in sbjax.data.sources and
  ``options`` holds its own fields (a ``SourceOptions``, e.g. ``PlantedOptions(vocab=64,
  rank=4)``; a dict, or None for its defaults, is turned into it)."""

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

  steps: int = bounded(1000, lo=1, hi=STEP_MAX)
  batch_size: int = bounded(32, lo=1)  # global batch, in sequences
  seq_len: int = bounded(128, lo=1)
  grad_accum: int = bounded(1, lo=1)  # microbatches per step (batch_size must divide)
  lr: float = bounded(1e-3, gt=0)
  warmup_steps: int = bounded(100, lo=0, hi=STEP_MAX)
  # cosine decays to this fraction of lr (Pythia: 10%)
  min_lr_ratio: float = bounded(0.1, lo=0.0, hi=1.0)
  b1: float = bounded(0.9, lo=0.0, lt=1.0)
  b2: float = bounded(0.95, lo=0.0, lt=1.0)
  eps: float = bounded(1e-8, gt=0)
  weight_decay: float = bounded(0.1, lo=0)  # applied to matrices only
  clip: float = bounded(1.0, gt=0, note="the global gradient-norm bound")
  seed: int = bounded(0, lo=0, hi=SEED_MAX)  # parameter init
  data_seed: int = bounded(0, lo=0, hi=SEED_MAX)  # data order
  eval_every: int = bounded(100, lo=1)
  eval_batches: int = bounded(4, lo=1)
  log_every: int = bounded(10, lo=1)
  ckpt_every: int = bounded(1000, lo=1)  # after the log-spaced steps 0,1,2,4,..,512
  ckpt_log_spaced: bool = True
  keep_every_n: int = bounded(1, lo=1)  # keep all checkpoints by default (analysis needs them)
  async_checkpoint: bool = False
  freeze_trunk: bool = False  # train only the head (Godey E5)
  init_from: str = ""  # a workdir whose latest (or init_step) params initialise the trunk
  init_step: int = bounded(-1, lo=-1, hi=STEP_MAX, note="-1 = the latest step")
  skip_nonfinite_steps: int = bounded(0, lo=0)
  # sampled: -log q(next token); expected: the Rao-Blackwellised loss against a planted
  # language's exact P(.|context) (sbjax.train.objective)
  objective: str = bounded("sampled", choices=TRAIN_OBJECTIVES)

  def __post_init__(self):
    check_fields(self, "train")
    if self.batch_size % self.grad_accum:
      raise _err("train.grad_accum", self.grad_accum,
                 f"a divisor of train.batch_size={self.batch_size}")
    if self.freeze_trunk and not self.init_from:
      raise _err("train.init_from", self.init_from,
                 "a trained workdir when train.freeze_trunk=True")


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """Device mesh sizes for the named axes; -1 fills from the device count."""

  data: int = bounded(-1, lo=-1, note="-1 fills")
  fsdp: int = bounded(1, lo=-1, note="-1 fills")
  tensor: int = bounded(1, lo=-1, note="-1 fills")

  def __post_init__(self):
    check_fields(self, "mesh")
    sizes = (self.data, self.fsdp, self.tensor)
    if 0 in sizes or sizes.count(-1) > 1:
      raise _err("mesh", sizes, "(data, fsdp, tensor) sizes are >= 1 or -1, at most one -1")


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
