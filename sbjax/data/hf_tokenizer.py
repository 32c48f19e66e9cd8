"""Hugging Face ``tokenizers`` files (``tokenizer.json``) beside sentencepiece.

``data.tokenizer=path/to/tokenizer.json`` (e.g. the GPT-NeoX-20B tokenizer of Pythia, or
GPT-Neo's) tokenises a text corpus with that tokenizer: ``load_or_train`` copies it to
``WORKDIR/tokenizer.json`` and ``HFTokenizer`` gives the interface of
``sbjax.data.tokenizer.Tokenizer`` (``vocab_size``, ``separator_id``, ``encode``,
``decode``, ``serialized``), so packing, caching and batching are unchanged.

* ``vocab_size`` = ``get_vocab_size(with_added_tokens=True)``: every id the tokenizer can
  emit is below it (Pythia: 50277 ids for a 50304-row embedding; the extra rows are padding).
* ``separator_id``: the id joining documents, the first of ``<|endoftext|>``, ``</s>``,
  ``<eos>``, ``<|end_of_text|>`` present, else the first special added token, else 0.
* ``encode`` adds no special tokens (the separator is added by the packer).

``train_bpe`` trains a byte-level BPE ``tokenizer.json`` on local text (the tests' way to
get a GPT-NeoX-like tokenizer without a hub); deterministic for a given input.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
from tokenizers import Tokenizer as _HFTok
from tokenizers import decoders, models, pre_tokenizers, trainers

JSON_NAME = "tokenizer.json"
EOS_NAMES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>")


def is_hf_tokenizer(path: str | os.PathLike) -> bool:
  return str(path).endswith(".json")


class HFTokenizer:
  """A loaded ``tokenizer.json`` with the interface of ``sbjax.data.tokenizer.Tokenizer``."""

  def __init__(self, path: str | os.PathLike):
    self.path = str(path)
    if not Path(self.path).is_file():
      raise FileNotFoundError(f"tokenizer.json not found: {self.path}")
    try:
      self.tok = _HFTok.from_file(self.path)
    except Exception as e:  # noqa: BLE001 - the tokenizers library raises its own exception type
      raise ValueError(f"{self.path} is not a Hugging Face tokenizers file: {e}") from None

  @property
  def vocab_size(self) -> int:
    return int(self.tok.get_vocab_size(with_added_tokens=True))

  @property
  def separator_id(self) -> int:
    for name in EOS_NAMES:
      i = self.tok.token_to_id(name)
      if i is not None:
        return int(i)
    special = [a for a in self.tok.get_added_tokens_decoder().items() if a[1].special]
    return int(min(special)[0]) if special else 0

  @property
  def eos_id(self) -> int:
    return self.separator_id

  def encode(self, text: str | Sequence[str], num_threads: int = -1):
    del num_threads
    if isinstance(text, str):
      return self.tok.encode(text, add_special_tokens=False).ids
    return [e.ids for e in self.tok.encode_batch(list(text), add_special_tokens=False)]

  def decode(self, ids) -> str:
    if isinstance(ids, np.ndarray):
      ids = ids.tolist()
    return self.tok.decode(list(ids), skip_special_tokens=False)

  def id_to_piece(self, i: int) -> str:
    return self.tok.id_to_token(int(i))

  def serialized(self) -> bytes:
    return Path(self.path).read_bytes()


def train_bpe(texts: Iterable[str], out_path: str | os.PathLike, vocab_size: int,
              eos: str = "<|endoftext|>") -> HFTokenizer:
  """A byte-level BPE tokenizer.json (GPT-2/NeoX style, ``eos`` = id 0) trained on ``texts``."""
  tok = _HFTok(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=int(vocab_size), special_tokens=[eos],
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tok.train_from_iterator(list(texts), trainer=trainer)
  out_path = Path(out_path)
  out_path.parent.mkdir(parents=True, exist_ok=True)
  tmp = out_path.with_name(out_path.name + f".tmp{os.getpid()}")
  tok.save(str(tmp))
  os.replace(tmp, out_path)
  return HFTokenizer(out_path)


def copy_into(src: str | os.PathLike, workdir: str | os.PathLike) -> HFTokenizer:
  """``WORKDIR/tokenizer.json``: reloaded if present (resume), else copied from ``src``."""
  path = Path(workdir) / JSON_NAME
  if not path.is_file():
    source = Path(src)
    if not source.is_file():
      raise FileNotFoundError(f"data.tokenizer={src!r}: no such tokenizer.json")
    HFTokenizer(source)  # a readable tokenizer before anything is written
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_bytes(source.read_bytes())
    os.replace(tmp, path)
  return HFTokenizer(path)
