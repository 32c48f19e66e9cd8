"""An HF GPT-NeoX series on real tokens: convert and analyze equal transformers; export with tokenizer."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
import torch
import transformers

from sbjax.cli import convert as convert_cli
from sbjax import checkpoint
from sbjax.analysis import analyze_run
from sbjax.analysis.settings import Settings
from sbjax.config import Config, DataConfig, ModelConfig, TrainConfig
from sbjax.data import hf_tokenizer
from sbjax.data import tokenizer as tok_lib
from sbjax.model import Model
from tests._corpus import generated_docs, write_corpus
from tests._hf_cache import tiny_neox, write_hf_cache
from tests._metrics_reference import ref_cka_biased
from tests._unicode_corpus import unicode_docs

ROOT = Path(__file__).resolve().parents[2]
V, T, N = 320, 16, 12
V_EXPORT = 128
transformers.logging.set_verbosity_error()


def _hf_loss(m, windows):
  with torch.no_grad():
    logits = m(torch.tensor(windows[:, :-1], dtype=torch.long)).logits.double()
  logp = torch.log_softmax(logits, -1)
  y = torch.tensor(windows[:, 1:], dtype=torch.long)
  return float(-logp.gather(-1, y[..., None]).mean())


@pytest.fixture(scope="module")
def series(tmp_path_factory):
  d = tmp_path_factory.mktemp("series")
  models = {s: tiny_neox(d / f"m{s}", s, vocab_size=V) for s in (0, 1, 3)}
  revs = {"step0": d / "m0", "step1000-tokens2M": d / "m1",
          "step2000-tokens4M": d / "m1",  # an aliased branch: step 1000's weights
          "step3000-tokens6M": d / "m3"}
  repo = write_hf_cache(d / "hub", "EleutherAI/pythia-tiny", revs)
  # the user's tokenizer and corpus: a byte-level BPE tokenizer.json trained locally
  docs = generated_docs(7, 4, 30)
  corpus = write_corpus(d / "corpus", docs)
  tok = hf_tokenizer.train_bpe(docs, d / "tokenizer.json", vocab_size=300)
  ids = []
  for f in sorted(corpus.glob("*.txt")):  # tokenise a few files, Pythia-style rows of T+1
    ids += tok.encode(f.read_text()) + [tok.separator_id]
  rows = np.asarray(ids[:N * (T + 1)], np.uint16).reshape(N, T + 1)
  np.save(d / "batch.npy", rows)
  return d, repo, models, rows


def test_convert_analyze_on_tokens_matches_transformers(series):
  d, repo, models, rows = series
  work = d / "work"
  assert convert_cli.import_to_workdir(str(repo.parent), str(work)) == [0, 1000, 2000, 3000]
  base = dict(progress=False, figures=False, eval_sequences=N, cka_sequences=N,
              collapse_sequences=N, anisotropy_tokens=0)
  # the duplicate is refused unless allowed
  with pytest.raises(ValueError, match=r"revision\(s\) \[2000\] hold the same weights as "
                                       r"step\(s\) \[1000\].*--allow_duplicates"):
    analyze_run(work, Settings(tokens=str(d / "batch.npy"), **base))
  r = subprocess.run(
      [sys.executable, "-m", "experiments.analyze", f"--workdir={work}",
       f"--tokens={d / 'batch.npy'}", "--allow_duplicates", "--noprogress", "--nofigures",
       "--groups=loss,cka", f"--eval_sequences={N}", f"--cka_sequences={N}"],
      cwd=ROOT, capture_output=True, text=True, timeout=600,
      env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert r.returncode == 0, r.stderr[-3000:]
  with open(work / "analysis" / "metrics.csv") as f:
    got = {int(row["step"]): row for row in csv.DictReader(f)}
  ref = {0: models[0], 1000: models[1], 2000: models[1], 3000: models[3]}
  losses = {s: _hf_loss(m, rows) for s, m in ref.items()}
  for s, loss in losses.items():
    assert abs(float(got[s]["eval_loss"]) - loss) <= 1e-4, (s, got[s]["eval_loss"], loss)
  assert abs(losses[0] - losses[3000]) > 1e-2  # the revisions are distinguishable
  assert {s: got[s]["duplicate_of"] for s in got} == {0: "", 1000: "", 2000: "1000", 3000: ""}
  final = _hf_mlp_last(models[3], rows)  # CKA to the final on transformers' MLP outputs
  for s, m in ref.items():
    for layer, x in enumerate(_hf_mlp_last(m, rows)):
      assert float(got[s][f"cka_to_final_mlp_{layer}"]) == pytest.approx(
          ref_cka_biased(x, final[layer]), abs=1e-4), (s, layer)
  assert float(got[3000]["cka_to_final_mlp_1"]) == pytest.approx(1.0, abs=1e-5)
  assert float(got[0]["cka_to_final_mlp_1"]) < 0.99  # the revisions differ
  info = json.loads((work / "analysis" / "metrics.json").read_text())
  assert info["samples"]["data"]["tokens_path"] == str(d / "batch.npy")
  assert info["samples"]["seq_len"] == T


def _run(wd, data):
  """A params-only run (random weights) of a V_EXPORT-token model with its tokenizer."""
  cfg = Config(model=ModelConfig(vocab_size=V_EXPORT, d_model=16, n_layers=1, n_heads=2, max_len=32),
               data=data, train=TrainConfig(seq_len=32))
  rng = np.random.default_rng(0)
  params = jax.tree.map(lambda a: (0.3 * rng.standard_normal(a.shape)).astype(np.float32),
                        Model(cfg.model).abstract_params())
  checkpoint.write_params(wd, cfg, params, 3)


@pytest.mark.parametrize("kind", ["sentencepiece", "tokenizer.json"])
def test_export_with_tokenizer_loads_in_transformers_and_encodes_the_same(tmp_path, kind):
  docs = unicode_docs()
  wd = tmp_path / "run"
  if kind == "sentencepiece":
    tok = tok_lib.train_tokenizer(docs, out_path=wd / "tokenizer.model", vocab_size=V_EXPORT)
  else:
    src = hf_tokenizer.train_bpe(docs, tmp_path / "tokenizer.json", vocab_size=300)
    tok = hf_tokenizer.copy_into(src.path, wd)
  _run(wd, DataConfig(source="text", options=dict(path="corpus")))
  out = tmp_path / "hf"
  assert convert_cli.export_from_workdir(str(wd), str(out)) == 3
  hf_tok = transformers.AutoTokenizer.from_pretrained(str(out))
  text = docs[2][:300]  # includes rare characters (unk for the sentencepiece model)
  ids = tok.encode(text)
  assert hf_tok(text, add_special_tokens=False)["input_ids"] == ids
  assert hf_tok.eos_token_id == tok.separator_id


def _hf_mlp_last(m, windows):
  """Each block's MLP output at the last position, [L] x [n, d] float64 (forward hooks)."""
  outs = []
  hooks = [layer.mlp.register_forward_hook(
      lambda mod, inp, o: outs.append(o[:, -1].double().numpy())) for layer in m.gpt_neox.layers]
  with torch.no_grad():
    m(torch.tensor(windows[:, :-1], dtype=torch.long))
  for h in hooks:
    h.remove()
  return outs

