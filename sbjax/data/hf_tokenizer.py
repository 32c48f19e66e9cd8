"""Hugging Face ``tokenizers`` files (``tokenizer.json``) beside sentencepiece.

``data.options.tokenizer=path/to/tokenizer.json`` (e.g. Pythia's GPT-NeoX-20B tokenizer)
tokenises a text corpus with that tokenizer: ``load_or_train`` copies it to
``WORKDIR/tokenizer.json``, and ``HFTokenizer`` has the interface of
``sbjax.data.tokenizer.Tokenizer``. Its ``vocab_size`` counts the added tokens (every id it
can emit is below it); ``separator_id`` is the first of ``EOS_NAMES`` present, else the first
special added token, else 0; ``encode`` adds no special tokens (the packer adds the
separator).

``export_tokenizer`` writes a run's tokenizer for transformers (``--to_hf``): its
``tokenizer.json`` (or one built from its sentencepiece unigram model) and a
``tokenizer_config.json``, so ``AutoTokenizer.from_pretrained(DIR)`` gives the ids sbjax
trained on. ``train_bpe`` trains a byte-level BPE ``tokenizer.json`` on local text
(deterministic; a GPT-NeoX-like tokenizer without a hub).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Iterable, Sequence

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as sp_pb
from tokenizers import AddedToken, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as _HFTok

from sbjax.atomic import atomic_path, atomic_write_bytes, atomic_write_text

log = logging.getLogger("sbjax")
JSON_NAME = "tokenizer.json"
EOS_NAMES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>")


class HFTokenizer:
  """A loaded ``tokenizer.json`` with the interface of ``sbjax.data.tokenizer.Tokenizer``:
  the file ``path``, or (``source``) the file ``source`` read for ``path``, where ``save``
  copies it."""

  def __init__(self, path: str | os.PathLike, source: str | os.PathLike | None = None):
    self.path, self._source = str(path), (None if source is None else str(source))
    read = self._source or self.path
    if not Path(read).is_file():
      raise FileNotFoundError(f"tokenizer.json not found: {read} (data.options.tokenizer)")
    try:
      self.tok = _HFTok.from_file(read)
    except Exception as e:  # noqa: BLE001 - the tokenizers library raises its own exception type
      raise ValueError(f"{read} is not a Hugging Face tokenizers file: {e}") from None

  def save(self) -> "HFTokenizer":
    """Copy a tokenizer read from ``source`` to ``path``, atomically (else nothing to do)."""
    if self._source is not None:
      atomic_write_bytes(self.path, Path(self._source).read_bytes())
      self._source = None
    return self

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

  def encode(self, text: str | Sequence[str]):
    if isinstance(text, str):
      return self.tok.encode(text, add_special_tokens=False).ids
    return [e.ids for e in self.tok.encode_batch(list(text), add_special_tokens=False)]

  def decode(self, ids) -> str:
    return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)

  def serialized(self) -> bytes:
    return Path(self._source or self.path).read_bytes()


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
  with atomic_path(out_path) as tmp:
    tok.save(str(tmp))
  return HFTokenizer(out_path)


def copy_into(src: str | os.PathLike, workdir: str | os.PathLike,
              save: bool = True) -> HFTokenizer:
  """``WORKDIR/tokenizer.json``: reloaded if present (resume), else copied from ``src`` (a
  readable tokenizer before anything is written; ``save=False``: read from ``src``, and
  copied when the caller's checks have passed, by its ``save``)."""
  path = Path(workdir) / JSON_NAME
  if path.is_file():
    return HFTokenizer(path)
  tok = HFTokenizer(path, source=src)
  return tok.save() if save else tok


def from_sentencepiece(model_path: str | os.PathLike) -> _HFTok:
  """A tokenizers ``Tokenizer`` equal to an sbjax sentencepiece UNIGRAM model
  (``sbjax.data.tokenizer``: identity normaliser, no dummy prefix, ``"\\n"`` a user symbol,
  unk=0, eos=1): the same pieces and scores in a Unigram model, ``▁`` for spaces with a
  split before each (sentencepiece's split_by_whitespace), ``"\\n"`` an added token.
  ValueError for a BPE model (its merges are not stored in the .model file)."""
  proto = sp_pb.ModelProto()
  proto.ParseFromString(Path(model_path).read_bytes())
  sp = spm.SentencePieceProcessor(model_file=str(model_path))
  pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
  if proto.trainer_spec.model_type != sp_pb.TrainerSpec.UNIGRAM:
    raise ValueError(f"{model_path}: not a sentencepiece unigram model; only unigram models "
                     "are converted to tokenizer.json")
  tok = _HFTok(models.Unigram(pieces, sp.unk_id(), False))
  tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never",
                                               split=True)
  tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never", split=True)
  tok.add_tokens([AddedToken("\n", normalized=False, special=False)])
  tok.add_special_tokens([AddedToken(sp.id_to_piece(sp.eos_id()), special=True)])
  return tok


def export_tokenizer(workdir: str | os.PathLike, out_dir: str | os.PathLike,
                     max_len: int) -> str | None:
  """Write OUT/tokenizer.json + tokenizer_config.json for the run's tokenizer (WORKDIR/
  tokenizer.json, or tokenizer.model converted); returns the kind, None if the run has none."""
  wd, out = Path(workdir), Path(out_dir)
  if (wd / JSON_NAME).is_file():
    tok, kind = HFTokenizer(wd / JSON_NAME), "tokenizer.json"
    raw = tok.tok
  elif (wd / "tokenizer.model").is_file():
    try:
      raw, kind = from_sentencepiece(wd / "tokenizer.model"), "sentencepiece unigram"
    except ValueError as e:
      log.warning("the run's tokenizer is not exported (%s); the weights are", e)
      return None
  else:
    return None
  with atomic_path(out / JSON_NAME) as tmp:  # a link there is replaced, never written through
    raw.save(str(tmp))
  eos = HFTokenizer(out / JSON_NAME)
  sep = eos.tok.id_to_token(eos.separator_id)
  conf = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": int(max_len),
          "eos_token": sep, "unk_token": eos.tok.id_to_token(0), "clean_up_tokenization_spaces":
          False, "add_bos_token": False, "add_eos_token": False}
  atomic_write_text(out / "tokenizer_config.json", json.dumps(conf, indent=2))
  return kind
