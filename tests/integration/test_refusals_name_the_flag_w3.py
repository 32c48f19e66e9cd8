"""The last messages that named one command's option for every command, and a tokenizer
copied into the workdir before the data checks (session 19, W3):

* ``sbjax.train.resolve_vocab`` said ``--config.model.vocab_size`` to an experiment (which has
  no ``--config``); the workdir tokenizer's size mismatch said ``data.vocab_size`` (a field
  that is ``data.options.vocab_size``, spelled ``--preset`` in an experiment): both ask
  ``sbjax.errors.option`` now;
* ``data.options.tokenizer`` (a sentencepiece model or a ``tokenizer.json``) was copied into
  the workdir before the data checks: a refused call left the copy. It is written with the
  other files now, after the checks;
* the series modes of collapse and saturation take their data as ``--data.KEY`` (analyze's
  flags) but their corpus messages named the config field: they name ``--data.path`` now."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from jax.sharding import AbstractMesh

from sbjax import errors
from sbjax import sharding as shd
from sbjax.cli.data_flags import OPTION_NAMES
from sbjax.config import DataConfig
from sbjax.data import DataError, hf_tokenizer, make_dataset
from sbjax.data import tokenizer as tok_lib
from sbjax.studies.corpus import text_corpus
from sbjax.data.tokens import window_starts
from sbjax.train import resolve_vocab
from sbjax.train.workdir import check_not_past
from tests._corpus import generated_docs, write_corpus
from tests._tiny import tiny_run_config
from tests.integration.test_refusals_name_the_flag import cli, error_line, tree

# (the names a command gives, or None for a library call; how it spells model.vocab_size and
# data.options.vocab_size)
COMMANDS = [(None, "model.vocab_size", "data.options.vocab_size"),
            ({"*": "--config."}, "--config.model.vocab_size",
             "--config.data.options.vocab_size"),  # train
            (OPTION_NAMES, "model.vocab_size", "--data.vocab_size"),  # analyze, series modes
            ({}, "model.vocab_size", "--preset")]  # an experiment (text_corpus names --data)


def _within(names):
  return errors.option_names(names) if names is not None else contextlib.nullcontext()


def test_the_vocabulary_messages_name_the_option_of_the_command(tmp_path):
  """A model vocabulary below the data's, and a workdir tokenizer of another size than asked
  for: each message spells the setting as the command that was called takes it, and no
  experiment is told of ``--config`` (it has none), nor anyone of ``data.vocab_size``."""
  cfg = tiny_run_config()
  small = cfg.replace(model=dataclasses.replace(cfg.model, vocab_size=48))
  docs = generated_docs(4, 6)
  tok = tok_lib.train_tokenizer(docs, out_path=tmp_path / "tokenizer.model", vocab_size=120)
  for names, model_flag, vocab_flag in COMMANDS:
    with _within(names):
      if names == {}:
        text_corpus(tmp_path)  # an experiment's --data: from here on --data / --preset
      with pytest.raises(ValueError) as e:
        resolve_vocab(small, 64)
      assert str(e.value).endswith(f"vocabulary (64 tokens); set {model_flag}=64 or 0")
      with pytest.raises(ValueError) as e:
        tok_lib.load_or_train(tmp_path, lambda: docs, vocab_size=64, model_type="unigram")
      assert str(e.value) == (
          f"{tok.path} has 120 pieces but the vocabulary size asked for is 64: set the "
          f"vocabulary size to 120 ({vocab_flag}), or delete the tokenizer to train a new one")
    if names == {}:
      assert "--config" not in str(e.value)


def test_the_train_settings_messages_say_config_to_train_only(tmp_path):
  """Messages that told every caller to set ``--config.KEY`` (train's flags): train still
  reads ``--config.KEY``; an experiment or a library call, which have no ``--config``, read
  the config field (each the independent spelling of the field by hand)."""
  mc = dataclasses.replace(tiny_run_config().model, vocab_size=50)
  calls = [  # (the call, what its message says, {p}: where the command's prefix goes)
      (lambda: shd.check_divisible(mc, AbstractMesh((1, 1, 8), shd.AXES), 8),
       "pad the vocabulary to 56 ({p}model.vocab_size=56)"),
      (lambda: shd.check_divisible(mc, AbstractMesh((2, 2, 1), shd.AXES), 6),
       "use a batch that is a multiple of 4 ({p}train.batch_size)"),
      (lambda: check_not_past(tmp_path, 3, 2), "to continue it pass {p}train.steps >= 3"),
      (lambda: window_starts(np.zeros((2, 5), np.int32), 8), "Use {p}train.seq_len=4 or less")]
  for names, prefix in ((None, ""), ({}, ""), ({"*": "--config."}, "--config.")):
    for call, said in calls:
      with _within(names), pytest.raises(ValueError) as e:
        call()
      assert said.format(p=prefix) in str(e.value), str(e.value)
      assert ("--config" in str(e.value)) == bool(prefix), str(e.value)


def _copy_source(tmp_path: Path, kind: str, docs) -> tuple[str, list[str]]:
  """A tokenizer given by data.options.tokenizer (outside the workdir), and the names of the
  files it becomes in the workdir."""
  if kind == "sentencepiece":
    src = tok_lib.train_tokenizer(docs, out_path=tmp_path / "given" / "sp.model", vocab_size=64)
    return src.path, ["tokenizer.model", "tokenizer.vocab"]
  src = hf_tokenizer.train_bpe(docs, tmp_path / "given" / "tokenizer.json", vocab_size=300)
  return src.path, ["tokenizer.json"]


@pytest.mark.parametrize("kind", ["sentencepiece", "tokenizer.json"])
def test_a_given_tokenizer_is_copied_only_after_the_data_checks(tmp_path, kind):
  """A corpus shorter than one batch with ``data.options.tokenizer`` set: refused, and the
  workdir holds nothing (the tokenizer used to be copied first). A batch it makes: the
  tokenizer is copied, byte for byte (a sentencepiece model with its own .vocab)."""
  docs = generated_docs(0, 4, n_lines=8)
  corpus = write_corpus(tmp_path / "corpus", docs)
  src, names = _copy_source(tmp_path, kind, docs)
  cfg = DataConfig(source="text", options=dict(path=str(corpus), vocab_size=64, tokenizer=src))
  before = tree(tmp_path)
  with pytest.raises(DataError, match="fewer than one global batch of 64"):
    make_dataset(cfg, seq_len=128, global_batch_size=64, workdir=str(tmp_path / "wd"))
  assert tree(tmp_path) == before
  ds = make_dataset(cfg, seq_len=8, global_batch_size=2, workdir=str(tmp_path / "wd"))
  wd = tmp_path / "wd"
  assert ds.tokenizer_path == str(wd / names[0])
  for name, src_file in zip(names, (Path(src), Path(src).with_suffix(".vocab"))):
    assert (wd / name).read_bytes() == src_file.read_bytes(), name


@pytest.mark.e2e  # starts CLI processes (the e2e layer; tests/conftest.py)
@pytest.mark.parametrize("experiment", ["collapse", "saturation"])
def test_a_series_mode_names_its_data_path_flag(experiment, tiny_run, tmp_path):
  """A series mode's text data on a folder with no .txt: it takes ``--data.path`` (analyze's
  flag), and says so (it said ``data.options.path``); nothing written, the run unchanged."""
  empty = tmp_path / "empty"
  empty.mkdir()
  before, run_before = tree(tmp_path), tree(tiny_run)
  r = cli(f"experiments.{experiment}", f"--series={tiny_run}", f"--out={tmp_path}/out",
          "--data.source=text", f"--data.path={empty}")
  assert error_line(r) == (f"error: text corpus directory has no .txt files: {empty}; put "
                           "UTF-8 .txt files there or set --data.path to another directory")
  assert tree(tmp_path) == before and tree(tiny_run) == run_before
