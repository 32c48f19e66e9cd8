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

import io
import logging
import os
import re
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import sentencepiece as spm

log = logging.getLogger(__name__)

MODEL_NAME = "tokenizer.model"
NEWLINE = "\n"
MAX_SENTENCE_BYTES = 1 << 14


class Tokenizer:
  """A loaded sentencepiece model."""

  def __init__(self, path: str | os.PathLike):
    self.path = str(path)
    if not Path(self.path).is_file():
      raise FileNotFoundError(f"sentencepiece model not found: {self.path}")
    self.sp = spm.SentencePieceProcessor(model_file=self.path)

  @property
  def vocab_size(self) -> int:
    return int(self.sp.get_piece_size())

  @property
  def eos_id(self) -> int:
    return int(self.sp.eos_id())

  @property
  def separator_id(self) -> int:
    """Id that joins documents in a packed stream: eos, else bos, else pad, else unk."""
    for i in (self.sp.eos_id(), self.sp.bos_id(), self.sp.pad_id(), self.sp.unk_id()):
      if i >= 0:
        return int(i)
    return 0

  def encode(self, text: str | Sequence[str], num_threads: int = -1):
    """Token ids (list of int, or a list of lists for a list of strings)."""
    if isinstance(text, str):
      return self.sp.encode(text)
    return self.sp.encode(list(text), num_threads=num_threads)

  def decode(self, ids) -> str:
    if isinstance(ids, np.ndarray):
      ids = ids.tolist()
    return self.sp.decode(ids)

  def id_to_piece(self, i: int) -> str:
    return self.sp.id_to_piece(int(i))

  def pieces(self) -> list[tuple[str, float]]:
    return [(self.sp.id_to_piece(i), self.sp.get_score(i)) for i in range(self.vocab_size)]

  def serialized(self) -> bytes:
    return Path(self.path).read_bytes()


def _lines(texts: Iterable[str]) -> Iterator[str]:
  for t in texts:
    for line in t.split(NEWLINE):
      if line.strip():
        yield line


def _read_files(files: Iterable[str | os.PathLike]) -> Iterator[str]:
  for f in files:
    yield Path(f).read_text(encoding="utf-8")


def train_tokenizer(texts: Iterable[str] | None = None, *, files: Sequence[str | os.PathLike] = (),
                    out_path: str | os.PathLike, vocab_size: int,
                    model_type: str = "unigram", input_sentence_size: int = 300_000,
                    character_coverage: float = 1.0) -> Tokenizer:
  """Trains a sentencepiece model on ``texts`` (strings) and/or ``files`` and saves it.

  Writes ``out_path`` (``.model``) and the matching ``.vocab`` next to it, atomically.
  Raises ``ValueError`` if the corpus is empty or cannot support ``vocab_size`` pieces.
  """
  if model_type not in ("unigram", "bpe"):
    raise ValueError(f"tokenizer model_type must be unigram or bpe, got {model_type!r}")
  out_path = Path(out_path)
  sources: list[Iterable[str]] = []
  if texts is not None:
    sources.append(texts)
  if files:
    sources.append(_read_files(files))

  def sentences() -> Iterator[str]:
    n = 0
    for src in sources:
      for line in _lines(src):
        if n >= input_sentence_size:
          return
        # sentencepiece drops lines longer than max_sentence_length; cut them instead.
        while len(line.encode("utf-8")) > MAX_SENTENCE_BYTES:
          yield line[:MAX_SENTENCE_BYTES // 4]
          line = line[MAX_SENTENCE_BYTES // 4:]
        yield line
        n += 1

  # Peek so an empty corpus gives a clear error rather than a sentencepiece abort.
  it = sentences()
  first = next(it, None)
  if first is None:
    raise ValueError(f"cannot train a tokenizer for {out_path}: the corpus has no text")

  def chained() -> Iterator[str]:
    yield first
    yield from it

  model = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=chained(), model_writer=model, vocab_size=int(vocab_size),
        model_type=model_type, character_coverage=character_coverage,
        input_sentence_size=int(input_sentence_size), shuffle_input_sentence=False,
        num_threads=1, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=False, split_digits=False, user_defined_symbols=[NEWLINE],
        unk_id=0, eos_id=1, bos_id=-1, pad_id=-1, hard_vocab_limit=True,
        max_sentence_length=MAX_SENTENCE_BYTES, minloglevel=2,
        train_extremely_large_corpus=False)
  except RuntimeError as e:
    msg = str(e)
    m = re.search(r"<=\s*(\d+)", msg)
    if "Vocabulary size" in msg or "vocab_size" in msg:
      hint = f" (this corpus supports at most {m.group(1)})" if m else ""
      raise ValueError(
          f"tokenizer vocab_size={vocab_size} is too large for this corpus{hint}: set a smaller "
          f"data.vocab_size or use more text. sentencepiece said: {msg.strip()}") from e
    raise
  out_path.parent.mkdir(parents=True, exist_ok=True)
  tmp = out_path.with_name(out_path.name + f".tmp{os.getpid()}")
  tmp.write_bytes(model.getvalue())
  os.replace(tmp, out_path)
  tok = Tokenizer(out_path)
  vocab_file = out_path.with_suffix(".vocab")
  tmpv = vocab_file.with_name(vocab_file.name + f".tmp{os.getpid()}")
  with open(tmpv, "w", encoding="utf-8") as f:
    for piece, score in tok.pieces():
      f.write(f"{piece}\t{score:g}\n")
  os.replace(tmpv, vocab_file)
  log.info("trained a %s tokenizer with %d pieces: %s", model_type, tok.vocab_size, out_path)
  return tok


def load_or_train(workdir: str | os.PathLike, texts_fn, *, vocab_size: int, model_type: str,
                  existing: str = "") -> Tokenizer:
  """The tokenizer of a run: ``WORKDIR/tokenizer.model``.

  If it exists it is reloaded (resume is deterministic), and its size must equal
  ``vocab_size``. Else, if ``existing`` names a model, that model is copied into the workdir;
  else one is trained on ``texts_fn()`` (an iterable of strings).
  """
  path = Path(workdir) / MODEL_NAME
  if path.is_file():
    tok = Tokenizer(path)
    if not existing and tok.vocab_size != vocab_size:
      raise ValueError(
          f"{path} has {tok.vocab_size} pieces but data.vocab_size={vocab_size}: use "
          f"data.vocab_size={tok.vocab_size}, or delete the tokenizer to train a new one")
    return tok
  if existing:
    src = Path(existing)
    if not src.is_file():
      raise FileNotFoundError(f"data.tokenizer={existing!r}: no such sentencepiece model")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_bytes(src.read_bytes())
    os.replace(tmp, path)
    vocab = src.with_suffix(".vocab")
    if vocab.is_file():
      path.with_suffix(".vocab").write_bytes(vocab.read_bytes())
    tok = Tokenizer(path)
    if tok.vocab_size != vocab_size:
      log.warning("data.tokenizer has %d pieces (data.vocab_size=%d is ignored)",
                  tok.vocab_size, vocab_size)
    return tok
  return train_tokenizer(texts_fn(), out_path=path, vocab_size=vocab_size, model_type=model_type)
