"""SentencePiece tokenizers: train (deterministically), save, reload, encode, decode.

The trained models round-trip text exactly for characters seen in training: the normaliser is
``identity``, extra whitespace is kept, there is no dummy ``▁`` prefix, and ``"\\n"`` is a
user-defined piece, so documents keep their line structure. Training reads lines (one
"sentence" each) from the given texts, capped at ``input_sentence_size`` lines (taken in
order: no sampling, so the model is a pure function of the input and the options), with
``num_threads=1`` and ``shuffle_input_sentence=False``: the same input gives the same model.

Special ids: ``unk=0``, ``eos=1`` (the document separator in packed streams); no bos/pad.
The vocabulary size is exact (``hard_vocab_limit``); a vocabulary too large for the corpus
raises ``ValueError`` naming the largest size sentencepiece would accept.
"""

from __future__ import annotations

import collections
import io
import itertools
import logging
import os
import re
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import sentencepiece as spm

from sbjax.atomic import atomic_write_bytes, atomic_write_text
from sbjax.data import hf_tokenizer
from sbjax.paths import local_file

log = logging.getLogger(__name__)

MODEL_NAME = "tokenizer.model"
NEWLINE = "\n"
MAX_SENTENCE_BYTES = 1 << 14


class Tokenizer:
  """A loaded sentencepiece model: the file ``path``, or (``model``: its bytes) a model held in
  memory until ``save`` writes it to ``path`` (with ``vocab``, the bytes of its ``.vocab``
  file, when given: a copied model keeps its own)."""

  def __init__(self, path: str | os.PathLike, model: bytes | None = None,
               vocab: bytes | None = None):
    self.path, self._model, self._vocab = str(path), model, vocab
    if model is not None:
      self.sp = spm.SentencePieceProcessor(model_proto=model)
      return
    if not Path(self.path).is_file():
      raise FileNotFoundError(f"sentencepiece model not found: {self.path}")
    self.sp = spm.SentencePieceProcessor(model_file=self.path)

  def save(self) -> "Tokenizer":
    """Write a model held in memory to ``path`` and its pieces to the ``.vocab`` next to it,
    atomically (a model read from its file: nothing to do)."""
    if self._model is not None:
      atomic_write_bytes(self.path, self._model)
      vocab_path = Path(self.path).with_suffix(".vocab")
      if self._vocab is not None:
        atomic_write_bytes(vocab_path, self._vocab)
      else:
        atomic_write_text(vocab_path, "".join(f"{piece}\t{score:g}\n"
                                              for piece, score in self.pieces()))
      self._model = self._vocab = None
    return self

  @property
  def vocab_size(self) -> int:
    return int(self.sp.get_piece_size())

  @property
  def separator_id(self) -> int:
    """Id that joins documents in a packed stream: eos, else bos, else pad, else unk."""
    for i in (self.sp.eos_id(), self.sp.bos_id(), self.sp.pad_id(), self.sp.unk_id()):
      if i >= 0:
        return int(i)
    return 0

  def encode(self, text: str | Sequence[str]):
    """Token ids (list of int, or a list of lists for a list of strings)."""
    if isinstance(text, str):
      return self.sp.encode(text)
    return self.sp.encode(list(text), num_threads=-1)

  def decode(self, ids) -> str:
    return self.sp.decode([int(i) for i in ids])

  def id_to_piece(self, i: int) -> str:
    return self.sp.id_to_piece(int(i))

  def pieces(self) -> list[tuple[str, float]]:
    return [(self.sp.id_to_piece(i), self.sp.get_score(i)) for i in range(self.vocab_size)]

  def serialized(self) -> bytes:
    return self._model if self._model is not None else Path(self.path).read_bytes()


# meta pieces of the trained models: unk, eos and the user-defined "\n"
N_META = 3
# the least share of the corpus's characters a vocabulary must cover (below it: "too small")
MIN_COVERAGE = 0.98


def _train_sp(sentences: Iterator[str], coverage: float, *, vocab_size: int, model_type: str,
              input_sentence_size: int) -> io.BytesIO:
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=sentences, model_writer=model, vocab_size=vocab_size,
      model_type=model_type, character_coverage=coverage,
      input_sentence_size=input_sentence_size, shuffle_input_sentence=False,
      num_threads=1, normalization_rule_name="identity", remove_extra_whitespaces=False,
      add_dummy_prefix=False, split_digits=False, user_defined_symbols=[NEWLINE],
      unk_id=0, eos_id=1, bos_id=-1, pad_id=-1, hard_vocab_limit=True,
      max_sentence_length=MAX_SENTENCE_BYTES, minloglevel=2,
      train_extremely_large_corpus=False)
  return model


def _vocab_error(vocab_size: int, msg: str) -> Exception:
  if "required_chars" in msg:
    m = re.search(r"(\d+) vs (\d+)", msg)
    need = f" ({m.group(2)} pieces needed)" if m else ""
    return ValueError(
        f"tokenizer vocab_size={vocab_size} is too small for this corpus's characters{need}: "
        f"use a larger vocabulary (data.options.vocab_size). sentencepiece said: "
        f"{msg.strip()}")
  if "Vocabulary size" in msg or "vocab_size" in msg:
    m = re.search(r"<=\s*(\d+)", msg)
    hint = f" (this corpus supports at most {m.group(1)})" if m else ""
    return ValueError(
        f"tokenizer vocab_size={vocab_size} is too large for this corpus{hint}: use more text "
        f"(data.options.path) or a smaller vocabulary "
        f"(data.options.vocab_size). sentencepiece said: {msg.strip()}")
  return RuntimeError(msg)


def _train_covering(lines: list, vocab_size: int, requested: float, opts: dict):
  """(model, coverage) with the most frequent characters that fit ``vocab_size`` (a few
  tries: sentencepiece's float32 coverage may admit one character more than asked)."""
  max_chars = int(vocab_size) - N_META - 1
  last = ""
  for _ in range(3):
    coverage = coverage_for(lines, max_chars, vocab_size, requested)
    try:
      return _train_sp(iter(lines), coverage, **opts), coverage
    except RuntimeError as e:
      last = str(e)
      m = re.search(r"(\d+) vs (\d+)", last)
      if "required_chars" not in last or not m:
        raise _vocab_error(vocab_size, last) from e
      max_chars -= max(1, int(m.group(2)) - int(m.group(1)))
  raise _vocab_error(vocab_size, last)


def coverage_for(lines: Sequence[str], max_chars: int, vocab_size: int,
                 requested: float = 1.0) -> float:
  """The character_coverage that makes sentencepiece keep the ``max_chars`` most frequent
  characters (spaces count as its ``▁``): it adds characters by decreasing count while the
  covered share is below the coverage, so a value between the shares of the top
  ``max_chars - 1`` and ``max_chars`` characters keeps exactly ``max_chars``. ValueError
  ("too small") when those cover less than ``MIN_COVERAGE`` of the corpus."""
  counts = collections.Counter()
  for line in lines:
    counts.update(line)
  total = sum(counts.values())
  cum = np.cumsum(sorted(counts.values(), reverse=True), dtype=np.float64) / max(total, 1)
  k = min(max_chars, len(cum))
  if k < 1 or cum[k - 1] < MIN_COVERAGE:
    covered = 0.0 if k < 1 else float(cum[k - 1])
    need = int(np.searchsorted(cum, MIN_COVERAGE) + 1) + N_META + 1
    raise ValueError(
        f"tokenizer vocab_size={vocab_size} is too small for this corpus: its {len(counts)} "
        f"distinct characters need at least {need} pieces to cover {MIN_COVERAGE:.0%} of the "
        f"text ({max(k, 0)} characters fit, covering {covered:.1%}); use a vocabulary of at least "
        f"{need} (data.options.vocab_size)")
  lo = float(cum[k - 2]) if k >= 2 else 0.0
  return min(requested, (lo + float(cum[k - 1])) / 2)


def train_tokenizer(texts: Iterable[str], *, out_path: str | os.PathLike, vocab_size: int,
                    model_type: str = "unigram", input_sentence_size: int = 300_000,
                    character_coverage: float = 1.0, save: bool = True) -> Tokenizer:
  """Trains a sentencepiece model on ``texts`` (strings) and saves it.

  Writes ``out_path`` (``.model``) and the matching ``.vocab`` next to it, atomically; with
  ``save=False`` nothing is written: the model stays in memory until ``Tokenizer.save``.
  Raises ``ValueError`` if the corpus is empty or cannot support ``vocab_size`` pieces.
  """
  out_path = Path(out_path)
  lines = []
  nonblank = (line for t in texts for line in t.split(NEWLINE) if line.strip())
  for line in itertools.islice(nonblank, input_sentence_size):
    # sentencepiece drops lines longer than max_sentence_length; cut them instead.
    while len(line.encode("utf-8")) > MAX_SENTENCE_BYTES:
      lines.append(line[:MAX_SENTENCE_BYTES // 4])
      line = line[MAX_SENTENCE_BYTES // 4:]
    lines.append(line)
  if not lines:  # a clear error rather than a sentencepiece abort
    raise ValueError(f"cannot train a tokenizer for {out_path}: the corpus has no text")
  opts = dict(vocab_size=int(vocab_size), model_type=model_type,
              input_sentence_size=int(input_sentence_size))
  try:
    model = _train_sp(iter(lines), character_coverage, **opts)
  except RuntimeError as e:
    msg = str(e)
    if "smaller than required_chars" not in msg:
      raise _vocab_error(vocab_size, msg) from e
    # the rarest characters do not fit: cover fewer (they become unk), never silently too few
    model, coverage = _train_covering(lines, vocab_size, character_coverage, opts)
    log.warning("tokenizer vocab_size=%d cannot hold every character of the corpus; trained "
                "with character_coverage=%.6f (the rarest characters map to unk)",
                vocab_size, coverage)
  tok = Tokenizer(out_path, model.getvalue())
  log.info("trained a %s tokenizer with %d pieces: %s", model_type, tok.vocab_size, out_path)
  return tok.save() if save else tok


def load_or_train(workdir: str | os.PathLike, texts_fn, *, vocab_size: int, model_type: str,
                  existing: str = "", save: bool = True) -> Tokenizer:
  """The tokenizer of a run: ``WORKDIR/tokenizer.model``.

  If it exists it is reloaded (resume is deterministic), and its size must equal
  ``vocab_size``. Else, if ``existing`` names a model, that model is copied into the workdir;
  else one is trained on ``texts_fn()`` (an iterable of strings). A ``gs://`` ``existing`` is
  read from its local copy (``sbjax.paths.local_file``). ``save=False``: a new tokenizer
  (trained, or read from ``existing``) stays in memory until its ``save`` writes it into the
  workdir (the caller checks the data first, so a refused call leaves nothing behind).
  """
  existing = local_file(existing) if existing else existing
  if str(existing).endswith(".json"):  # a tokenizer.json (HF tokenizers)
    return hf_tokenizer.copy_into(existing, workdir, save=save)
  path = Path(workdir) / MODEL_NAME
  if path.is_file():
    tok = Tokenizer(path)
    if not existing and tok.vocab_size != vocab_size:
      raise ValueError(
          f"{path} has {tok.vocab_size} pieces but the vocabulary size asked for is "
          f"{vocab_size}: set the vocabulary size to {tok.vocab_size} "
          f"(data.options.vocab_size), or delete the tokenizer to train a new one")
    return tok
  if existing:
    tok = _read_existing(existing, path, vocab_size)
    return tok.save() if save else tok
  return train_tokenizer(texts_fn(), out_path=path, vocab_size=vocab_size, model_type=model_type,
                         save=save)


def _read_existing(existing: str, path: Path, vocab_size: int) -> Tokenizer:
  """The sentencepiece model ``existing`` (and its ``.vocab``, if any), held in memory for
  ``path``."""
  src = Path(existing)
  if not src.is_file():
    raise FileNotFoundError(f"data.options.tokenizer={existing!r}: no such "
                            "sentencepiece model")
  vocab = src.with_suffix(".vocab")
  tok = Tokenizer(path, model=src.read_bytes(),
                  vocab=vocab.read_bytes() if vocab.is_file() else None)
  if tok.vocab_size != vocab_size:
    log.warning("data.options.tokenizer has %d pieces; the vocabulary size %d "
                "(data.options.vocab_size) is ignored", tok.vocab_size, vocab_size)
  return tok
