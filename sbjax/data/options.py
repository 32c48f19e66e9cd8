"""The typed options of the data sources: one frozen dataclass per source, ``DataConfig.options``.

``SourceOptions`` is the base: a subclass names its ``source``, holds exactly the fields that
source reads, declares what each allows (``sbjax.errors.bounded``, checked as
``data.options.F``) and checks what spans fields in ``check``. The planted options'
``stream_params`` key the sampled token streams (``sampler``, host or device, changes how
train batches are drawn, not the streams). Plain Python (no jax, no numpy), so
``sbjax.config`` can validate with it.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from sbjax.errors import SEED_MAX, bounded, check_fields, config_error

PLANTED_GATES = ("uniform", "dirichlet")  # gate of source=planted_mos
TOKEN_DTYPES = ("uint16", "int32", "uint32", "int64", "int16", "uint8")


@dataclasses.dataclass(frozen=True)
class SourceOptions:
  """Base of the sources' own fields (none here); a subclass is a frozen dataclass that
  sets ``source``, declares its fields' bounds and checks what spans fields in ``check``."""

  source: ClassVar[str] = ""

  def __post_init__(self):
    check_fields(self, "data.options")
    self.check()

  def check(self) -> None:
    return None

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class PlantedOptions(SourceOptions):
  """The planted-rank language (``sbjax.data.planted.PlantedLanguage``)."""

  source: ClassVar[str] = "planted"
  vocab: int = bounded(256, lo=2)
  rank: int = bounded(8, lo=1)
  alpha: float = bounded(4.0, lo=0)
  zipf: float = bounded(1.0, lo=0)
  context: int = bounded(1, lo=1)  # context = the last n tokens
  seed: int = bounded(0, lo=0, hi=SEED_MAX)
  train_tokens: int = bounded(2_000_000, lo=0, note="0 = sampled on demand")
  val_tokens: int = bounded(65_536, lo=1)
  data_dir: str = ""  # folder of the stored streams (.npy); "" = WORKDIR/tokens
  # host: numpy batches (stored or streamed); device: fresh train batches drawn inside
  # the jitted step, pure in (seed, data seed, step) (sbjax.data.planted_device)
  sampler: str = bounded("host", choices=("host", "device"))

  def check(self) -> None:
    if self.rank > self.vocab:
      raise config_error("data.options.rank", self.rank, f"1 .. vocab={self.vocab}")
    if self.sampler == "device" and self.train_tokens != 0:
      raise config_error("data.options.train_tokens", self.train_tokens,
                         "0 with data.options.sampler=device (fresh tokens every step, no "
                         "stored train stream)")

  def language_kwargs(self) -> dict:
    """The keyword arguments of the language's constructor: the fields but those of storing and
    drawing the streams (``mix`` is its ``n_mix``)."""
    kw = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
          if f.name not in ("train_tokens", "val_tokens", "data_dir", "sampler")}
    if "mix" in kw:
      kw["n_mix"] = kw.pop("mix")
    return kw

  def stream_params(self) -> dict:
    """What determines the token streams (the key of their caches, ``sbjax.data.dataset``)."""
    floats = {f.name for f in dataclasses.fields(self) if f.type == "float"}
    kw = {k: float(v) if k in floats else v for k, v in self.language_kwargs().items()}
    return {"kind": self.source, "n_mix": 1, **kw, "train_tokens": self.train_tokens,
            "val_tokens": self.val_tokens}


@dataclasses.dataclass(frozen=True)
class PlantedMixOptions(PlantedOptions):
  """A mixture of ``mix`` planted softmaxes (``sbjax.data.planted.PlantedMixture``)."""

  source: ClassVar[str] = "planted_mix"
  mix: int = bounded(4, lo=1)


@dataclasses.dataclass(frozen=True)
class PlantedMosOptions(PlantedMixOptions):
  """A shared-W mixture of softmaxes (``sbjax.data.planted_mos.PlantedMoS``): gates uniform,
  or Dir(``gate_conc``) per context."""

  source: ClassVar[str] = "planted_mos"
  gate: str = bounded("uniform", choices=PLANTED_GATES)
  gate_conc: float = bounded(1.0, gt=0)


@dataclasses.dataclass(frozen=True)
class PlantedTailOptions(PlantedMixOptions):
  """The planted mixture at the rare-token tail's sizes (``sbjax.data.planted_tail``); a change
  of ``data.source`` to it keeps the planted fields already set (``sbjax.overrides``)."""

  source: ClassVar[str] = "planted_tail"
  vocab: int = 4096
  rank: int = 32
  zipf: float = 1.5
  mix: int = 8


@dataclasses.dataclass(frozen=True)
class TokenizerOptions(SourceOptions):
  """The fields of the text sources: their tokenizer and validation split."""

  tokenizer: str = ""  # an existing sentencepiece .model or HF tokenizer.json; "" = train one
  tokenizer_type: str = bounded("unigram", choices=("unigram", "bpe"))
  vocab_size: int = bounded(1024, lo=8)  # tokenizer vocab
  val_fraction: float = bounded(0.1, gt=0.0, lt=1.0)  # fraction of documents held out
  # text: the folder of the token caches ("" = WORKDIR/tokens); tfds: the TFDS data_dir
  data_dir: str = ""


@dataclasses.dataclass(frozen=True)
class TextOptions(TokenizerOptions):
  """A directory of UTF-8 .txt files."""

  source: ClassVar[str] = "text"
  path: str = ""

  def check(self) -> None:
    if not self.path:
      raise config_error("data.options.path", self.path,
                         "a directory of .txt files when data.source=text")


@dataclasses.dataclass(frozen=True)
class TfdsOptions(TokenizerOptions):
  """A TFDS catalog dataset (``lm1b``, ``tiny_shakespeare``, ...), prepared in ``data_dir``."""

  source: ClassVar[str] = "tfds"
  name: str = ""
  text_key: str = "text"
  max_docs: int = bounded(0, lo=0, note="0 = all")  # documents read per split

  def check(self) -> None:
    if not self.name:
      raise config_error("data.options.name", self.name,
                         "a TFDS dataset name when data.source=tfds")


@dataclasses.dataclass(frozen=True)
class TokensOptions(SourceOptions):
  """Token files on disk (``sbjax.data.tokens``): an integer .npy [n, T+1] / [N], or a flat
  .bin whose item type its name (``x.uint16.bin``) or ``dtype`` declares."""

  source: ClassVar[str] = "tokens"
  path: str = ""
  val_path: str = ""  # "" = hold out the last val_fraction of the windows
  # item type of a flat .bin file; "" = the one its name declares (x.uint16.bin)
  dtype: str = bounded("", choices=("",) + TOKEN_DTYPES)
  vocab: int = bounded(0, lo=0, note="0 = the largest id + 1")  # else ids lie in [0, vocab)
  val_fraction: float = bounded(0.1, gt=0.0, lt=1.0)

  def check(self) -> None:
    if not self.path:
      raise config_error("data.options.path", self.path, "an integer .npy [n, T+1] or a flat "
                         "token .bin when data.source=tokens")
