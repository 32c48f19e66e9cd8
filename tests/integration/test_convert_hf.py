"""Hugging Face import/export (sbjax.convert) against transformers (torch, CPU).

Small random GPT-NeoX / GPT-Neo models are built from configs (no hub), saved with
``save_pretrained`` and imported: logits and the intermediates the analysis uses match
transformers to 1e-4 in float32, and so does a training step (loss, gradients, the AdamW
update). Exported sbjax models load in transformers with the same logits and read back."""

import dataclasses
import json
import os
import shutil

import jax
import numpy as np
import optax
import pytest
import torch
import transformers
from safetensors.numpy import load_file, save_file

from sbjax.config import ModelConfig, TrainConfig
from sbjax.convert import export_hf, export_problems, import_hf
from sbjax.convert.hf_export import hf_tensors
from sbjax.heads.lowrank import LowRankHead
from sbjax.heads.mos import MoSHead
from sbjax.model import Model, unstack_blocks
from sbjax.optim import decay_mask, make_optimizer
from sbjax.train import make_train_step

V, D, T = 97, 64, 24
TOL = 1e-4
transformers.logging.set_verbosity_error()


def _perturb(m, seed):
  """Randomise every parameter (LayerNorm weights and all biases too)."""
  g = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for _, p in m.named_parameters():
      p.add_(0.1 * torch.randn(p.shape, generator=g))
  return m.eval()


def neox(path, *, pct=0.25, parallel=True, seed=0, save=True, **kw):
  torch.manual_seed(seed)
  c = transformers.GPTNeoXConfig(
      vocab_size=V, hidden_size=D, num_hidden_layers=3, num_attention_heads=4,
      intermediate_size=128, max_position_embeddings=64, rotary_pct=pct,
      use_parallel_residual=parallel, initializer_range=0.1, bos_token_id=0, eos_token_id=0,
      **kw)
  m = _perturb(transformers.GPTNeoXForCausalLM(c), seed)
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
  assert maxdiff(scores, logits) <= TOL and np.abs(logits).max() > 1.0  # not trivially small
  # transformers' hidden_states: [embeddings, block_0 out, ..., block_{L-2} out, ln_f(block_{L-1})]
  assert len(hs) == cfg.n_layers + 1 and maxdiff(ex["h"], hs[-1]) <= TOL
  assert maxdiff(ex["resid"][:-1], np.stack(hs[1:-1])) <= TOL
  assert maxdiff(ex["resid"][-1], last) <= TOL


# ----------------------------------------------------------------------------- import parity


@pytest.mark.parametrize("pct,parallel,kw", [
    (0.25, True, {}), (1.0, False, dict(attention_bias=False, tie_word_embeddings=True))])
def test_neox_parity(tmp_path, pct, parallel, kw):
  m = neox(tmp_path, pct=pct, parallel=parallel, seed=int(pct * 4) + parallel, **kw)
  cfg, params = import_hf(str(tmp_path))
  assert (cfg.pos, cfg.rotary_pct, cfg.parallel_residual) == ("rotary", pct, parallel)
  assert cfg.head.kind == ("tied" if kw else "dense") and cfg.qkv_bias == (not kw)
  assert cfg.max_len == 64 and cfg.attn_scale and cfg.gelu == "exact"
  assert all(x.dtype == np.float32 for x in jax.tree.leaves(params))
  check_parity(m, cfg, params, tokens())


def test_neo_parity_local_window_tied_unscaled(tmp_path):
  torch.manual_seed(0)
  m = _perturb(transformers.GPTNeoForCausalLM(transformers.GPTNeoConfig(
      vocab_size=V, hidden_size=D, num_layers=4, num_heads=4, max_position_embeddings=64,
      attention_types=[[["global", "local"], 2]], window_size=4, initializer_range=0.1,
      bos_token_id=0, eos_token_id=0)), 0)
  m.save_pretrained(str(tmp_path))
  cfg, params = import_hf(str(tmp_path))
  assert cfg.pos == "learned" and not cfg.parallel_residual and not cfg.attn_scale
  assert not cfg.qkv_bias and cfg.head.kind == "tied" and cfg.gelu == "tanh"
  assert cfg.attention_layers == ("global", "local", "global", "local") and cfg.window_size == 4
  check_parity(m, cfg, params, tokens())  # T=24 > window: the window matters
  for wrong in (dataclasses.replace(cfg, attn_scale=True),
                dataclasses.replace(cfg, attention_layers=())):  # both would break parity
    assert maxdiff(Model(wrong).apply(params, tokens()), hf_run(m, tokens())[0]) > 1e-2


def test_a_train_step_equals_transformers(tmp_path):
  """One step on a transformers-saved GPT-NeoX: sbjax's train step (next-token loss, global
  norm clipping, AdamW with decay on matrices only) against the same step in torch; the
  gradients and updated weights compared in the Hugging Face layout (``hf_tensors``); torch
  decays the tensors that sbjax's ``decay_mask`` decays.
  eps = 1e-3: the rotary-free k-bias dims have an analytic zero gradient, whose float32
  noise Adam with eps = 1e-8 would turn into ±lr updates of random sign on both sides."""
  m = neox(tmp_path, seed=2).train()
  cfg, params = import_hf(str(tmp_path))
  tc = TrainConfig(lr=1e-3, warmup_steps=0, steps=100, eps=1e-3, clip=0.5, batch_size=2,
                   seq_len=16)
  batch = tokens(2, 17, seed=3)
  tx = make_optimizer(tc, cfg, params)
  loss_grad = jax.jit(jax.value_and_grad(lambda p: Model(cfg).loss(p, batch)[0]))
  loss, grads = loss_grad(params)
  new, _, metrics = jax.jit(make_train_step(Model(cfg), tx, 1, False))(
      params, tx.init(params), batch, 0)
  # (transformers 5 names the head lm_head)
  names = {k.replace("lm_head.", "embed_out."): p for k, p in m.named_parameters()}
  mask = hf_tensors(cfg, jax.tree.map(lambda a, d: np.full(a.shape, float(d)), params,
                                      decay_mask(params)))[0]  # sbjax's decayed leaves
  groups = [{"params": [p for k, p in names.items() if mask[k].all() == decay],
             "weight_decay": tc.weight_decay * decay} for decay in (True, False)]
  opt = torch.optim.AdamW(groups, lr=tc.lr, betas=(tc.b1, tc.b2), eps=tc.eps)
  x = torch.tensor(batch)
  theirs = torch.nn.functional.cross_entropy(m(x[:, :-1]).logits.reshape(-1, V),
                                             x[:, 1:].reshape(-1))
  theirs.backward()
  their_grads = {k: p.grad.numpy().copy() for k, p in names.items()}
  torch.nn.utils.clip_grad_norm_(m.parameters(), tc.clip)
  opt.step()
  assert abs(float(loss) - theirs.item()) < 1e-5 and float(metrics["loss"]) == float(loss)
  assert float(optax.tree.norm(grads)) > tc.clip  # the clipping is exercised
  mine_g, mine_p = hf_tensors(cfg, jax.tree.map(np.asarray, grads))[0], hf_tensors(
      cfg, jax.tree.map(np.asarray, new))[0]
  for k, p in names.items():
    np.testing.assert_allclose(mine_g[k], their_grads[k], rtol=1e-3, atol=1e-6, err_msg=k)
    np.testing.assert_allclose(mine_p[k], p.detach().numpy(), rtol=0, atol=2e-6, err_msg=k)


def test_sharded_and_bfloat16_checkpoints(tmp_path):
  m = neox(tmp_path / "single", seed=5)
  m.save_pretrained(str(tmp_path / "sharded"), max_shard_size="40KB")
  assert len([f for f in os.listdir(tmp_path / "sharded") if f.endswith(".safetensors")]) > 1
  c1, p1 = import_hf(str(tmp_path / "single"))
  c2, p2 = import_hf(str(tmp_path / "sharded"))
  assert c1 == c2
  assert_tree_equal(p1, p2)
  c3, p3 = import_hf(str(tmp_path / "single"), dtype="bfloat16")
  assert c3.param_dtype == "bfloat16" and {str(x.dtype) for x in jax.tree.leaves(p3)} == {
      "bfloat16"}
  m.to(torch.bfloat16).save_pretrained(str(tmp_path / "bf16"))  # read as float32
  w = import_hf(str(tmp_path / "bf16"))[1]["block_0"]["attn"]["q_kernel"]
  assert w.dtype == np.float32 and 0 < maxdiff(w, p1["block_0"]["attn"]["q_kernel"]) < 1e-2


# ----------------------------------------------------------------------------- other files


def test_pickle_weights_buffers_lm_head_and_pythia_keys_read_as_the_safetensors(tmp_path):
  """(A pickle without --allow_pickle is refused: the bad-input table.) Pickle weights;
  old checkpoints' mask/rotary buffers and transformers-5's lm_head name; Pythia's
  rotary_pct / rotary_emb_base keys (before rope_parameters)."""
  m = neox(tmp_path / "ref", pct=0.5, seed=7)
  _, ref = import_hf(str(tmp_path / "ref"))
  d = tmp_path / "bin"
  d.mkdir()
  shutil.copy(tmp_path / "ref" / "config.json", d / "config.json")
  torch.save(m.state_dict(), d / "pytorch_model.bin")
  with pytest.warns(UserWarning, match="weights_only=True"):
    assert_tree_equal(import_hf(str(d), allow_pickle=True)[1], ref)

  t = load_file(tmp_path / "ref" / "model.safetensors")
  t["gpt_neox.layers.0.attention.bias"] = np.tril(np.ones((1, 1, 8, 8), bool))
  t["gpt_neox.layers.0.attention.masked_bias"] = np.array(-1e9, np.float32)
  t["gpt_neox.layers.1.attention.rotary_emb.inv_freq"] = np.ones((4,), np.float32)
  t["lm_head.weight"] = t.pop("embed_out.weight")
  save_file(t, tmp_path / "ref" / "model.safetensors")
  c = json.loads((tmp_path / "ref" / "config.json").read_text())
  c.pop("rope_parameters")
  c.update(rotary_pct=0.5, rotary_emb_base=500, rope_scaling=None)
  (tmp_path / "ref" / "config.json").write_text(json.dumps(c))
  cfg, p = import_hf(str(tmp_path / "ref"))
  assert_tree_equal(p, ref)
  assert (cfg.rotary_pct, cfg.rotary_base) == (0.5, 500.0)


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
    ("neox_no_qkv_bias", dict(head="dense", qkv_bias=False, parallel_residual=False)),
    ("neox_scan_no_bias", dict(head="dense", qkv_bias=False, scan_layers=True)),
    ("neo_tied", dict(head="tied", **NEO_LIKE)),
    ("neox_lowrank", dict(head=LowRankHead(rank=8))),
])
def test_export_loads_in_transformers_with_the_same_logits_and_reads_back(tmp_path, kind, kw):
  cfg = ModelConfig(vocab_size=V, d_model=D, n_layers=3, n_heads=4, max_len=32, d_ff=96,
                    init_std=0.2, **kw)
  params = _sbjax_params(cfg)
  if cfg.scan_layers:  # no output biases either: written as attention_bias=False
    params["blocks"]["attn"]["o_bias"] = np.zeros((3, D), np.float32)
  export_hf(cfg, params, str(tmp_path))
  hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path)).eval()
  assert type(hf).__name__ == ("GPTNeoForCausalLM" if cfg.pos == "learned"
                               else "GPTNeoXForCausalLM")
  with torch.no_grad():
    theirs = hf(torch.tensor(tokens(t=20))).logits.numpy()
  assert maxdiff(Model(cfg).apply(params, tokens(t=20)), theirs) <= TOL
  cfg2, params2 = import_hf(str(tmp_path))
  if kind == "neox_lowrank":  # written as the dense product A·B
    assert cfg2 == dataclasses.replace(cfg, head="dense")
    np.testing.assert_allclose(params2["head"]["w"], params["head"]["a"] @ params["head"]["b"],
                               rtol=0, atol=1e-6)
    rest = lambda p: {k: v for k, v in p.items() if k != "head"}  # noqa: E731
    assert_tree_equal(rest(params2), rest(params))
  elif kind == "neox_no_qkv_bias":  # o_bias is not 0: GPT-NeoX's one flag writes 0 q/k/v biases
    assert cfg2.qkv_bias and not np.any(params2["block_0"]["attn"]["q_bias"])
  else:
    assert cfg2 == dataclasses.replace(cfg, scan_layers=False)
    assert_tree_equal(params2, unstack_blocks(params, 3) if cfg.scan_layers else params)


def test_a_bfloat16_export(tmp_path):
  neo = ModelConfig(vocab_size=V, d_model=D, n_layers=2, n_heads=4, max_len=32, head="tied",
                    **{**NEO_LIKE, "attention_layers": ("global", "local")})
  params = _sbjax_params(neo)
  export_hf(neo, params, str(tmp_path), dtype="bfloat16")
  hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path))
  w = hf.transformer.h[0].attn.attention.q_proj.weight.detach().float().numpy()
  assert 0 < maxdiff(w, params["block_0"]["attn"]["q_kernel"].reshape(D, D).T) < 1e-2
  cfg2, p2 = import_hf(str(tmp_path))
  assert cfg2 == neo and p2["embed"].dtype == np.float32


def test_export_refusals(tmp_path):
  mos = ModelConfig(vocab_size=V, d_model=D, n_layers=1, n_heads=4, head=MoSHead(n_mix=2))
  with pytest.raises(ValueError, match="mixture-of-softmaxes"):
    export_hf(mos, _sbjax_params(mos), str(tmp_path))
  assert not os.path.exists(tmp_path / "config.json")
  probs = [export_problems(ModelConfig(pos="learned", parallel_residual=True, attn_scale=True,
                                       qkv_bias=True)), export_problems(ModelConfig(
      n_layers=2, attention_layers=("global", "local"), attn_scale=False))]
  assert [[p.split("=")[0] for p in ps] for ps in probs] == [
      ["model.parallel_residual", "model.attn_scale", "model.qkv_bias"],
      ["model.attn_scale", "model.attention_layers has local layers with pos"]]
  cfg = ModelConfig(vocab_size=V, d_model=D, n_layers=1, n_heads=4)
  p = _sbjax_params(cfg)
  p["head"]["w"] = np.zeros((V + 1, D), np.float32)
  with pytest.raises(ValueError, match=r"\['head'\]\['w'\]: got \(98, 64\)"):
    export_hf(cfg, p, str(tmp_path))
