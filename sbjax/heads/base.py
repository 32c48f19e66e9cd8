"""The head registry: one ``HeadKind`` object per kind of LM head, found by file.

Every module of the ``sbjax.heads`` package (other than this one and names starting with
``_``) defines one head kind and registers it with ``register(Kind())`` at import; the package
is scanned on the first look-up, so a new head is one new file plus its tests. A head module
imports only this module, ``sbjax.errors``, ``sbjax.precision``, jax and flax (``sbjax.config``
validates through the registry; annotate with ``ModelConfig`` under ``TYPE_CHECKING``). This
module is plain Python, so ``sbjax.config`` can import it.

A head's hyper-parameters are its own frozen ``HeadConfig`` dataclass (``HeadKind.config``,
e.g. ``LowRankHead(rank=8)``, JSON ``{"kind": "lowrank", "rank": 8, "init": "scaled"}``), whose
fields declare their bounds (``sbjax.errors.bounded``); ``head_config`` builds one.

A ``HeadKind`` answers, for a ``ModelConfig`` ``cfg`` whose head is of its kind:

- ``module(cfg)``: its flax module (named ``"head"``), or None when it owns no parameters;
- ``scores(params, h, cfg)``: h (…×d) -> scores (…×V) with ``log_softmax(scores)`` the
  model's log-probabilities (logits, or normalised log-probs for mos);
- ``factors(params, h, cfg)``: (x, M) with scores = x·Mᵀ, for the chunked losses, or None;
- ``matrix(params, cfg)``: the effective V×d matrix W whose rank limits the logits;
- ``param_count(cfg)``; ``flop_params(cfg)``: the multiply-adds per token of the scores'
  matmuls (default ``param_count``: every parameter used once per token in one matmul);
- ``param_keys``: the top-level parameter keys that are the head (trained in frozen-trunk
  mode); ``leaf_specs``: the sharding of its leaves under ``params["head"]`` (mesh axes);
- ``validate(cfg)``: the checks against the model (e.g. rank <= d_model); ``rank(cfg)``;
- Hugging Face: ``hf_tied`` (True: ``tie_word_embeddings``; False: a separate V×d head
  tensor; None: no HF equivalent), ``hf_imports`` (an HF checkpoint with that tying imports as
  this kind), ``hf_weight`` (the V×d tensor written on export), ``hf_params`` (on import).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import pkgutil
from typing import Any, ClassVar

from sbjax.errors import check_fields, config_error

HEAD_KEY = "head"  # the top-level parameter key of a head module's parameters

_KINDS: dict[str, "HeadKind"] = {}
_scanned = False


@dataclasses.dataclass(frozen=True)
class HeadConfig:
  """Base of the head kinds' configs: a subclass is a frozen dataclass that sets ``kind`` to
  its kind's name and declares its fields' bounds (checked as ``model.head.FIELD``)."""

  kind: ClassVar[str] = ""

  def __post_init__(self):
    check_fields(self, "model.head")

  def to_dict(self) -> dict:
    """The JSON form: {"kind": name, field: value, ...}."""
    return {"kind": self.kind, **dataclasses.asdict(self)}


class HeadKind:
  """Base of the head kinds; a subclass overrides what differs from a dense matrix head."""

  name: str = ""
  description: str = "this head"  # for messages, e.g. "a mixture-of-softmaxes head"
  order: int = 100  # place in listings and error messages (dense | tied | lowrank | mos)
  param_keys: tuple = (HEAD_KEY,)
  leaf_specs: dict = {}
  config: type = HeadConfig  # the kind's own HeadConfig dataclass
  hf_tied: bool | None = None
  hf_imports: bool = False
  # True: log-probs = log_softmax(x·Mᵀ) with M of rank ``rank(cfg)``, so the exact rank-r
  # floor (sbjax.studies.floor) bounds its loss; False for heads that break the bottleneck
  rank_limited: bool = True

  def module(self, cfg):
    raise NotImplementedError(f"head kind {self.name!r} defines no module")

  def scores(self, params, h, cfg):
    return self.module(cfg).apply({"params": params[HEAD_KEY]}, h)

  def factors(self, params, h, cfg):
    return None

  def matrix(self, params, cfg):
    raise NotImplementedError(f"head kind {self.name!r} defines no matrix")

  def param_count(self, cfg) -> int:
    raise NotImplementedError(f"head kind {self.name!r} defines no param_count")

  def flop_params(self, cfg) -> int:
    return self.param_count(cfg)

  def validate(self, cfg) -> None:
    return None

  def rank(self, cfg) -> int:
    return cfg.d_model

  def hf_problem(self, cfg) -> str | None:
    """Why a model with this head cannot be exported to Hugging Face (None: it can)."""
    if self.hf_tied is not None:
      return None
    ok = [k.name for k in kinds() if k.hf_tied is not None]
    return (f"model.head={self.name!r}: {self.description} has no Hugging Face "
            f"GPT-NeoX/GPT-Neo equivalent (only {', '.join(ok[:-1])} and {ok[-1]} heads export)")

  def hf_weight(self, params, cfg):
    return None if self.hf_tied else self.matrix(params, cfg)

  def hf_params(self, w_VxD, cfg) -> dict:
    raise ValueError(f"a Hugging Face head does not import as model.head={self.name!r}")


def register(kind: HeadKind) -> HeadKind:
  """Add a head kind (a module-level call in its file). Re-registering a name replaces it."""
  _KINDS[kind.name] = kind
  return kind


def unregister(name: str) -> None:
  _KINDS.pop(name, None)


def _scan() -> None:
  """Import every head module of this package once (each registers its kind)."""
  global _scanned
  if _scanned:
    return
  _scanned = True
  pkg = __name__.rsplit(".", 1)[0]
  for m in pkgutil.iter_modules([os.path.dirname(__file__)]):
    if m.name != "base" and not m.name.startswith("_"):
      importlib.import_module(f"{pkg}.{m.name}")  # plugin discovery, on the first look-up


def kinds() -> list[HeadKind]:
  _scan()
  return sorted(_KINDS.values(), key=lambda k: (k.order, k.name))


def names() -> tuple[str, ...]:
  """The registered head names, in listing order."""
  return tuple(k.name for k in kinds())


def get(name: "str | HeadConfig") -> HeadKind:
  """The head kind called ``name`` (or of a head config); the known kinds listed otherwise."""
  _scan()
  if isinstance(name, HeadConfig):
    name = name.kind
  if name not in _KINDS:
    raise config_error("model.head", name, " | ".join(names()))
  return _KINDS[name]


def head_config(spec: Any, **fields) -> HeadConfig:
  """A typed head config from a kind name (its defaults), a ``{"kind": name, ...}`` dict or a
  ``HeadConfig``, with ``fields`` replaced; a clear error names an unknown kind or field."""
  if isinstance(spec, HeadConfig):
    spec = spec.to_dict()
  if isinstance(spec, str):
    spec = {"kind": spec}
  if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str):
    raise config_error("model.head", spec, 'a head kind name, or a dict with its "kind", e.g. '
                       '{"kind": "lowrank", "rank": 8}')
  spec = {**spec, **fields}
  kind = get(spec.pop("kind"))
  known = [f.name for f in dataclasses.fields(kind.config)]
  unknown = sorted(set(spec) - set(known))
  if unknown:
    raise config_error(f"model.head.{unknown[0]}", spec[unknown[0]],
                       f"the fields of a {kind.name} head: {' | '.join(known) or 'none'}")
  return kind.config(**spec)


def validate(cfg) -> None:
  """``cfg.head`` is a registered kind and its fields are valid for it."""
  get(cfg.head).validate(cfg)


def for_hf(tied: bool) -> HeadKind:
  """The head kind an HF checkpoint imports as: tied or untied (``tie_word_embeddings``)."""
  return next(k for k in kinds() if k.hf_imports and k.hf_tied is tied)


def leaf_spec(leaf: str):
  """The sharding (tuple of mesh axes, or () for replicated) of a head leaf named ``leaf``;
  None when no head kind has such a leaf. Kinds that share a leaf name must agree."""
  specs = {(k.name, k.leaf_specs[leaf]) for k in kinds() if leaf in k.leaf_specs}
  if len({s for _, s in specs}) > 1:
    raise ValueError(f"head kinds disagree on the sharding of head leaf {leaf!r}: "
                     f"{sorted(specs)}; give the leaf another name in one of them")
  return next(iter(specs))[1] if specs else None
