"""TFDS builders (array_record, no TensorFlow needed) and TFDS catalog readers.

* ``LocalText`` (``local_text``): a directory of ``.txt`` files (policy in ``sbjax.data.text``),
  one example per document ``{"index", "name", "text"}`` in splits ``train`` and
  ``validation``. The builder config is ``<dirname>_<hash>`` where the hash covers every file's
  path, size and content and ``val_fraction``: a changed corpus is prepared anew.
* ``PlantedRank`` (``planted_rank``): the train/validation token streams sampled from a
  planted language (``sbjax.data.planted``), stored as chunks ``{"index", "tokens"}``; the
  config name is a hash of all planted parameters and token counts.
* ``read_catalog``: any TFDS catalog dataset already prepared in array_record format in a data
  dir (``lm1b``, ``c4/en``, ``tiny_shakespeare``, ...), read by ``tfds.data_source``.

Text is stored in TFDS; tokenisation happens afterwards (``sbjax.data.dataset``) with the
run's tokenizer into cached ``.npy`` streams, so one prepared corpus serves any tokenizer.

TF-free path: ``GeneratorBasedBuilder`` with ``file_format="array_record"``, a ``DatasetInfo``
built directly (not ``dataset_info_from_configs``, which wants package metadata files),
``disable_shuffling=True`` (examples keep generation order; the ``index`` feature makes order
explicit anyway), read back with ``builder.as_data_source(split)``. Nothing here imports
TensorFlow (checked in tests/test_data_tfds.py). Preparing calls
``tfds.disable_progress_bar()`` (a TFDS-global setting).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow_datasets as tfds

from sbjax.atomic import is_local
from sbjax.data import sources
from sbjax.data.text import DataError, TextCorpus, scan_text_dir, slug, split_documents
from sbjax.paths import upath

log = logging.getLogger(__name__)

SPLITS = ("train", "validation")
PLANTED_CHUNK = 1 << 16  # tokens per planted_rank example
# _NO_CODE_PATH: the builders download nothing, so they have no checksums file. TFDS looks for
# one next to the builder's code (``code_path``), which for a class inside a package goes
# through ``importlib_resources`` (not a TFDS dependency, absent here); ``code_path = None``
# skips the lookup.


def _text(v: Any) -> str:
  if isinstance(v, bytes):
    return v.decode("utf-8", errors="replace")
  if isinstance(v, np.ndarray):
    return _text(v.item())
  return str(v)


def _read_all(source, key: str | None = None, limit: int = 0) -> list:
  n = len(source) if not limit else min(limit, len(source))
  out = []
  step = 1024
  for s in range(0, n, step):
    idx = list(range(s, min(n, s + step)))
    try:
      recs = source.__getitems__(idx)
    except (AttributeError, TypeError):  # no batched read (e.g. under tfds.testing.mock_data)
      recs = [source[i] for i in idx]
    out.extend(recs if key is None else [r[key] for r in recs])
  return out


class _LocalInfo(tfds.core.DatasetInfo):
  """The DatasetInfo of a dataset that TFDS's GCS bucket never holds. TFDS calls
  ``initialize_from_bucket`` whenever a builder opens a data dir with no info yet, and its
  version makes an empty temp folder ("tmp…tfds") before it finds nothing to fetch, and leaves
  it: one per new data dir. Here there is nothing to fetch and no folder is made."""

  def initialize_from_bucket(self) -> None:
    return None


def _prepare(builder: tfds.core.DatasetBuilder) -> None:
  tfds.disable_progress_bar()
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(try_download_gcs=False))


# ---------------------------------------------------------------------------- local_text


@dataclasses.dataclass(eq=False)
class LocalTextConfig(tfds.core.BuilderConfig):
  path: str = ""
  val_fraction: float = 0.1
  corpus: TextCorpus | None = dataclasses.field(default=None, repr=False)


class LocalText(tfds.core.GeneratorBasedBuilder):
  """A directory of .txt files; one example per document."""

  VERSION = tfds.core.Version("1.0.0")
  code_path = None  # no checksums file; see _NO_CODE_PATH
  RELEASE_NOTES = {"1.0.0": "Documents of a local directory, split by a hash of the path."}

  def _info(self) -> tfds.core.DatasetInfo:
    return _LocalInfo(
        builder=self,
        description=f"Text files of {self.builder_config.path}",
        features=tfds.features.FeaturesDict({
            "index": tfds.features.Scalar(dtype=np.int32),
            "name": tfds.features.Text(),
            "text": tfds.features.Text(),
        }),
        disable_shuffling=True,
    )

  def _split_generators(self, dl_manager):
    cfg = self.builder_config
    corpus = cfg.corpus or scan_text_dir(cfg.path)
    train, val = split_documents(corpus.docs, cfg.val_fraction)
    return {"train": self._generate_examples(train), "validation": self._generate_examples(val)}

  def _generate_examples(self, docs):
    for i, (name, text) in enumerate(docs):
      yield i, {"index": i, "name": name, "text": text}


def local_text_builder(path: str, val_fraction: float, data_dir: str,
                       corpus: TextCorpus | None = None) -> LocalText:
  """The builder of a text directory (``corpus``: its ``scan_text_dir``, when read already)."""
  corpus = corpus or scan_text_dir(path)
  key = hashlib.blake2b(f"{corpus.identity}|{val_fraction!r}".encode(), digest_size=6).hexdigest()
  base = Path(path).resolve().name if is_local(path) else upath(path).name  # gs://b/corpus
  name = f"{slug(base, 24)}_{key}"
  config = LocalTextConfig(name=name, path=str(path), val_fraction=float(val_fraction),
                           corpus=corpus, description=f"text files of {path}")
  return LocalText(config=config, data_dir=data_dir, file_format="array_record")


def prepare_local_text(path: str, val_fraction: float, data_dir: str,
                       corpus: TextCorpus | None = None, read: bool = True) -> dict:
  """Prepares (once) and reads a text directory: {"train": docs, "validation": docs, ...}.

  docs are lists of strings in document order; also returns "skipped" and "full_name".
  ``corpus``: the directory's ``scan_text_dir``, when the caller has read it already;
  ``read=False``: prepare only (no docs returned).
  """
  builder = local_text_builder(path, val_fraction, data_dir, corpus)
  _prepare(builder)
  out = {"full_name": builder.info.full_name,
         "skipped": list(builder.builder_config.corpus.skipped)}
  for split in SPLITS if read else ():
    recs = _read_all(builder.as_data_source(split=split))
    recs.sort(key=lambda r: int(r["index"]))
    out[split] = [_text(r["text"]) for r in recs]
    out[split + "_names"] = [_text(r["name"]) for r in recs]
  return out


# ---------------------------------------------------------------------------- planted_rank


@dataclasses.dataclass(eq=False)
class PlantedConfig(tfds.core.BuilderConfig):
  params: dict = dataclasses.field(default_factory=dict)


def language_of(params: dict):
  """The planted language of stream parameters (``SourceOptions.stream_params``): its source's
  ``language`` of the options they hold (``n_mix`` is the options' ``mix``)."""
  source = sources.get(params["kind"])
  names = {f.name for f in dataclasses.fields(source.options)}
  fields = {("mix" if k == "n_mix" else k): v for k, v in params.items() if k != "kind"}
  return source.language(source.options(**{k: v for k, v in fields.items() if k in names}))


def planted_streams(lang, params: dict) -> dict:
  """The train/validation token streams (int32) of a planted language; pure in params."""
  return {"train": lang.sample([params["seed"], 1], int(params["train_tokens"])),
          "validation": lang.sample([params["seed"], 2], int(params["val_tokens"]))}


class PlantedRank(tfds.core.GeneratorBasedBuilder):
  """Token streams sampled from a planted-rank language (or mixture), in chunks."""

  VERSION = tfds.core.Version("1.0.0")
  code_path = None  # no checksums file; see _NO_CODE_PATH
  RELEASE_NOTES = {"1.0.0": "Planted-rank Markov language streams."}

  def __init__(self, *, lang=None, **kwargs):
    self._lang = lang
    super().__init__(**kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    return _LocalInfo(
        builder=self,
        description=f"planted language {self.builder_config.params}",
        features=tfds.features.FeaturesDict({
            "index": tfds.features.Scalar(dtype=np.int32),
            "tokens": tfds.features.Tensor(shape=(None,), dtype=np.int32),
        }),
        disable_shuffling=True,
    )

  def _split_generators(self, dl_manager):
    p = self.builder_config.params
    lang = self._lang or language_of(p)
    streams = planted_streams(lang, p)
    return {s: self._generate_examples(streams[s]) for s in SPLITS}

  def _generate_examples(self, stream):
    for i, s in enumerate(range(0, len(stream), PLANTED_CHUNK)):
      yield i, {"index": i, "tokens": np.asarray(stream[s:s + PLANTED_CHUNK], np.int32)}


def planted_builder(params: dict, data_dir: str, lang=None) -> PlantedRank:
  key = hashlib.blake2b(repr(sorted(params.items())).encode(), digest_size=6).hexdigest()
  name = f"{params['kind']}_v{params['vocab']}_r{params['rank']}_{key}"
  return PlantedRank(config=PlantedConfig(name=name, params=dict(params)), lang=lang,
                     data_dir=data_dir, file_format="array_record")


def prepare_planted(params: dict, data_dir: str, lang=None) -> dict:
  """Prepares (once) and reads the planted streams: {"train": int32[N], "validation": ...}."""
  builder = planted_builder(params, data_dir, lang)
  _prepare(builder)
  out = {"full_name": builder.info.full_name}
  for split in SPLITS:
    recs = _read_all(builder.as_data_source(split=split))
    recs.sort(key=lambda r: int(r["index"]))
    out[split] = (np.concatenate([np.asarray(r["tokens"], np.int32) for r in recs])
                  if recs else np.zeros(0, np.int32))
  return out


# ---------------------------------------------------------------------------- TFDS catalog


def _source(name: str, split: str, data_dir: str | None):
  return tfds.data_source(name, split=split, data_dir=data_dir or None, download=False)


def read_catalog(name: str, data_dir: str | None, text_key: str = "text",
                 val_fraction: float = 0.1, max_docs: int = 0) -> dict:
  """Documents of a TFDS catalog dataset prepared (array_record) in ``data_dir``.

  Validation is the ``validation`` split, else ``test``; if neither exists, ``train`` is split
  by document like a text directory (``sbjax.data.text.split_documents``).
  ``max_docs > 0`` reads at most that many documents per split (the first ones).
  """
  try:
    train_src = _source(name, "train", data_dir)
  except Exception as e:  # noqa: BLE001 - TFDS raises many kinds; re-raise with context
    first = (str(e).strip().splitlines() or [""])[0][:300].rstrip(".: ")
    raise DataError(
        f"cannot open TFDS dataset {name!r} (split 'train') in data_dir="
        f"{data_dir or 'the TFDS default'}: {type(e).__name__}: {first}. Prepare it first in "
        f"array_record format, e.g. `tfds build {name} --file_format=array_record "
        "--data_dir=...`, and set data.options.data_dir") from e
  val_src, val_split = None, None
  for split in ("validation", "test"):
    try:
      val_src, val_split = _source(name, split, data_dir), split
      break
    except Exception:  # noqa: BLE001 - an absent split
      continue
  train_n = len(train_src)
  try:
    train = [_text(t) for t in _read_all(train_src, text_key, max_docs)]
  except KeyError as e:
    raise DataError(f"TFDS dataset {name!r} has no feature {text_key!r} "
                    "(data.options.text_key)") from e
  if val_src is None:
    if not train:
      raise DataError(f"TFDS dataset {name!r} split 'train' is empty")
    tr, va = split_documents([(f"{i:012d}", t) for i, t in enumerate(train)], val_fraction)
    train, val = [t for _, t in tr], [t for _, t in va]
    val_split = f"train (val_fraction={val_fraction} of the documents)"
  else:
    val = [_text(t) for t in _read_all(val_src, text_key, max_docs)]
  info = getattr(train_src, "dataset_info", None)
  full_name = getattr(info, "full_name", None) or name
  return {"train": train, "validation": val, "val_split": val_split, "full_name": full_name,
          "n_train_docs_available": train_n}
