"""Every experiment's quick and cpu presets on a user's own corpus (``--data=DIR``; issue 20).

What breaks on a user's corpus is the data path, not the training: the tokenizer trained at
the preset's vocabulary size(s) (too many distinct characters for a small vocabulary, too
little text for a large one), the dataset's windows (seq_len and batch against the splits)
and the model's vocabulary. So each (experiment, preset) builds its data exactly as its run
does (the experiment's own functions, with ``data=DIR``), then the checks: the tokenizer has
the preset's size, the model configs take the data's vocabulary and sequence length, the
first train batch and the evaluation sample the experiment measures on can be drawn, with
ids in the vocabulary. No training step.

Two generated corpora with >= 150 distinct characters (accents, Greek, Cyrillic, symbols):
the small one (33 KB, 202 characters) for the quick presets, a larger one (~290 KB, ~220
characters) for the cpu presets' vocabularies (256 to 8192). A tokenizer is trained once per
(corpus, vocabulary size) and copied for the other experiments (real sentencepiece training).
"""


import numpy as np
import pytest

from experiments.collapse import presets as collapse_presets
from experiments.collapse.run import load_corpus as collapse_corpus
from experiments.collapse.run import validate as collapse_validate
from experiments.convergence import presets as conv_presets
from experiments.convergence.run import configs as conv_configs
from experiments.head_rank import presets as hr_presets
from experiments.head_rank.run import make_plan as hr_plan
from experiments.mos_text import presets as mos_text_presets
from experiments.mos_text.run import arm_configs as mos_text_arms
from experiments.saturation import presets as sat_presets
from experiments.saturation.run import data_config as sat_data_config
from experiments.saturation.run import run_configs as sat_run_configs
from experiments.saturation.windows import validation_windows
from experiments.target_rank import presets as tr_presets
from experiments.target_rank.run import _streams as tr_streams
from experiments.vocab_threshold import presets as vt_presets
from experiments.vocab_threshold.run import make_plan as vt_plan
from experiments.werror_loss import presets as we_presets
from sbjax.analysis import samples
from sbjax.data import Dataset, make_dataset
from sbjax.data import tokenizer as tok_lib
from sbjax.train import workdir as workdir_lib
from tests._corpus import write_corpus
from tests._unicode_corpus import unicode_docs, user_docs


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
  root = tmp_path_factory.mktemp("corpora")
  out = {}
  for preset, docs in (("quick", unicode_docs()), ("cpu", user_docs())):
    assert len(set("".join(docs))) >= 150
    out[preset] = write_corpus(root / preset, docs)
  return out


@pytest.fixture(scope="module", autouse=True)
def trained_once():
  """sentencepiece trained once per (corpus, vocab size); later runs get a copy."""
  real, done = tok_lib.train_tokenizer, {}

  def train(texts=None, *, out_path, vocab_size, save=True, **kw):
    texts = list(texts)
    key = (vocab_size, len(texts), sum(map(len, texts)), tuple(sorted(kw.items())))
    if key not in done:  # the model's bytes, held as train_tokenizer(save=False) holds them
      done[key] = real(texts, out_path=out_path, vocab_size=vocab_size, save=False,
                       **kw).serialized()
    tok = tok_lib.Tokenizer(out_path, done[key])
    return tok.save() if save else tok

  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(tok_lib, "train_tokenizer", train)
    yield done


def _check(ds, vocab: int, cfgs=()):
  """The data has the preset's vocabulary, every config takes it, a batch can be drawn."""
  assert ds.vocab_size == vocab
  x = np.asarray(ds.train_batch(0))
  assert x.shape == (ds.global_batch_size, ds.seq_len + 1)
  assert 0 <= x.min() and x.max() < vocab and len(np.unique(x)) > 8
  for cfg in cfgs:
    cfg = workdir_lib.resolve_vocab(cfg, ds.vocab_size)
    assert cfg.model.vocab_size >= vocab and cfg.model.max_len >= ds.seq_len
    assert (cfg.train.seq_len, cfg.train.batch_size) == (ds.seq_len, ds.global_batch_size)
    assert len(ds.eval_batches(cfg.train.eval_batches)) == cfg.train.eval_batches


def _collapse(preset, corpus, out):
  p = collapse_presets.get_preset(preset)
  tr, va, vocab, _ = collapse_corpus(p, out, str(corpus))
  assert vocab == p.overrides["data.options.vocab_size"]
  seq_len, batch = p.overrides["train.seq_len"], p.overrides["train.batch_size"]
  ds = Dataset(tr, va, seq_len=seq_len, global_batch_size=batch, vocab_size=vocab)  # run_group's
  _check(ds, vocab)
  for mc, tc in collapse_validate(p, vocab):
    assert mc.vocab_size == vocab and mc.max_len >= seq_len and tc.seq_len == seq_len
  return [vocab]


def _convergence(preset, corpus, out):
  cfgs = conv_configs(preset, str(corpus))
  c0 = cfgs[0][1]
  assert c0.data.source == "text"
  ds = make_dataset(c0.data, seq_len=c0.train.seq_len, global_batch_size=c0.train.batch_size,
                    seed=c0.train.data_seed, workdir=str(out / "data"))
  _check(ds, c0.data.options.vocab_size, [c for _, c in cfgs])
  n = conv_presets.get_preset(preset).knobs.n_sequences
  assert samples.eval_sample(ds, n).shape == (n, c0.train.seq_len + 1)
  return [ds.vocab_size]


def _head_rank(preset, corpus, out):
  base = hr_plan(preset, str(corpus)).base
  tc = base.train  # run_sweep's dataset
  ds = make_dataset(base.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                    seed=tc.data_seed, workdir=str(out / "data"))
  _check(ds, base.data.options.vocab_size, [base])
  return [ds.vocab_size]


def _mos_text(preset, corpus, out):
  p = mos_text_presets.get_preset(preset)  # its lowrank arm gets the matched rank
  cfgs = [c for _, c in mos_text_arms(p, str(corpus))]
  tc = cfgs[0].train  # run's dataset
  ds = make_dataset(cfgs[0].data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                    seed=tc.data_seed, workdir=str(out / "data"))
  # run refuses a tokenizer whose size is not the preset's model.vocab_size
  assert all(c.model.vocab_size == ds.vocab_size for c in cfgs)
  _check(ds, cfgs[0].data.options.vocab_size, cfgs)
  return [ds.vocab_size]


def _saturation(preset, corpus, out):
  p = sat_presets.get_preset(preset)
  dc = sat_data_config(p, out, str(corpus))
  ds = make_dataset(dc, seq_len=p.overrides["train.seq_len"],
                    global_batch_size=p.overrides["train.batch_size"], seed=0,
                    workdir=str(out / "data"), process_index=0, process_count=1)
  _check(ds, dc.options.vocab_size, [c for _, c in sat_run_configs(p, dc)])
  n = p.knobs.eval_sequences
  assert validation_windows(ds, n).shape == (n, ds.seq_len + 1)
  return [ds.vocab_size]


def _ends(vocabs) -> list:
  """The smallest and largest of a preset's vocabulary sizes. sentencepiece trains every size
  in an interval on a corpus: from the one that holds its characters ("too small" below) to
  the most pieces the text supports ("too large" above), so the two ends stand for the sizes
  between them (whose datasets are built the same way)."""
  return sorted({min(vocabs), max(vocabs)})


def _target_rank(preset, corpus, out):
  p = tr_presets.get_preset(preset)
  for vocab in _ends(p.knobs.vocab_sizes):  # _streams refuses a tokenizer of another size
    _, streams, _ = tr_streams(p, vocab, out, str(corpus))
    assert all(s.size > 1000 and s.max() < vocab for s in streams)
  return list(p.knobs.vocab_sizes)


def _vocab_threshold(preset, corpus, out):
  vocabs = vt_presets.get_preset(preset).knobs.vocabs
  for v in _ends(vocabs):
    base = vt_plan(preset, str(corpus), v, str(out / "tfds")).base
    tc = base.train
    ds = make_dataset(base.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                      seed=tc.data_seed, workdir=str(out / f"V{v}" / "data"))
    _check(ds, v, [base])
  return list(vocabs)


def _werror_loss(preset, corpus, out):
  # werror_loss trains (when missing) head_rank's sweep with the same preset and --data
  assert we_presets.get_preset(preset).overrides == hr_presets.get_preset(preset).overrides
  return _head_rank(preset, corpus, out)


EXPERIMENTS = {"collapse": _collapse, "convergence": _convergence, "head_rank": _head_rank,
               "mos_text": _mos_text, "saturation": _saturation, "target_rank": _target_rank,
               "vocab_threshold": _vocab_threshold, "werror_loss": _werror_loss}


@pytest.mark.parametrize("preset", ["quick", "cpu"])
@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_preset_data_path_on_a_user_corpus(tmp_path, corpora, name, preset):
  vocabs = EXPERIMENTS[name](preset, corpora[preset], tmp_path)
  assert vocabs and all(v >= 64 for v in vocabs)
