"""convert --to_hf writes the run's tokenizer: AutoTokenizer + AutoModelForCausalLM on the
export give sbjax's ids and next-token log-probs (a sentencepiece unigram run, converted,
and a run tokenised with a tokenizer.json)."""

import jax
import numpy as np
import pytest
import torch
import transformers

from experiments import convert as convert_cli
from sbjax import checkpoint
from sbjax.config import Config, DataConfig, ModelConfig, TrainConfig
from sbjax.data import hf_tokenizer
from sbjax.data import tokenizer as tok_lib
from sbjax.model import Model
from tests._unicode_corpus import unicode_docs

transformers.logging.set_verbosity_error()
V = 128


def _run(wd, data):
  cfg = Config(model=ModelConfig(vocab_size=V, d_model=16, n_layers=1, n_heads=2, max_len=32),
               data=data, train=TrainConfig(seq_len=32))
  rng = np.random.default_rng(0)
  params = jax.tree.map(lambda a: (0.3 * rng.standard_normal(a.shape)).astype(np.float32),
                        Model(cfg.model).abstract_params())
  checkpoint.write_params(wd, cfg, params, 3)
  return cfg, params


@pytest.mark.parametrize("kind", ["sentencepiece", "tokenizer.json"])
def test_export_loads_in_transformers_with_the_same_log_probs(tmp_path, kind):
  docs = unicode_docs()
  wd = tmp_path / "run"
  if kind == "sentencepiece":
    tok = tok_lib.train_tokenizer(docs, out_path=wd / "tokenizer.model", vocab_size=V)
  else:
    src = hf_tokenizer.train_bpe(docs, tmp_path / "tokenizer.json", vocab_size=300)
    tok = hf_tokenizer.copy_into(src.path, wd)
  cfg, params = _run(wd, DataConfig(source="text", path="corpus"))
  out = tmp_path / "hf"
  assert convert_cli.export_from_workdir(str(wd), str(out)) == 3
  hf_tok = transformers.AutoTokenizer.from_pretrained(str(out))
  text = docs[2][:300]  # includes rare characters (unk for the sentencepiece model)
  ids = tok.encode(text)
  assert hf_tok(text, add_special_tokens=False)["input_ids"] == ids
  assert hf_tok.eos_token_id == tok.separator_id
  ids = [i for i in ids if i < V][:32]
  model = transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()
  with torch.no_grad():
    hf_lp = torch.log_softmax(model(torch.tensor([ids])).logits.double(), -1).numpy()
  ours = np.asarray(jax.nn.log_softmax(Model(cfg.model).apply(params, np.asarray([ids])), -1))
  np.testing.assert_allclose(ours, hf_lp, atol=1e-4)
