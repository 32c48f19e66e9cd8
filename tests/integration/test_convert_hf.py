"""Hugging Face import/export (sbjax.convert) against transformers (torch, CPU).

Small random GPT-NeoX / GPT-Neo models are built locally from configs (no hub),
saved with ``save_pretrained`` and imported; logits and the intermediates the
analysis uses must match transformers to 1e-4 in float32.
"""

import json
import os
import shutil

import jax
import numpy as np
import pytest
import torch
import transformers

from sbjax.config import ModelConfig
from sbjax.convert import (export_hf, export_problems, import_hf, iter_series, series_config,
                           stack_series, parse_step)
from sbjax.convert import st_io
from sbjax.model import Model
from sbjax.heads.lowrank import LowRankHead
from sbjax.heads.mos import MoSHead

V, D, T = 97, 64, 24
TOL = 1e-4
transformers.logging.set_verbosity_error()


def _perturb(m, seed):
  """Randomise every parameter (incl. LayerNorm weights/biases and all biases)."""
  g = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for _, p in m.named_parameters():
      p.add_(0.1 * torch.randn(p.shape, generator=g))
  return m.eval()


def neox(path, *, pct=0.25, parallel=True, seed=0, layers=3, save=True, **kw):
  torch.manual_seed(seed)
  c = transformers.GPTNeoXConfig(
      vocab_size=V, hidden_size=D, num_hidden_layers=layers, num_attention_heads=4,
      intermediate_size=128, max_position_embeddings=64, rotary_pct=pct,
      use_parallel_residual=parallel, initializer_range=0.1, bos_token_id=0, eos_token_id=0,
      **kw)
  m = _perturb(transformers.GPTNeoXForCausalLM(c), seed)
  if save:
    m.save_pretrained(str(path))
  return m


def neo(path, *, seed=0, window=4, save=True):
  torch.manual_seed(seed)
  c = transformers.GPTNeoConfig(
      vocab_size=V, hidden_size=D, num_layers=4, num_heads=4, max_position_embeddings=64,
      attention_types=[[["global", "local"], 2]], window_size=window, initializer_range=0.1,
      bos_token_id=0, eos_token_id=0)
  m = _perturb(transformers.GPTNeoForCausalLM(c), seed)
  if save:
    m.save_pretrained(str(path))
  return m


def tokens(b=2, t=T, seed=0):
  return np.random.RandomState(seed).randint(0, V, (b, t))


def hf_run(m, tok):
  """(logits, hidden_states tuple, residual after the last block (pre final norm))."""
  last = {}
  blocks = m.gpt_neox.layers if hasattr(m, "gpt_neox") else m.transformer.h
  hook = blocks[-1].register_forward_hook(
      lambda mod, i, o: last.__setitem__("x", (o[0] if isinstance(o, tuple) else o).numpy()))
  with torch.no_grad():
    out = m(torch.tensor(tok), output_hidden_states=True)
  hook.remove()
  return out.logits.numpy(), [h.numpy() for h in out.hidden_states], last["x"]


def maxdiff(a, b):
  return float(np.max(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))))


def assert_tree_equal(a, b):
  la, lb = jax.tree_util.tree_flatten_with_path(a)[0], jax.tree_util.tree_flatten_with_path(b)[0]
  assert [k for k, _ in la] == [k for k, _ in lb]
  for (k, x), (_, y) in zip(la, lb):
    assert np.array_equal(np.asarray(x), np.asarray(y)), jax.tree_util.keystr(k)


def check_parity(m, cfg, params, tok):
  logits, hs, last = hf_run(m, tok)
  scores, ex = Model(cfg).forward(params, tok, collect=("h", "resid"))
  assert maxdiff(scores, logits) <= TOL
  # transformers' hidden_states: [embeddings, block_0 out, ..., block_{L-2} out, ln_f(block_{L-1})]
  assert len(hs) == cfg.n_layers + 1
  assert maxdiff(ex["h"], hs[-1]) <= TOL
  assert maxdiff(ex["resid"][:-1], np.stack(hs[1:-1])) <= TOL
  assert maxdiff(ex["resid"][-1], last) <= TOL
  assert np.abs(logits).max() > 1.0  # the comparison is not trivially small


# ----------------------------------------------------------------------------- import parity


@pytest.mark.parametrize("pct,parallel", [(0.25, True), (0.5, False), (1.0, True), (1.0, False)])
def test_neox_parity(tmp_path, pct, parallel):
  m = neox(tmp_path, pct=pct, parallel=parallel, seed=int(pct * 4) + parallel)
  cfg, params = import_hf(str(tmp_path))
  assert (cfg.pos, cfg.rotary_pct, cfg.parallel_residual, cfg.head.kind) == (
      "rotary", pct, parallel, "dense")
  assert cfg.max_len == 64 and cfg.qkv_bias and cfg.attn_scale and cfg.gelu == "exact"
  assert all(x.dtype == np.float32 for x in jax.tree.leaves(params))
  check_parity(m, cfg, params, tokens())


def test_neo_parity_local_window_tied_unscaled(tmp_path):
  m = neo(tmp_path, window=4)
  cfg, params = import_hf(str(tmp_path))
  assert cfg.pos == "learned" and not cfg.parallel_residual and not cfg.attn_scale
  assert not cfg.qkv_bias and cfg.head.kind == "tied" and cfg.gelu == "tanh"
  assert cfg.attention_layers == ("global", "local", "global", "local") and cfg.window_size == 4
  assert "head" not in params
  check_parity(m, cfg, params, tokens(t=T))  # T=24 > window: the window matters
  # scaling or dropping the window would both break parity
  import dataclasses
  for wrong in (dataclasses.replace(cfg, attn_scale=True), dataclasses.replace(cfg, attention_layers=())):
    assert maxdiff(Model(wrong).apply(params, tokens()), hf_run(m, tokens())[0]) > 1e-2


def test_neox_no_attention_bias_and_tied(tmp_path):
  m = neox(tmp_path, attention_bias=False, tie_word_embeddings=True, seed=3)
  cfg, params = import_hf(str(tmp_path))
  assert not cfg.qkv_bias and cfg.head.kind == "tied"
  assert not np.any(params["block_0"]["attn"]["o_bias"])
  check_parity(m, cfg, params, tokens())


def test_sharded_equals_single_and_dtype(tmp_path):
  m = neox(tmp_path / "single", seed=5)
  m.save_pretrained(str(tmp_path / "sharded"), max_shard_size="40KB")
  shards = [f for f in os.listdir(tmp_path / "sharded") if f.endswith(".safetensors")]
  assert os.path.isfile(tmp_path / "sharded" / "model.safetensors.index.json")
  assert len(shards) > 1
  c1, p1 = import_hf(str(tmp_path / "single"))
  c2, p2 = import_hf(str(tmp_path / "sharded"))
  assert c1 == c2
  assert_tree_equal(p1, p2)
  c3, p3 = import_hf(str(tmp_path / "single"), dtype="bfloat16")
  assert c3.param_dtype == "bfloat16"
  assert all(str(x.dtype) == "bfloat16" for x in jax.tree.leaves(p3))


def test_bfloat16_checkpoint_reads(tmp_path):
  m = neox(tmp_path / "f32", seed=6, save=True)
  m.to(torch.bfloat16).save_pretrained(str(tmp_path / "bf16"))
  cfg, p = import_hf(str(tmp_path / "bf16"))
  _, p32 = import_hf(str(tmp_path / "f32"))
  w, w32 = p["block_0"]["attn"]["q_kernel"], p32["block_0"]["attn"]["q_kernel"]
  assert w.dtype == np.float32 and 0 < maxdiff(w, w32) < 1e-2


# ----------------------------------------------------------------------------- series


def test_series_vmapped_forward(tmp_path):
  root = tmp_path / "pythia-tiny"
  names = {0: "step0", 1000: "step1000", 20: "revision-step20"}
  models = {s: neox(root / n, seed=10 + s % 7) for s, n in names.items()}
  (root / "notes").mkdir()  # ignored: not a revision
  cfg = series_config(str(root))
  steps, stacked = stack_series(iter_series(str(root)))
  assert steps.tolist() == [0, 20, 1000]
  assert jax.tree.leaves(stacked)[0].shape[0] == 3
  tok = tokens()
  logits = jax.vmap(Model(cfg).apply, in_axes=(0, None))(stacked, tok)
  for i, s in enumerate(steps):
    assert maxdiff(logits[i], hf_run(models[int(s)], tok)[0]) <= TOL
  sub = [s for s, _ in iter_series(str(root), steps=[20])]
  assert sub == [20]


def test_series_config_mismatch(tmp_path):
  neox(tmp_path / "step0", seed=1)
  neox(tmp_path / "step5", seed=2, parallel=False)
  with pytest.raises(ValueError, match=r"step5.*parallel_residual"):
    next(iter_series(str(tmp_path)))
  with pytest.raises(ValueError, match="no revision directories"):
    series_config(str(tmp_path / "step0"))


def test_parse_step():
  assert parse_step("step143000") == 143000
  assert parse_step("some/dir/revision-step20") == 20
  assert parse_step("pythia-70m_step-7/") == 7
  assert parse_step("42") == 42
  assert parse_step("pythia-70m") is None and parse_step("xstep5") is None


# ----------------------------------------------------------------------------- bad inputs


def _rewrite(path, fn):
  f = os.path.join(path, "model.safetensors")
  t = {k: np.array(v) for k, v in st_io.read_file(f).items()}
  fn(t)
  st_io.write_file(t, f)


def _edit_config(path, **kw):
  f = os.path.join(path, "config.json")
  c = json.load(open(f))
  c.update(kw)
  json.dump(c, open(f, "w"))


def test_pickle_only_dir(tmp_path):
  m = neox(tmp_path / "ref", seed=7)
  d = tmp_path / "bin"
  d.mkdir()
  shutil.copy(tmp_path / "ref" / "config.json", d / "config.json")
  torch.save(m.state_dict(), d / "pytorch_model.bin")
  with pytest.raises(ValueError, match=r"pytorch_model\.bin.*allow_pickle=True.*--allow_pickle"):
    import_hf(str(d))
  with pytest.warns(UserWarning, match="weights_only=True"):
    cfg, p = import_hf(str(d), allow_pickle=True)
  _, p_ref = import_hf(str(tmp_path / "ref"))
  assert_tree_equal(p, p_ref)


def test_missing_shard(tmp_path):
  m = neox(tmp_path, seed=8, save=False)
  m.save_pretrained(str(tmp_path), max_shard_size="40KB")
  shard = sorted(f for f in os.listdir(tmp_path) if f.endswith(".safetensors"))[1]
  os.remove(tmp_path / shard)
  with pytest.raises(ValueError, match=f"missing.*{shard}"):
    import_hf(str(tmp_path))


def test_wrong_shape(tmp_path):
  neox(tmp_path, seed=9)
  name = "gpt_neox.layers.1.mlp.dense_h_to_4h.weight"
  _rewrite(tmp_path, lambda t: t.__setitem__(name, np.zeros((100, D), np.float32)))
  with pytest.raises(ValueError, match=rf"shape mismatches.*{name}: got \(100, 64\), expected \(128, 64\)"):
    import_hf(str(tmp_path))


def test_missing_and_unknown_keys(tmp_path):
  neox(tmp_path, seed=9)
  gone = "gpt_neox.layers.2.attention.dense.weight"

  def edit(t):
    del t[gone]
    t["gpt_neox.layers.0.attention.extra_proj.weight"] = np.zeros((2, 2), np.float32)
  _rewrite(tmp_path, edit)
  with pytest.raises(ValueError) as e:
    import_hf(str(tmp_path))
  msg = str(e.value)
  assert f"missing keys (1): {gone}" in msg
  assert "unknown keys (1): gpt_neox.layers.0.attention.extra_proj.weight" in msg


def test_unknown_model_type_architecture_activation(tmp_path):
  neox(tmp_path, seed=9)
  _edit_config(tmp_path, model_type="llama", architectures=["LlamaForCausalLM"])
  with pytest.raises(ValueError, match=r"model_type 'llama'.*gpt_neox.*gpt_neo"):
    import_hf(str(tmp_path))
  _edit_config(tmp_path, model_type="gpt_neox", architectures=["GPTNeoXForSequenceClassification"])
  with pytest.raises(ValueError, match="GPTNeoXForSequenceClassification"):
    import_hf(str(tmp_path))
  _edit_config(tmp_path, architectures=["GPTNeoXForCausalLM"], hidden_act="relu")
  with pytest.raises(ValueError, match=r"hidden_act='relu'.*gelu"):
    import_hf(str(tmp_path))
  _edit_config(tmp_path, hidden_act="gelu", rope_parameters={"rope_type": "linear", "factor": 2.0})
  with pytest.raises(ValueError, match="rope_type 'linear'"):
    import_hf(str(tmp_path))
  os.remove(tmp_path / "model.safetensors")
  _edit_config(tmp_path, rope_parameters=None)
  with pytest.raises(ValueError, match="no weights found"):
    import_hf(str(tmp_path))


# ----------------------------------------------------------------------------- export


def _sbjax_params(cfg, seed=0, scale=0.2):
  """Random params of the model's layout (numpy; no jitted init, which is slow on CPU)."""
  rng = np.random.RandomState(seed)
  return jax.tree.map(lambda s: (scale * rng.standard_normal(s.shape)).astype(np.float32),
                      Model(cfg).abstract_params())


NEO_LIKE = dict(pos="learned", parallel_residual=False, attn_scale=False, qkv_bias=False,
                gelu="tanh", attention_layers=("global", "local", "global"), window_size=4)


@pytest.mark.parametrize("kind,kw", [
    ("neox_dense", dict(head="dense", rotary_pct=0.5)),
    ("neox_tied_sequential", dict(head="tied", parallel_residual=False)),
    ("neox_no_qkv_bias", dict(head="dense", qkv_bias=False)),
    ("neo_tied", dict(head="tied", **NEO_LIKE)),
    ("neo_dense", dict(head="dense", **NEO_LIKE)),
    ("neox_lowrank", dict(head=LowRankHead(rank=8))),
])
def test_export_roundtrip(tmp_path, kind, kw):
  cfg = ModelConfig(vocab_size=V, d_model=D, n_layers=3, n_heads=4, max_len=32, d_ff=96,
                    init_std=0.2, **kw)
  params = _sbjax_params(cfg)
  export_hf(cfg, params, str(tmp_path))
  hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path)).eval()
  assert type(hf).__name__ == ("GPTNeoForCausalLM" if cfg.pos == "learned" else "GPTNeoXForCausalLM")
  tok = tokens(t=20)
  ours = Model(cfg).apply(params, tok)
  with torch.no_grad():
    theirs = hf(torch.tensor(tok)).logits.numpy()
  assert maxdiff(ours, theirs) <= TOL
  cfg2, params2 = import_hf(str(tmp_path))
  if kind == "neox_lowrank":
    import dataclasses
    assert cfg2 == dataclasses.replace(cfg, head="dense")
    np.testing.assert_allclose(params2["head"]["w"], params["head"]["a"] @ params["head"]["b"],
                               rtol=0, atol=1e-6)
    rest = lambda p: {k: v for k, v in p.items() if k != "head"}
    assert_tree_equal(rest(params2), rest(params))
  elif kind == "neox_no_qkv_bias":
    # o_bias is non-zero, so GPT-NeoX needs attention_bias=True: q/k/v biases are written as 0
    assert cfg2.qkv_bias and not np.any(params2["block_0"]["attn"]["q_bias"])
  else:
    assert cfg2 == cfg
    assert_tree_equal(params2, params)


def test_export_scan_layout_and_zero_bias(tmp_path):
  cfg = ModelConfig(vocab_size=V, d_model=D, n_layers=2, n_heads=4, max_len=32, qkv_bias=False,
                    scan_layers=True)
  params = _sbjax_params(cfg)
  for name in ("q_bias", "k_bias", "v_bias", "o_bias"):
    params["blocks"]["attn"].pop(name, None)
  params["blocks"]["attn"]["o_bias"] = np.zeros((2, D), np.float32)
  export_hf(cfg, params, str(tmp_path))
  conf = json.load(open(tmp_path / "config.json"))
  assert conf["attention_bias"] is False
  cfg2, params2 = import_hf(str(tmp_path))
  assert not cfg2.qkv_bias and not cfg2.scan_layers
  from sbjax.model import unstack_blocks
  assert_tree_equal(params2, unstack_blocks(params, 2))


def test_export_refusals(tmp_path):
  mos = ModelConfig(vocab_size=V, d_model=D, n_layers=1, n_heads=4, head=MoSHead(n_mix=2))
  with pytest.raises(ValueError, match="mixture-of-softmaxes"):
    export_hf(mos, _sbjax_params(mos), str(tmp_path))
  assert not os.path.exists(tmp_path / "config.json")
  bad = ModelConfig(pos="learned", parallel_residual=True, attn_scale=True, qkv_bias=True)
  probs = " ".join(export_problems(bad))
  assert "parallel_residual" in probs and "attn_scale" in probs and "qkv_bias" in probs
  local = ModelConfig(n_layers=2, attention_layers=("global", "local"))
  assert "local" in " ".join(export_problems(local))
  assert "attn_scale" in " ".join(export_problems(ModelConfig(attn_scale=False)))
  cfg = ModelConfig(vocab_size=V, d_model=D, n_layers=1, n_heads=4)
  p = _sbjax_params(cfg)
  p["head"]["w"] = np.zeros((V + 1, D), np.float32)
  with pytest.raises(ValueError, match=r"\['head'\]\['w'\]: got \(98, 64\)"):
    export_hf(cfg, p, str(tmp_path))


def test_buffers_and_lm_head_naming_accepted(tmp_path):
  """Old checkpoints carry mask/rotary buffers; transformers-5 may name the head lm_head."""
  neox(tmp_path, seed=11)
  _, ref = import_hf(str(tmp_path))

  def edit(t):
    t["gpt_neox.layers.0.attention.bias"] = np.tril(np.ones((1, 1, 8, 8), bool))
    t["gpt_neox.layers.0.attention.masked_bias"] = np.array(-1e9, np.float32)
    t["gpt_neox.layers.1.attention.rotary_emb.inv_freq"] = np.ones((4,), np.float32)
    t["lm_head.weight"] = t.pop("embed_out.weight")
  _rewrite(tmp_path, edit)
  _, p = import_hf(str(tmp_path))
  assert_tree_equal(p, ref)


def test_export_bfloat16_loads(tmp_path):
  cfg = ModelConfig(vocab_size=V, d_model=D, n_layers=2, n_heads=4, max_len=32, head="tied",
                    **{**NEO_LIKE, "attention_layers": ("global", "local")})
  params = _sbjax_params(cfg)
  export_hf(cfg, params, str(tmp_path), dtype="bfloat16")
  hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path))
  w = hf.transformer.h[0].attn.attention.q_proj.weight.detach().float().numpy()
  assert 0 < maxdiff(w, params["block_0"]["attn"]["q_kernel"].reshape(D, D).T) < 1e-2
  cfg2, p2 = import_hf(str(tmp_path))
  assert cfg2 == cfg and p2["embed"].dtype == np.float32


def test_pythia_style_config_keys(tmp_path):
  """Pythia's config.json predates rope_parameters: rotary_pct / rotary_emb_base."""
  neox(tmp_path, pct=0.5, seed=12)
  f = tmp_path / "config.json"
  c = json.loads(f.read_text())
  c.pop("rope_parameters")
  c.update(rotary_pct=0.5, rotary_emb_base=500, rope_scaling=None)
  f.write_text(json.dumps(c))
  cfg, _ = import_hf(str(tmp_path))
  assert (cfg.rotary_pct, cfg.rotary_base) == (0.5, 500.0)
