"""The data of an analysis of an imported series (sbjax.analysis.data_source): refusal of the
synthetic default, --tokens and --data overrides, and the bad inputs (too few windows, rows
longer than max_len, a text corpus without the model's tokenizer; ids >= vocab_size and a
tokenizer larger than the model's vocabulary: the bad-input table of series). Everything
here fails before any compilation; weight-only groups need no data."""

import numpy as np
import pytest

from sbjax.cli import analyze as analyze_cli
from sbjax.cli import convert as convert_cli
from sbjax.cli import series_flags
from sbjax import checkpoint as ckpt
from sbjax.analysis import analyze_run, data_source
from sbjax.analysis.settings import Settings
from sbjax.config import ModelConfig
from tests._corpus import generated_docs, write_corpus
from tests._hf_cache import exported_neox

V = 53
MC = ModelConfig(vocab_size=V, d_model=16, n_layers=1, n_heads=2, max_len=32)
QUIET = dict(progress=False, figures=False, eval_sequences=4, cka_sequences=4)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
  d = tmp_path_factory.mktemp("imp")
  exported_neox(MC, d / "series" / "step5", 0)
  assert convert_cli.import_to_workdir(str(d / "series"), str(d / "work")) == [5]
  return d, d / "work"


def test_refused_on_synthetic_data_unless_data_is_given(imported):
  d, work = imported
  assert data_source.is_import(work)
  with pytest.raises(ValueError, match=r"imported checkpoint series .*data.source='planted'.*"
                                       r"nothing was analysed\. Pass --tokens=FILE"):
    analyze_run(work, Settings(groups=("loss",), **QUIET))
  assert not (work / "analysis").exists()
  # weight-only groups need no data: allowed
  cfg = data_source.effective_config(
      ckpt.load_config(work), work, needs_data=False)[0]
  assert cfg.data.source == "planted"
  rows = np.random.default_rng(1).integers(0, V, (6, 9)).astype(np.int32)
  np.save(d / "ok.npy", rows)
  cfg, key, over = data_source.effective_config(
      ckpt.load_config(work), work,
      tokens=str(d / "ok.npy"))
  assert over and key and cfg.data.source == "tokens" and cfg.train.seq_len == 8
  assert cfg.data.options.val_path == str(d / "ok.npy") and cfg.data.options.vocab == V


def test_bad_token_files_and_tokenizer(imported):
  d, work = imported
  rows = np.random.default_rng(1).integers(0, V, (6, 9)).astype(np.int32)
  np.save(d / "few.npy", rows)  # 6 windows, the analysis asks for 8: never repeated
  with pytest.raises(ValueError, match=r"few.npy holds 6 windows of T\+1=9 tokens, fewer than "
                                       r"the 8 the analysis samples"):
    analyze_run(work, Settings(tokens=str(d / "few.npy"), **dict(QUIET, eval_sequences=8)))
  np.save(d / "long.npy", np.zeros((4, 40), np.int32))
  with pytest.raises(ValueError, match=r"rows of 40 tokens make windows of T=39 > the model's "
                                       r"max_len=32"):
    analyze_run(work, Settings(tokens=str(d / "long.npy"), **QUIET))
  docs = generated_docs(3, 4, 20)
  corpus = write_corpus(d / "corpus", docs)
  over = ("source=text", f"path={corpus}")
  # a text corpus without the model's tokenizer: refused (a new tokenizer's ids are meaningless)
  with pytest.raises(ValueError, match=r"imported model: a text corpus must be tokenised with "
                                       r"the model's own tokenizer.*--data.tokenizer"):
    analyze_run(work, Settings(data=over[:2], **QUIET))
  # --data.F is the source's option F (data.options.F); the one override path names a wrong one
  with pytest.raises(ValueError, match=r"^invalid config key 'data.options.nope'; the fields "
                                       r"of data.options are: data_dir, path, tokenizer,"):
    analyze_run(work, Settings(data=(*over, "nope=1"), **QUIET))
  assert data_source.parse_overrides(["vocab_size=64", "seq_len=16", "data.source=text",
                                      "options.path=c"]) == {
      "data": {"data.options.vocab_size": "64", "data.source": "text",
               "data.options.path": "c"}, "seq_len": 16}
  assert analyze_cli.data_dot_flags(["x", "--data.source=text", "--tokens=a"]) == [
      "x", "--data_override=source=text", "--tokens=a"]
  # analyze and the series modes share one set of data flags: importable in one process
  assert series_flags.TOKENS is analyze_cli.TOKENS and series_flags.DATA is analyze_cli.DATA
  assert series_flags.ALLOW_DUP is analyze_cli.ALLOW_DUP
