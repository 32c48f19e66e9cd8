"""Packing and deterministic, stateless batching; the Dataset of each built-in source.

Packing: each split is one token stream (documents joined by the separator id; planted
streams are continuous). Windows of ``seq_len + 1`` tokens start every ``seq_len`` tokens
(consecutive windows share one token, so every token after the first is a target exactly
once): ``n_windows = (n_tokens - 1) // seq_len``.

Order: global example ``j = i * B + b`` of train batch ``i`` is window
``perm_e[j % n_windows]`` with epoch ``e = j // n_windows`` and
``perm_e = np.random.default_rng([seed, e]).permutation(n_windows)``. Process ``p`` of ``P``
takes rows ``[p * B/P, (p + 1) * B/P)`` of the global batch. So ``train_batch(i)`` is a pure
function of ``(seed, i, process_index)``: resuming at step ``i`` needs no replay.

Evaluation: ``eval_batches(n)`` takes ``n * B`` validation windows evenly spaced over the
validation stream (independent of the data seed, identical on every call); if the split has
fewer windows than that, it cycles through them (with a warning).

The ``build_*`` functions are the built-in sources' builds (``sbjax.data.sources`` calls
them). Token streams made here (a planted language's samples, a corpus's tokens) are cached
as ``.npy`` files in ``data.options.data_dir``, else ``WORKDIR/tokens`` (``local_data_dir``),
keyed by what determines them; nothing is written before the checks that can be made have
passed. A planted source without a workdir or data_dir is sampled in memory.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np

from sbjax.atomic import is_local
from sbjax.data import catalog
from sbjax.data import planted_device
from sbjax.data import tokenizer as tokenizer_lib
from sbjax.data import tokens as tokens_source
from sbjax.data.text import (DataError, cached_array, encode_documents, scan_text_dir, slug,
                             split_documents)
from sbjax.paths import cache_root, upath

log = logging.getLogger(__name__)
SPLITS = ("train", "validation")
STREAM_TAG = 3  # the stored streams use 1 (train) and 2 (validation) in the same seed slot


def check_fits(name: str, streams: dict, seq_len: int, batch: int) -> None:
  """DataError when a split's stream (``streams``: split -> tokens) holds fewer than one
  global batch of windows."""
  for split, toks in streams.items():
    if (len(toks) - 1) // seq_len < batch:
      raise DataError(
          f"corpus {name!r}, split {split!r}: {len(toks)} tokens make "
          f"{max(0, (len(toks) - 1) // seq_len)} windows of seq_len+1={seq_len + 1}, fewer than "
          f"one global batch of {batch}; it needs at least {batch * seq_len + 1} tokens "
          "(batch_size*seq_len+1). Use a smaller train.batch_size or train.seq_len, or more "
          "text (for planted sources: more data.options.train_tokens/val_tokens)")


class Dataset:
  """Packed train/validation token streams with stateless, sharded batching. ``starts``: the
  (train, validation) window starts of token files (``sbjax.data.tokens``, whose reader has
  checked their ids), in place of windows every ``seq_len`` tokens; their evaluation windows
  are the first ``n * B`` in file order."""

  def __init__(self, train_tokens: np.ndarray, val_tokens: np.ndarray, *, seq_len: int,
               global_batch_size: int, seed: int = 0, process_index: int = 0,
               process_count: int = 1, vocab_size: int, name: str = "tokens",
               source: str = "tokens", tokenizer_path: str | None = None, planted=None,
               extra_info: dict | None = None, starts: tuple | None = None):
    if process_count < 1 or not 0 <= process_index < process_count:
      raise ValueError(
          f"process_index={process_index} must be in [0, process_count={process_count})")
    if global_batch_size % process_count:
      raise ValueError(f"global batch size {global_batch_size} is not divisible by the "
                       f"process count {process_count}")
    self.train_tokens = np.asarray(train_tokens).reshape(-1)
    self.val_tokens = np.asarray(val_tokens).reshape(-1)
    self.seq_len, self.global_batch_size = int(seq_len), int(global_batch_size)
    self.seed = int(seed)
    self.process_index, self.process_count = int(process_index), int(process_count)
    self.batch_size = self.global_batch_size // self.process_count
    self.vocab_size, self.name, self.source = int(vocab_size), name, source
    self.tokenizer_path, self.planted = tokenizer_path, planted
    self._extra = dict(extra_info or {})
    self._in_order = starts is not None
    if starts is None:
      streams = {"train": self.train_tokens, "validation": self.val_tokens}
      check_fits(name, streams, self.seq_len, self.global_batch_size)
      for split, toks in streams.items():
        if toks.size and (int(toks.max()) >= self.vocab_size or int(toks.min()) < 0):
          raise DataError(f"corpus {name!r}, split {split!r}: token ids outside [0, {vocab_size})")
      starts = [np.arange((len(t) - 1) // self.seq_len, dtype=np.int64) * self.seq_len
                for t in streams.values()]
    for split, st in zip(SPLITS, starts):
      if len(st) < global_batch_size:
        raise DataError(
            f"token data {name!r}, split {split!r}: {len(st)} windows of seq_len+1="
            f"{seq_len + 1} tokens, fewer than one global batch of {global_batch_size}. Use a "
            "smaller train.batch_size or train.seq_len, or more tokens")
    self._train_starts, self._val_starts = (np.asarray(st, np.int64) for st in starts)
    self.n_train_windows, self.n_val_windows = len(self._train_starts), len(self._val_starts)
    self._offsets = np.arange(self.seq_len + 1, dtype=np.int64)
    self._perm = functools.lru_cache(maxsize=4)(self._permutation)

  def _permutation(self, epoch: int) -> np.ndarray:
    return np.random.default_rng([self.seed, int(epoch)]).permutation(self.n_train_windows)

  def _gather(self, tokens: np.ndarray, starts: np.ndarray) -> np.ndarray:
    return tokens[starts[:, None] + self._offsets].astype(np.int32)

  def train_windows(self, i: int) -> np.ndarray:
    """Indices of the train windows of this process's slice of global batch ``i``."""
    if i < 0:
      raise ValueError(f"batch index must be >= 0, got {i}")
    j = (int(i) * self.global_batch_size + self.process_index * self.batch_size
         + np.arange(self.batch_size, dtype=np.int64))
    epoch, pos = np.divmod(j, self.n_train_windows)
    idx = np.empty_like(j)
    for e in np.unique(epoch):
      m = epoch == e
      idx[m] = self._perm(int(e))[pos[m]]
    return idx

  def train_batch(self, i: int) -> np.ndarray:
    """int32 [global_batch / process_count, seq_len + 1]; pure in (seed, i, process_index)."""
    return self._gather(self.train_tokens, self._train_starts[self.train_windows(i)])

  def eval_windows(self, n: int) -> np.ndarray:
    """Global validation window indices, [n, global_batch]: evenly spaced over the split (in
    file order for token files); cycling, with a warning, when it has fewer (the analysis
    refuses that: sbjax.analysis.samples)."""
    total = int(n) * self.global_batch_size
    repeat = total > self.n_val_windows
    if repeat:
      warnings.warn(f"{n} eval batches need {total} validation windows but the validation "
                    f"split of {self.name!r} has {self.n_val_windows}: windows repeat",
                    stacklevel=3)
    if repeat or self._in_order:
      idx = np.arange(total, dtype=np.int64) % self.n_val_windows
    else:
      idx = (np.arange(total, dtype=np.int64) * self.n_val_windows) // max(total, 1)
    return idx.reshape(int(n), self.global_batch_size)

  def eval_batches(self, n: int) -> list[np.ndarray]:
    """n fixed validation batches, int32 [global_batch / process_count, seq_len + 1] each."""
    lo = self.process_index * self.batch_size
    return [self._gather(self.val_tokens, self._val_starts[w[lo:lo + self.batch_size]])
            for w in self.eval_windows(n)]

  def info(self) -> dict[str, Any]:
    d = {"source": self.source, "name": self.name, "vocab_size": self.vocab_size,
         "n_train_tokens": int(len(self.train_tokens)), "n_val_tokens": int(len(self.val_tokens)),
         "n_train_windows": int(self.n_train_windows), "n_val_windows": int(self.n_val_windows),
         "seq_len": self.seq_len, "global_batch_size": self.global_batch_size,
         "process_batch_size": self.batch_size, "process_index": self.process_index,
         "process_count": self.process_count, "data_seed": self.seed,
         "steps_per_epoch": self.n_train_windows / self.global_batch_size,
         "tokenizer_path": self.tokenizer_path}
    d.update(self._extra)
    return d


class StreamingPlanted(Dataset):
  """A planted source with ``data.options.train_tokens = 0``: nothing stored, global train batch
  ``i`` is ``lang.sample(default_rng([planted_seed, STREAM_TAG, data_seed, i]), (B, T + 1))``,
  B independent chains each started from the stationary distribution (fresh tokens every
  step), pure in (seeds, i); every process samples the global batch and keeps its rows. The
  validation split is stored as usual."""

  def __init__(self, lang, val_tokens: np.ndarray, *, planted_seed: int, **kw):
    n = kw["global_batch_size"] * kw["seq_len"] + 1  # a placeholder for Dataset's checks
    super().__init__(np.zeros(n, np.int32), val_tokens, planted=lang, **kw)
    self.planted_seed = int(planted_seed)
    self._extra.update(streaming=True)

  def global_batch(self, i: int) -> np.ndarray:
    """int32 [global_batch, seq_len + 1]: global train batch ``i``."""
    rng = np.random.default_rng([self.planted_seed, STREAM_TAG, self.seed, int(i)])
    return self.planted.sample(rng, (self.global_batch_size, self.seq_len + 1))

  def train_batch(self, i: int) -> np.ndarray:
    """int32 [global_batch / process_count, seq_len + 1]; pure in (seeds, i)."""
    if i < 0:
      raise ValueError(f"batch index must be >= 0, got {i}")
    lo = self.process_index * self.batch_size
    return self.global_batch(i)[lo:lo + self.batch_size]

  def info(self) -> dict[str, Any]:
    d = super().info()
    d.update(n_train_tokens=None, n_train_windows=None, steps_per_epoch=None)
    return d


class DevicePlanted(StreamingPlanted):
  """A planted source with ``data.options.sampler = "device"``: train batches drawn inside the
  jitted step from device tables (``sbjax.data.planted_device``; the train loop asks
  ``device_tables``), pure in (planted_seed, data_seed, i). ``train_batch(i)`` copies that
  same batch to the host (for inspection); evaluation uses the host's validation tokens."""

  def __init__(self, lang, val_tokens: np.ndarray, *, planted_seed: int, **kw):
    super().__init__(lang, val_tokens, planted_seed=planted_seed, **kw)
    self._extra.update(sampler="device")
    self._tables = self._on_device = None

  def device_tables(self) -> planted_device.Tables:
    """The sampler's tables (numpy, built on first use, then kept; the train step puts them
    on its mesh once)."""
    if self._tables is None:
      self._tables = planted_device.tables(self.planted, self.planted_seed, self.seed)
    return self._tables

  def global_batch(self, i: int) -> np.ndarray:
    """int32 [global_batch, seq_len + 1]: the batch the device step draws at step ``i``."""
    if self._on_device is None:
      self._on_device = jax.device_put(self.device_tables())
    return np.asarray(_device_batch(self._on_device, np.uint32(i), self.global_batch_size,
                                    self.seq_len, self.planted.context))


_device_batch = jax.jit(planted_device.train_batch, static_argnums=(2, 3, 4))


def _hash(*parts) -> str:
  h = hashlib.blake2b(digest_size=8)
  for p in parts:
    h.update(p if isinstance(p, bytes) else repr(p).encode())
    h.update(b"\0")
  return h.hexdigest()


def local_data_dir(workdir) -> Path:
  """Where the data files of ``workdir`` (the tokenizer, token caches) live: in the workdir
  on local disk. A remote workdir (``gs://``) keeps them in a local cache keyed by its URL,
  ``$SBJAX_DATA_CACHE`` (default ``~/.cache/sbjax/data``) ``/<hash>``: sentencepiece and the
  memory-mapped token caches read and write local files only. They are rebuilt from the
  config when absent."""
  if is_local(workdir):
    return Path(workdir)
  root = cache_root()
  key = hashlib.sha256(os.fspath(upath(workdir)).encode()).hexdigest()[:16]
  d = Path(root) / key
  log.info("data files of the remote workdir %s: %s (local)", os.fspath(workdir), d)
  return d


def build_tokens(cfg, *, workdir=None, **common) -> Dataset:
  """``data.source=tokens``: token files on disk (sbjax.data.tokens)."""
  return Dataset(**tokens_source.open_token_splits(cfg.options, common["seq_len"],
                                                   common["global_batch_size"]), **common)


def _streams(paths: dict, make, check) -> dict:
  """The token streams of ``paths`` (split -> its ``.npy`` cache, or None: kept in memory):
  a cache read, else ``make(split)``; then ``check(streams)``, and only then are the new
  caches written."""
  cached = {s for s, p in paths.items() if p is not None and p.is_file()}
  streams = {s: cached_array(p, None) if s in cached else make(s) for s, p in paths.items()}
  check(streams)
  for s in paths.keys() - cached:
    if paths[s] is not None:
      cached_array(paths[s], lambda s=s: streams[s])
  return streams


def _cache_dir(data_dir: str, wd) -> Path:
  """Where a source's token streams are cached: ``data_dir``, else ``wd/tokens``."""
  return upath(data_dir) if data_dir else Path(wd) / "tokens"


def build_planted(cfg, lang, *, workdir=None, **common) -> Dataset:
  """A planted language ``lang`` (its source's ``language(options)``): the train and
  validation streams sampled from ``[seed, 1]`` and ``[seed, 2]``, cached when there is a
  workdir or data_dir; with ``data.options.train_tokens=0`` only the validation stream, and
  train batches on demand (``StreamingPlanted``, or ``planted_device``)."""
  o = cfg.options
  sizes = {"train": o.train_tokens, "validation": o.val_tokens}
  if not o.train_tokens:
    del sizes["train"]
  paths = dict.fromkeys(sizes)  # in memory, unless there is a folder to cache them in
  if workdir or o.data_dir:
    key = _hash(sorted(o.stream_params().items()))
    folder = _cache_dir(o.data_dir, workdir and local_data_dir(workdir))
    paths = {s: folder / f"{cfg.source}-{key}-{s}.npy" for s in sizes}
  how = "" if o.train_tokens else ", device" if o.sampler == "device" else ", streaming"
  name = f"{cfg.source}(v={o.vocab}, k={o.rank}, seed={o.seed}{how})"
  streams = _streams(paths, lambda s: lang.sample([o.seed, 1 if s == "train" else 2],
                                                  int(sizes[s])),
                     lambda st: check_fits(name, st, common["seq_len"],
                                           common["global_batch_size"]))
  kw = dict(vocab_size=o.vocab, source=cfg.source, name=name, **common,
            extra_info={"planted": lang.info(), "entropy_nats": lang.entropy})
  if o.train_tokens:
    return Dataset(streams["train"], streams["validation"], planted=lang, **kw)
  cls = DevicePlanted if o.sampler == "device" else StreamingPlanted
  return cls(lang, streams["validation"], planted_seed=o.seed, **kw)


def _text_dir_docs(o, wd: Path) -> tuple:
  """(documents, corpus key, name, info, cache folder) of ``data.source=text``: the corpus
  read and split by document (``sbjax.data.text``)."""
  corpus = scan_text_dir(o.path)
  train, val = split_documents(corpus.docs, float(o.val_fraction))
  docs = {"train": [text for _, text in train], "validation": [text for _, text in val]}
  extra = {"path": o.path, "skipped_files": list(corpus.skipped), "n_train_docs": len(train),
           "n_val_docs": len(val), "val_docs": [name for name, _ in val][:100]}
  folder = _cache_dir(o.data_dir, wd)
  return docs, (corpus.identity, float(o.val_fraction)), o.path, extra, folder


def _tfds_docs(o, wd: Path) -> tuple:
  """(documents, corpus key, name, info, cache folder) of ``data.source=tfds``, read from its
  TFDS data dir (``data.options.data_dir``)."""
  docs = catalog.read_catalog(o.name, o.data_dir or None, o.text_key, o.val_fraction,
                              o.max_docs)
  corpus_key = (docs["full_name"], o.data_dir, o.text_key, o.max_docs, docs["val_split"],
                len(docs["train"]), len(docs["validation"]))
  extra = {"tfds_name": docs["full_name"], "val_split": docs["val_split"],
           "n_train_docs": len(docs["train"]), "n_val_docs": len(docs["validation"])}
  return docs, corpus_key, o.name, extra, wd / "tokens"


def _build_text(cfg, documents, workdir, common) -> Dataset:
  """Documents, a tokenizer trained or loaded under ``workdir``, cached token streams.

  Nothing is written before every check that can be made has passed: the documents are read,
  the tokenizer trained (or the workdir's loaded) and the token streams encoded (or their
  caches loaded) in memory, a vocabulary too large for the corpus or streams shorter than one
  batch are refused, and only then are the tokenizer and the token caches written (a
  tokenizer named by data.options.tokenizer is copied into the workdir then too)."""
  wd = local_data_dir(workdir) if workdir else Path(tempfile.mkdtemp(prefix="sbjax_data_"))
  o = cfg.options
  docs, corpus_key, name, extra, folder = documents(o, wd)
  tok = tokenizer_lib.load_or_train(wd, lambda: docs["train"], vocab_size=o.vocab_size,
                                    model_type=o.tokenizer_type, existing=o.tokenizer,
                                    save=False)
  key = _hash(repr(corpus_key), tok.serialized())

  def check(streams):
    check_fits(name, streams, common["seq_len"], common["global_batch_size"])
    tok.save()  # trained, or read from data.options.tokenizer: written now

  streams = _streams({s: folder / f"{slug(name, 40)}-{key}-{s}.npy" for s in SPLITS},
                     lambda s: encode_documents(tok, docs[s]), check)
  return Dataset(streams["train"], streams["validation"], vocab_size=tok.vocab_size, name=name,
                 source=cfg.source, tokenizer_path=tok.path, extra_info=extra, **common)


def build_text_dir(cfg, *, workdir=None, **common) -> Dataset:
  """``data.source=text``: a directory of .txt files."""
  return _build_text(cfg, _text_dir_docs, workdir, common)


def build_tfds(cfg, *, workdir=None, **common) -> Dataset:
  """``data.source=tfds``: a catalog dataset."""
  return _build_text(cfg, _tfds_docs, workdir, common)
