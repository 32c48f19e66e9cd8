"""Errors that name their file (issue 34): a NUL-filled .txt in a corpus is named before the
tokenizer is trained (it used to fail inside sentencepiece: ``std::isfinite(score)``), and
an unparseable workdir config.json is reported with its path (training, analysis, loads)."""

import logging
import shutil
import warnings

import pytest

from sbjax import checkpoint as ckpt
from sbjax.config import DataConfig
from sbjax.analysis import Settings, analyze_run
from sbjax.data import DataError, make_dataset
from sbjax.train import train
from tests._corpus import generated_docs, write_corpus
from tests._tiny import TINY_RUN_STEPS, tiny_dataset, tiny_run_config


def _text(tmp, path, vocab=200):
  cfg = DataConfig(source="text", options=dict(path=str(path), vocab_size=vocab))
  return make_dataset(cfg, seq_len=32, global_batch_size=4, seed=0, workdir=str(tmp / "wd"),
                      process_index=0, process_count=1)


def test_nul_filled_txt_is_named_and_left_out(tmp_path, caplog):
  corpus = write_corpus(tmp_path / "corpus", generated_docs(3, 6))
  (corpus / "zeros.txt").write_bytes(b"\0" * 4096)  # e.g. a file preallocated, never written
  with caplog.at_level(logging.WARNING), warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    ds = _text(tmp_path, corpus)
  msgs = [r.getMessage() for r in caplog.records] + [str(x.message) for x in w]
  assert any(f"skipping {corpus / 'zeros.txt'}: it holds NUL characters" in m for m in msgs), msgs
  assert ds.vocab_size == 200  # the tokenizer was trained on the other documents


def test_only_nul_filled_txt_is_an_error_naming_it(tmp_path):
  (tmp_path / "c").mkdir()
  (tmp_path / "c" / "zeros.txt").write_bytes(b"\0" * 4096)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    with pytest.raises(DataError, match=r"has no usable \.txt file: skipped \['zeros\.txt'\] "
                                        r"\(not valid UTF-8, empty, or holding NUL"):
      _text(tmp_path, tmp_path / "c")


@pytest.mark.parametrize("content", [b'{"model": {"d_model": 32', b"\xff\xfe", b"[1, 2]"],
                         ids=["cut_short", "not_utf8", "a_list"])
def test_unparseable_config_json_is_named(content, tiny_run, tmp_path):
  wd = tmp_path / "run"
  shutil.copytree(tiny_run, wd)
  (wd / "config.json").write_bytes(content)
  with pytest.raises(ValueError, match=rf"{wd / 'config.json'} (is not valid JSON|holds a JSON "
                                       r"list).*restore it from a copy"):
    ckpt.load_config(wd)
  with pytest.raises(ValueError, match=rf"{wd / 'config.json'} "):
    analyze_run(wd, Settings(groups=("spectrum",), progress=False))
  with pytest.raises(ValueError, match=rf"{wd / 'config.json'} "):  # resuming the run
    train(tiny_run_config(), wd, dataset=tiny_dataset(0), quiet=True)
  assert ckpt.list_steps(wd) == TINY_RUN_STEPS and not (wd / "checkpoints_bad").exists()


def test_import_into_a_workdir_with_an_unparseable_config_json_names_it(tmp_path):
  from sbjax.cli import convert  # deferred: it defines absl flags when imported
  wd = tmp_path / "run"
  wd.mkdir()
  (wd / "config.json").write_bytes(b'{"model": ')
  with pytest.raises(ValueError, match=rf"{wd / 'config.json'} is not valid JSON"):
    convert._check_workdir_config(str(wd), tiny_run_config())
  assert sorted(p.name for p in wd.iterdir()) == ["config.json"]
