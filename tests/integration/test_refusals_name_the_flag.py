"""Bad input is refused early, in one line that names the option of the command that was
called and what to write instead, and nothing is written:

* a corpus too small for the vocabulary, or for one batch, is refused before its TFDS dataset,
  its tokenizer or its token caches are written (``sbjax.data.dataset._build_text``: it used
  to write ``WORKDIR/tfds/...`` first);
* a list flag of numbers is typed when the command line is parsed
  (``sbjax.cli.number_flags.define_number_list``: ``--w_error_dims=abc`` said only
  ``invalid literal for int()``);
* a section given a plain value (``--config.data.options=path=DIR``) names the key and the
  fields to set (``sbjax.overrides``), and train without ``--config`` no longer ends in an
  AttributeError from ml_collections (``sbjax.configs.DEFINE_config``);
* the corpus messages name the flag of the command (``sbjax.errors.option``): ``--data`` in
  an experiment, ``--data.path`` in analyze, ``--config.data.options.path`` in train, and
  the config field itself in a library call."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from absl import flags

from sbjax import errors, overrides
from sbjax.cli.number_flags import define_number_list
from sbjax.config import Config, DataConfig
from sbjax.data import DataError, make_dataset
from sbjax.studies.corpus import text_corpus
from tests._corpus import generated_docs, write_corpus

ROOT = Path(__file__).resolve().parents[2]
ENV = {k: v for k, v in os.environ.items() if k != "SBJAX_DEBUG"} | {"JAX_PLATFORMS": "cpu"}


def tree(root: Path) -> dict:
  """Every path under ``root``: a file's sha256, a folder's "dir"."""
  return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
          if p.is_file() else "dir" for p in sorted(root.rglob("*"))}


def tiny_corpus(root: Path) -> Path:
  """Two documents over 3 characters: sentencepiece supports at most 8 pieces on them."""
  root.mkdir(parents=True)
  (root / "a.txt").write_text("ab ab ab\nba ab\n")
  (root / "b.txt").write_text("ab ba\nab\n")
  return root


def cli(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=ENV, capture_output=True,
                        text=True, timeout=300)


def error_line(r: subprocess.CompletedProcess) -> str:
  """The one ``error:`` line of a refused call (exit 2, no traceback)."""
  lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
  assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stderr[-3000:])
  assert "Traceback" not in r.stderr, r.stderr[-3000:]
  return lines[0]


def _text(path: Path, workdir: Path, vocab: int):
  cfg = DataConfig(source="text", options=dict(path=str(path), vocab_size=vocab))
  return make_dataset(cfg, seq_len=4, global_batch_size=1, workdir=str(workdir),
                      process_index=0, process_count=1)


def test_a_corpus_too_small_for_the_vocabulary_is_refused_before_anything_is_written(tmp_path):
  corpus = tiny_corpus(tmp_path / "corpus")
  keep = tmp_path / "keep"  # an existing workdir holding a file
  keep.mkdir()
  (keep / "notes.txt").write_text("mine\n")
  before = tree(tmp_path)
  for wd in (tmp_path / "fresh" / "data", keep):
    with pytest.raises(ValueError, match=r"vocab_size=96 is too large for this corpus \(this "
                                         r"corpus supports at most 8\): use more text "
                                         r"\(data\.options\.path\) or a smaller vocabulary "
                                         r"\(data\.options\.vocab_size\)"):
      _text(corpus, wd, 96)
    assert tree(tmp_path) == before, wd  # no token caches, no tokenizer, no folder
  ds = _text(corpus, tmp_path / "ok", 8)  # the largest it supports: trained, then prepared
  assert ds.vocab_size == 8 and (tmp_path / "ok" / "tokenizer.model").is_file()
  assert len(list((tmp_path / "ok" / "tokens").glob("*.npy"))) == 2


def test_a_corpus_shorter_than_one_batch_is_refused_before_anything_is_written(tmp_path):
  """The tokenizer fits, the token streams do not make one batch: refused with nothing
  written (the tokenizer and the token caches are written after the check); with a batch it
  makes, both are written, and a second call reuses them."""
  corpus = write_corpus(tmp_path / "corpus", generated_docs(0, 4, n_lines=8))
  cfg = DataConfig(source="text", options=dict(path=str(corpus), vocab_size=64))
  before = tree(tmp_path)
  with pytest.raises(DataError, match=r"split 'train': \d+ tokens make \d+ windows of "
                                      r"seq_len\+1=129, fewer than one global batch of 64"):
    make_dataset(cfg, seq_len=128, global_batch_size=64, workdir=str(tmp_path / "wd"))
  assert tree(tmp_path) == before
  ds = make_dataset(cfg, seq_len=8, global_batch_size=2, workdir=str(tmp_path / "wd"))
  wd = tmp_path / "wd"
  assert (wd / "tokenizer.model").is_file() and (wd / "tokenizer.vocab").is_file()
  assert len(list((wd / "tokens").glob("*.npy"))) == 2
  written = tree(wd)
  again = make_dataset(cfg, seq_len=8, global_batch_size=2, workdir=str(wd))
  assert tree(wd) == written and np.array_equal(again.train_batch(1), ds.train_batch(1))


def test_the_corpus_messages_name_the_option_of_the_command(tmp_path):
  """A library call names the config field; a command names its own flag: the spelling it
  gave (``option_names``: train's ``--config.`` prefix, analyze's ``--data.path``) or the
  flag an experiment turned into the field (``text_corpus``: ``--data``, ``--preset``)."""
  empty = tmp_path / "empty"
  empty.mkdir()
  corpus = tiny_corpus(tmp_path / "corpus")
  cases = [(None, "data.options.path", "data.options.vocab_size"),
           ({"*": "--config."}, "--config.data.options.path", "--config.data.options.vocab_size"),
           ({"data.*": "--data.", "data.options.path": "--data.path",
             "data.options.vocab_size": "--data.vocab_size"}, "--data.path", "--data.vocab_size"),
           ({}, "--data", "--preset")]
  for names, path_flag, vocab_flag in cases:
    with errors.option_names(names) if names is not None else contextlib.nullcontext():
      if names == {}:
        text_corpus(empty)  # an experiment's --data: it exists, so it passes here
      with pytest.raises(DataError, match=rf"has no \.txt files: {empty}; put UTF-8 \.txt files "
                                          rf"there or set {path_flag} to another directory$"):
        _text(empty, tmp_path / "wd", 96)
      with pytest.raises(ValueError, match=rf"use more text \({path_flag}\) or a smaller "
                                           rf"vocabulary \({vocab_flag}\)"):
        _text(corpus, tmp_path / "wd", 96)
  assert errors.option("data.options.path") == "data.options.path"  # outside: the field
  with errors.option_names({"data.*": "--data.", "*": "--config.", "data.options.path": "--d"}):
    assert [errors.option(f) for f in ("data.options.path", "data.options", "train.steps")] == [
        "--d", "--data.options", "--config.train.steps"]  # a name, then the longest section
  assert not (tmp_path / "wd").exists()


def test_a_list_flag_of_numbers_names_the_flag_the_item_and_the_form():
  fv = flags.FlagValues()
  dims = define_number_list("dims", [16, 64], "ranks", example="16,64", flag_values=fv)
  lrs = define_number_list("lrs", None, "lrs", kind=float, example="1e-3,3e-3",
                                  flag_values=fv)
  fv(["prog", "--dims=1, 8", "--lrs=1e-3,2"])
  assert dims.value == [1, 8] and lrs.value == [1e-3, 2.0]
  for arg, msg in (("--dims=abc", "flag --dims=abc: 'abc' is not an integer; expected a "
                                  "comma-separated list of integers, e.g. 16,64"),
                   ("--lrs=1e-3,fast", "flag --lrs=1e-3,fast: 'fast' is not a number; expected "
                                       "a comma-separated list of numbers, e.g. 1e-3,3e-3")):
    with pytest.raises(flags.IllegalFlagValueError) as e:
      copy.deepcopy(fv)(["prog", arg])
    assert str(e.value) == msg


def test_a_section_given_a_value_names_the_key_and_how_to_set_it():
  text = Config(data=DataConfig(source="text", options=dict(path="x")))
  with errors.option_names({"*": "--config."}):
    with pytest.raises(ValueError) as e:
      overrides.apply(text, {"data.options": "path=/c"})
  fields = ", ".join(sorted(f.name for f in dataclasses.fields(text.data.options)))
  assert str(e.value) == (
      f"config override --config.data.options='path=/c': data.options is a section (fields: "
      f"{fields}), not a value; set one field of it, e.g. --config.data.options.path=/c, or "
      """give the section as a JSON object, e.g. --config.data.options='{"path": "/c"}'""")
  with pytest.raises(ValueError, match=r"^config override data='source=text': data is a "
                                       r"section .*e\.g\. data\.source=text, or"):
    overrides.config_from("tiny", {"data": "source=text"})  # was: dictionary update sequence
  with pytest.raises(ValueError, match=r"data\.options\.path=/c \(with data\.source set to a "
                                       r"source that has path\)"):  # planted has no path
    overrides.config_from("tiny", {"data.options": "path=/c"})
  # a value the config takes, or refuses for its own reason, keeps its own message
  assert overrides.config_from("tiny", {"model.head": "lowrank", "model.head_rank": 4})
  with pytest.raises(ValueError, match=r"^invalid config: model\.head=3; allowed: a head kind"):
    overrides.config_from("tiny", {"model.head": 3})
  # a text field given a section (data.options.path.x=1) is refused, not passed on as a path
  with pytest.raises(ValueError, match=r"^invalid config: data\.options\.path=\{'x': 1\}; "
                                       r"allowed: a string$"):
    DataConfig(source="text", options=dict(path={"x": 1}))


@pytest.mark.e2e  # starts CLI processes (the e2e layer; tests/conftest.py)
def test_cli_refusals_name_the_flag_and_write_nothing(tmp_path):
  """The commands themselves: head_rank on a corpus too small for its preset's vocabulary
  (it wrote OUT/data/tfds before), train's ``--config.data.options=path=DIR`` without
  ``--config`` (an AttributeError traceback, exit 1, before) and analyze's
  ``--w_error_dims=abc`` (``invalid literal for int()``): exit 2, one line naming the flag
  and the fix, and the tree as it was."""
  corpus = tiny_corpus(tmp_path / "corpus")
  keep = tmp_path / "keep"
  keep.mkdir()
  (keep / "result.csv").write_text("rank,eval_loss\n4,2.5\n")
  before = tree(tmp_path)
  r = cli("experiments.head_rank", "--preset=test", f"--data={corpus}", f"--out={keep}")
  assert error_line(r).startswith("error: tokenizer vocab_size=96 is too large for this corpus "
                                  "(this corpus supports at most 8): use more text (--data) or "
                                  "a smaller vocabulary (--preset)."), r.stderr[-2000:]
  assert tree(tmp_path) == before
  r = cli("experiments.train", f"--config.data.options=path={corpus}", f"--workdir={tmp_path}/w")
  assert error_line(r).startswith(
      f"error: config override --config.data.options='path={corpus}': data.options is a "
      "section (fields: "), r.stderr[-2000:]
  assert f"e.g. --config.data.options.path={corpus} (with --config.data.source set to" in r.stderr
  assert tree(tmp_path) == before
  r = cli("experiments.analyze", f"--workdir={keep}", "--w_error_dims=16,abc")
  assert error_line(r) == ("error: flag --w_error_dims=16,abc: 'abc' is not an integer; "
                           "expected a comma-separated list of integers, e.g. 16,64; see "
                           "--helpshort or --helpfull"), r.stderr[-2000:]
  assert tree(tmp_path) == before


@pytest.mark.e2e  # starts a CLI process
def test_analyze_names_its_data_path_flag(tiny_run, tmp_path):
  """analyze's text data on a folder with no .txt: ``--data.path`` (it said
  ``--config.data.path``, a flag analyze does not take); nothing written, the run unchanged."""
  empty = tmp_path / "empty"
  empty.mkdir()
  before, run_before = tree(tmp_path), tree(tiny_run)
  r = cli("experiments.analyze", f"--workdir={tiny_run}", f"--out_dir={tmp_path}/an",
          "--groups=loss", "--data.source=text", f"--data.path={empty}", "--noprogress")
  assert error_line(r) == (f"error: text corpus directory has no .txt files: {empty}; put "
                           "UTF-8 .txt files there or set --data.path to another directory")
  assert tree(tmp_path) == before and tree(tiny_run) == run_before
