"""Export an sbjax model as a Hugging Face directory (config.json + model.safetensors).

``export_hf(cfg, params, DIR)`` writes a directory that ``transformers.AutoModelForCausalLM``
loads: ``pos="rotary"`` as ``GPTNeoXForCausalLM``, ``pos="learned"`` as ``GPTNeoForCausalLM``
(the tensors as ``hf_import.layout`` lists them). The head follows its kind's HF mapping
(``sbjax.heads``): low-rank heads are written as the dense product A·B (the function is
identical; the factorisation is lost); MoS heads cannot be expressed.
``export_problems(cfg)`` lists every reason a config has no exact equivalent.
"""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import numpy as np

from sbjax import heads
from sbjax import model as model_lib
from sbjax._extras import require
from sbjax.atomic import atomic_write_bytes, atomic_write_text
from sbjax.config import ModelConfig
from sbjax.convert import hf_import
from sbjax.convert.hf_import import _np_dtype
from sbjax.paths import upath

_GELU_NAMES = {"exact": "gelu", "tanh": "gelu_new"}


def architecture(cfg: ModelConfig) -> str:
  return "gpt_neox" if cfg.pos == "rotary" else "gpt_neo"


def export_problems(cfg: ModelConfig) -> list[str]:
  """Reasons this config has no exact GPT-NeoX/GPT-Neo equivalent ([] if exportable)."""
  out = []
  head_problem = heads.get(cfg.head).hf_problem(cfg)
  if head_problem:
    out.append(head_problem)
  if cfg.pos == "rotary":
    if not cfg.attn_scale:
      out.append("model.attn_scale=False with pos='rotary': GPT-NeoX always scales "
                 "attention scores by 1/sqrt(head_dim)")
    if "local" in cfg.layer_kinds():
      out.append("model.attention_layers has local layers with pos='rotary': GPT-NeoX "
                 "has no local (windowed) attention; GPT-Neo has no rotary embeddings")
  else:
    if cfg.parallel_residual:
      out.append("model.parallel_residual=True with pos='learned': GPT-Neo is sequential "
                 "and GPT-NeoX has no learned positions")
    if cfg.attn_scale:
      out.append("model.attn_scale=True with pos='learned': GPT-Neo does not scale "
                 "attention scores")
    if cfg.qkv_bias:
      out.append("model.qkv_bias=True with pos='learned': GPT-Neo q/k/v projections "
                 "have no bias")
  return out


def hf_config(cfg: ModelConfig, dtype: str = "float32", o_bias_zero: bool = False) -> dict:
  """The ``config.json`` dict for this (exportable) config."""
  common = {"vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model,
            "intermediate_size": cfg.ff_dim, "max_position_embeddings": cfg.max_len,
            "initializer_range": cfg.init_std, "bos_token_id": None, "eos_token_id": None,
            "pad_token_id": None, "use_cache": True, "dtype": dtype, "torch_dtype": dtype}
  if architecture(cfg) == "gpt_neox":
    return {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", **common,
            "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
            "hidden_act": _GELU_NAMES[cfg.gelu], "layer_norm_eps": cfg.ln_eps,
            "use_parallel_residual": cfg.parallel_residual,
            # both the transformers-5 rope dict and the original Pythia keys
            "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rotary_base,
                                "partial_rotary_factor": cfg.rotary_pct},
            "rotary_pct": cfg.rotary_pct, "rotary_emb_base": cfg.rotary_base,
            "attention_bias": cfg.qkv_bias or not o_bias_zero,
            "tie_word_embeddings": heads.get(cfg.head).hf_tied is True,
            "attention_dropout": 0.0, "hidden_dropout": 0.0}
  kinds = list(cfg.layer_kinds())
  return {"architectures": ["GPTNeoForCausalLM"], "model_type": "gpt_neo", **common,
          "num_layers": cfg.n_layers, "num_heads": cfg.n_heads,
          "attention_types": [[kinds, 1]], "attention_layers": kinds,
          "window_size": cfg.window_size, "activation_function": _GELU_NAMES[cfg.gelu],
          "layer_norm_epsilon": cfg.ln_eps,
          "tie_word_embeddings": heads.get(cfg.head).hf_tied is True,
          "embed_dropout": 0.0, "attention_dropout": 0.0, "resid_dropout": 0.0}


def _check_params(cfg: ModelConfig, params) -> dict:
  """Unrolled numpy params; raises ValueError listing missing/unknown/mis-shaped leaves."""
  if "blocks" in params:
    params = model_lib.unstack_blocks(params, cfg.n_layers)
  unrolled = cfg if not cfg.scan_layers else dataclasses.replace(cfg, scan_layers=False)
  want = model_lib.Model(unrolled).abstract_params(seq_len=1)
  flat_w = {jax.tree_util.keystr(k): v.shape for k, v in
            jax.tree_util.tree_flatten_with_path(want)[0]}
  flat_p = {jax.tree_util.keystr(k): np.shape(v) for k, v in
            jax.tree_util.tree_flatten_with_path(params)[0]}
  missing = sorted(set(flat_w) - set(flat_p))
  unknown = sorted(set(flat_p) - set(flat_w))
  shapes = sorted(f"{k}: got {flat_p[k]}, expected {flat_w[k]}"
                  for k in set(flat_w) & set(flat_p) if tuple(flat_p[k]) != tuple(flat_w[k]))
  if missing or unknown or shapes:
    raise ValueError(f"params do not match the model config: missing {missing}; "
                     f"unknown {unknown}; shape mismatches {shapes}")
  return jax.tree.map(lambda x: np.asarray(x, dtype=np.float32), params)


def _hf_tensor(leaves: list, path: tuple, shape: tuple, leaf_shape: tuple | None):
  """The HF tensor of its sbjax leaves (``hf_import.layout``; q, k and v for a fused one)."""
  if "{}" in path[-1]:  # H×3×Dh(×D), rows (head, {q,k,v}, Dh)
    return np.stack([x.transpose(1, 2, 0) if x.ndim == 3 else x for x in leaves],
                    axis=1).reshape(shape)
  return leaves[0] if leaf_shape is None else leaves[0].reshape(shape[::-1]).T


def hf_tensors(cfg: ModelConfig, params) -> tuple[dict, dict]:
  """(HF tensor dict in float32, {"o_bias_zero"}) for an exportable config. GPT-NeoX ties its
  q/k/v and output biases to one ``attention_bias`` flag: without q/k/v biases they are
  written as zeros, or left out (``o_bias_zero``) when every output bias is zero too."""
  problems = export_problems(cfg)
  if problems:
    raise ValueError("cannot export this sbjax model to Hugging Face: " + "; ".join(problems))
  p = _check_params(cfg, params)
  mt = architecture(cfg)
  o_bias_zero = mt == "gpt_neox" and not cfg.qkv_bias and all(
      not np.any(p[f"block_{i}"]["attn"]["o_bias"]) for i in range(cfg.n_layers))
  zero = np.zeros((cfg.n_heads, cfg.head_dim), np.float32)  # a q/k/v bias sbjax does not have
  t = {}
  for name, path, shape, leaf_shape in hf_import.layout(cfg, mt, biases=not o_bias_zero):
    tree = p
    for key in path[:-1]:
      tree = tree[key]
    leaves = [tree.get(path[-1].format(n), zero) for n in "qkv"]
    t[name] = _hf_tensor(leaves, path, shape, leaf_shape)
  head_w = heads.get(cfg.head).hf_weight(p, cfg)  # None: tied to the embedding
  if head_w is not None:
    t[hf_import.HEAD_NAMES[mt]] = head_w
  return t, {"o_bias_zero": o_bias_zero}


def workdir_marks(path) -> list[str]:
  """What makes ``path`` an sbjax workdir: a checkpoints/ directory, a metrics.jsonl, or a
  config.json of sbjax (a ``model`` section, no HF ``model_type``); [] for anything else."""
  p = upath(path)  # gs://...: through etils.epath
  marks = [n for n in ("checkpoints", "metrics.jsonl") if (p / n).exists()]
  try:
    conf = json.loads((p / "config.json").read_text())
  except (OSError, ValueError):
    conf = None
  if isinstance(conf, dict) and isinstance(conf.get("model"), dict) and "model_type" not in conf:
    marks.append("an sbjax config.json")
  return marks


def check_export_target(out_dir: str, *, overwrite: bool = False) -> None:
  """An export never writes into an sbjax workdir, and replaces the files of a non-empty
  directory only with ``overwrite``; ValueError naming the directory and the fix."""
  out = upath(out_dir)
  if not out.exists():
    return
  if not out.is_dir():
    raise ValueError(f"--to_hf={out_dir} is a file, not a directory; give a new directory")
  marks = workdir_marks(out_dir)
  if marks:
    raise ValueError(f"--to_hf={out_dir} is an sbjax workdir (it holds {', '.join(marks)}); an "
                     "export never writes into a workdir: give a new directory, e.g. "
                     f"--to_hf={os.path.join(out_dir.rstrip(os.sep), 'hf')}")
  entries = sorted(e.name for e in out.iterdir())
  if entries and not overwrite:
    raise ValueError(f"--to_hf={out_dir} is not empty ({len(entries)} entries: "
                     f"{', '.join(entries[:4])}{', ...' if len(entries) > 4 else ''}); give a "
                     "new or empty directory, or --overwrite to replace its files")


def export_hf(cfg: ModelConfig, params, out_dir: str, *, dtype: str = "float32") -> str:
  """Write ``out_dir/config.json`` and ``out_dir/model.safetensors`` (atomically, replacing a
  link there rather than writing through it: ``sbjax.atomic``); returns out_dir.
  Refuses an sbjax workdir (``check_export_target``; the CLI also refuses a non-empty
  directory unless ``--overwrite``)."""
  check_export_target(out_dir, overwrite=True)
  tensors, info = hf_tensors(cfg, params)
  conf = hf_config(cfg, dtype, o_bias_zero=info["o_bias_zero"])
  require("writing safetensors", "hf", ("safetensors",))
  from safetensors.numpy import save  # noqa: PLC0415 - the [hf] extra

  npd = _np_dtype(dtype)
  atomic_write_bytes(os.path.join(out_dir, "model.safetensors"),
                     save({k: np.ascontiguousarray(v, npd) for k, v in tensors.items()},
                          metadata={"format": "pt"}))
  atomic_write_text(os.path.join(out_dir, "config.json"), json.dumps(conf, indent=2,
                                                                     sort_keys=True))
  return out_dir
