"""Import Hugging Face GPT-NeoX (Pythia) and GPT-Neo checkpoints into sbjax.

``import_hf(DIR)`` reads ``DIR/config.json`` and the weights next to it and
returns ``(ModelConfig, params)``: the sbjax parameter pytree (see
``sbjax.model``) of numpy arrays, float32 unless ``dtype`` says otherwise::

    cfg, params = import_hf("pythia-70m/step143000")
    logits = Model(cfg).apply(params, tokens_BxT)

Weights: ``model.safetensors``, or shards listed in ``model.safetensors.index.json``.
PyTorch pickles (``pytorch_model.bin``, sharded or not) are refused unless
``allow_pickle=True``, and then loaded with ``torch.load(weights_only=True)``.

The tensors map as ``layout`` lists them; GPT-NeoX's ``attention_bias=False`` drops the
q/k/v biases and sets the (always present) sbjax o_bias to zero, and GPT-Neo has no
1/sqrt(head_dim) score scaling (``attn_scale=False``) and per-layer global/local attention.

Every problem (missing or unknown tensors, wrong shapes, unsupported model types,
activations or rope variants) raises ``ValueError`` naming the offending items.
"""

from __future__ import annotations

import json
import os
import warnings

import jax
import ml_dtypes
import numpy as np

from sbjax import heads
from sbjax._extras import require
from sbjax.config import Config, ModelConfig, TrainConfig
from sbjax.convert.torch_pickle import load_pickle

SUPPORTED_MODEL_TYPES = ("gpt_neox", "gpt_neo")
SUPPORTED_ARCHITECTURES = ("GPTNeoXForCausalLM", "GPTNeoForCausalLM")

# HF activation name -> sbjax ModelConfig.gelu
ACTIVATIONS = {
    "gelu": "exact", "gelu_python": "exact",
    "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu_fast": "tanh",
}

# Non-parameter buffers that old checkpoints carry (causal-mask and rotary caches):
# recomputed by both transformers and sbjax, so they are skipped, not "unknown".
_BUFFER_SUFFIXES = (".attention.bias", ".attention.masked_bias", ".rotary_emb.inv_freq",
                    ".attn.attention.bias", ".attn.attention.masked_bias")

SAFE_SINGLE = "model.safetensors"
SAFE_INDEX = "model.safetensors.index.json"
PICKLE_SINGLE = "pytorch_model.bin"
PICKLE_INDEX = "pytorch_model.bin.index.json"


def _list(names, limit: int = 40) -> str:
  names = sorted(names)
  more = f" ... (+{len(names) - limit} more)" if len(names) > limit else ""
  return ", ".join(names[:limit]) + more


# ----------------------------------------------------------------------------- config


# the keys of config.json each architecture needs (the rest have Hugging Face's defaults)
NEEDED_KEYS = {"gpt_neox": ("vocab_size", "hidden_size", "num_hidden_layers",
                            "num_attention_heads"),
               "gpt_neo": ("vocab_size", "hidden_size", ("num_layers", "num_hidden_layers"),
                           ("num_heads", "num_attention_heads"))}


def read_hf_config(path: str) -> dict:
  """The object of ``path/config.json``; ValueError naming the file when it is missing or no
  JSON object."""
  f = os.path.join(path, "config.json")
  if not os.path.isfile(f):
    raise ValueError(f"{path}: no config.json; expected a Hugging Face model directory")
  try:
    with open(f) as fh:
      hf = json.load(fh)
  except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
    raise ValueError(f"{f} is not valid JSON ({e})") from None
  if not isinstance(hf, dict):
    raise ValueError(f"{f} holds a JSON {type(hf).__name__}, not a config object")
  return hf


def _check_type(hf: dict, where: str = "") -> str:
  mt = hf.get("model_type")
  archs = hf.get("architectures") or []
  bad_arch = [a for a in archs if a not in SUPPORTED_ARCHITECTURES]
  if mt not in SUPPORTED_MODEL_TYPES:
    raise ValueError(f"{where}unsupported model_type {mt!r} (architectures {archs}); "
                     f"supported model_type: {list(SUPPORTED_MODEL_TYPES)}")
  if bad_arch:
    raise ValueError(f"{where}unsupported architectures {bad_arch}; supported: "
                     f"{list(SUPPORTED_ARCHITECTURES)} (sbjax imports causal-LM checkpoints)")
  return mt


def _activation(name, key: str, where: str) -> str:
  if name not in ACTIVATIONS:
    raise ValueError(f"{where}unsupported activation {key}={name!r}; supported: "
                     f"{sorted(ACTIVATIONS)}")
  return ACTIVATIONS[name]


def _neox_rope(hf: dict, where: str) -> tuple[float, float]:
  rp = dict(hf.get("rope_parameters") or {})
  scaling = hf.get("rope_scaling")
  if scaling:
    rp = {**dict(scaling), **rp}
  rope_type = rp.get("rope_type", rp.get("type", "default"))
  if rope_type != "default":
    raise ValueError(f"{where}unsupported rope_type {rope_type!r} (rope scaling); sbjax "
                     "supports plain rotary embeddings (rope_type 'default') only")
  pct = rp.get("partial_rotary_factor", hf.get("rotary_pct", 0.25))
  base = rp.get("rope_theta", hf.get("rotary_emb_base", 10000.0))
  return float(pct), float(base)


def model_config_from_hf(hf: dict, *, param_dtype: str = "float32", where: str = "") -> ModelConfig:
  """The sbjax ModelConfig for a HF ``config.json`` dict (gpt_neox or gpt_neo); ValueError
  naming ``where``'s config.json for a key it lacks or a value sbjax refuses."""
  mt = _check_type(hf, where)
  missing = [k if isinstance(k, str) else " or ".join(k) for k in NEEDED_KEYS[mt]
             if not any(x in hf for x in ((k,) if isinstance(k, str) else k))]
  if missing:
    raise ValueError(f"{where}config.json lacks {', '.join(missing)}, which a {mt} config needs")
  try:
    return _model_config(hf, mt, param_dtype, where)
  except (TypeError, ValueError) as e:  # a value of the wrong type or range (named by Config)
    raise ValueError(f"{where}config.json: {e}") from None


def _model_config(hf: dict, mt: str, param_dtype: str, where: str) -> ModelConfig:
  if mt == "gpt_neox":
    d = hf["hidden_size"]
    pct, base = _neox_rope(hf, where)
    ff = hf.get("intermediate_size") or 4 * d
    return ModelConfig(
        vocab_size=hf["vocab_size"], d_model=d, n_layers=hf["num_hidden_layers"],
        n_heads=hf["num_attention_heads"], d_ff=0 if ff == 4 * d else ff,
        max_len=hf.get("max_position_embeddings", 2048), pos="rotary", rotary_pct=pct,
        rotary_base=base, parallel_residual=bool(hf.get("use_parallel_residual", True)),
        ln_eps=float(hf.get("layer_norm_eps", 1e-5)),
        gelu=_activation(hf.get("hidden_act", "gelu"), "hidden_act", where),
        qkv_bias=bool(hf.get("attention_bias", True)), attn_scale=True,
        head=heads.for_hf(bool(hf.get("tie_word_embeddings", False))).name,
        init_std=float(hf.get("initializer_range", 0.02)), param_dtype=param_dtype)
  # gpt_neo
  d = hf["hidden_size"]
  n_layers = hf.get("num_layers", hf.get("num_hidden_layers"))
  layers = hf.get("attention_layers")
  if not layers:
    types = hf.get("attention_types") or [[["global", "local"], n_layers // 2]]
    layers = [a for pattern, n in types for _ in range(n) for a in pattern]
  layers = tuple(layers)  # their kinds and count: checked by ModelConfig
  ff = hf.get("intermediate_size") or 4 * d
  return ModelConfig(
      vocab_size=hf["vocab_size"], d_model=d, n_layers=n_layers,
      n_heads=hf.get("num_heads", hf.get("num_attention_heads")), d_ff=0 if ff == 4 * d else ff,
      max_len=hf.get("max_position_embeddings", 2048), pos="learned",
      parallel_residual=False, ln_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
      gelu=_activation(hf.get("activation_function", "gelu_new"), "activation_function", where),
      qkv_bias=False, attn_scale=False,
      attention_layers=() if all(a == "global" for a in layers) else layers,
      window_size=int(hf.get("window_size", 256)),
      head=heads.for_hf(hf.get("tie_word_embeddings", True) is not False).name,
      init_std=float(hf.get("initializer_range", 0.02)), param_dtype=param_dtype)


def full_config(model: ModelConfig, name: str = "hf_import") -> Config:
  """A complete sbjax Config around an imported ModelConfig (default data/train)."""
  return Config(model=model, train=TrainConfig(seq_len=min(128, model.max_len)), name=name)


# ----------------------------------------------------------------------------- key layout


def _head_tensor(cfg: ModelConfig) -> bool:  # its own V×d head tensor (an untied HF head)
  return heads.get(cfg.head).hf_imports and heads.get(cfg.head).hf_tied is False


HEAD_NAMES = {"gpt_neox": "embed_out.weight", "gpt_neo": "lm_head.weight"}


def layout(cfg: ModelConfig, model_type: str, biases: bool = True) -> list[tuple]:
  """(HF name, sbjax param path, HF shape, sbjax shape) of every tensor but the head's
  (``HEAD_NAMES``, mapped by ``sbjax.heads``). An HF tensor is its leaf as it is (sbjax shape
  None), or the leaf reshaped to the transposed HF shape and transposed (an HF Linear weight
  is out×in; sbjax mlp kernels are in×out, q/k/v D×H×Dh, o H×Dh×D). A path with "{}" is
  GPT-NeoX's fused, head-major query_key_value of the q, k and v leaves: rows (head, {q,k,v},
  Dh). ``biases``: GPT-NeoX's attention biases (its ``attention_bias``)."""
  d, f, neox = cfg.d_model, cfg.ff_dim, model_type == "gpt_neox"
  qkv, o = (d, cfg.n_heads, cfg.head_dim), (cfg.n_heads, cfg.head_dim, d)
  out = [("gpt_neox.embed_in.weight" if neox else "transformer.wte.weight", ("embed",),
          (cfg.vocab_size, d), None)]

  def ln(hf, path):
    out.extend([(hf + ".weight", path + ("scale",), (d,), None),
                (hf + ".bias", path + ("bias",), (d,), None)])

  def mlp(hf_in, hf_out, b):
    out.extend([(hf_in + ".weight", (b, "mlp", "fc_in_kernel"), (f, d), (d, f)),
                (hf_in + ".bias", (b, "mlp", "fc_in_bias"), (f,), None),
                (hf_out + ".weight", (b, "mlp", "fc_out_kernel"), (d, f), (f, d)),
                (hf_out + ".bias", (b, "mlp", "fc_out_bias"), (d,), None)])

  if not neox:
    out.append(("transformer.wpe.weight", ("pos_embed",), (cfg.max_len, d), None))
  for i in range(cfg.n_layers):
    b = f"block_{i}"
    if neox:
      p = f"gpt_neox.layers.{i}."
      ln(p + "input_layernorm", (b, "ln1"))
      ln(p + "post_attention_layernorm", (b, "ln2"))
      out += [(p + "attention.query_key_value.weight", (b, "attn", "{}_kernel"), (3 * d, d), qkv),
              (p + "attention.dense.weight", (b, "attn", "o_kernel"), (d, d), o)]
      if biases:
        out += [(p + "attention.query_key_value.bias", (b, "attn", "{}_bias"), (3 * d,), qkv[1:]),
                (p + "attention.dense.bias", (b, "attn", "o_bias"), (d,), None)]
      mlp(p + "mlp.dense_h_to_4h", p + "mlp.dense_4h_to_h", b)
    else:
      p, a = f"transformer.h.{i}.", f"transformer.h.{i}.attn.attention."
      ln(p + "ln_1", (b, "ln1"))
      ln(p + "ln_2", (b, "ln2"))
      out += [(a + f"{n}_proj.weight", (b, "attn", f"{n}_kernel"), (d, d), qkv) for n in "qkv"]
      out += [(a + "out_proj.weight", (b, "attn", "o_kernel"), (d, d), o),
              (a + "out_proj.bias", (b, "attn", "o_bias"), (d,), None)]
      mlp(p + "mlp.c_fc", p + "mlp.c_proj", b)
  ln("gpt_neox.final_layer_norm" if neox else "transformer.ln_f", ("ln_f",))
  return out


def expected_shapes(cfg: ModelConfig, model_type: str) -> dict[str, tuple]:
  """HF tensor name -> shape for a model of this config (the names import needs)."""
  s = {name: shape for name, _, shape, _ in layout(cfg, model_type, cfg.qkv_bias)}
  if _head_tensor(cfg):
    s[HEAD_NAMES[model_type]] = (cfg.vocab_size, cfg.d_model)
  return s


def _normalise_names(tensors: dict, cfg: ModelConfig, model_type: str) -> dict:
  """Accept transformers-5 ``lm_head`` for GPT-NeoX; drop buffers and tied head copies."""
  t = dict(tensors)
  if model_type == "gpt_neox" and "lm_head.weight" in t and "embed_out.weight" not in t:
    t["embed_out.weight"] = t.pop("lm_head.weight")
  for k in [k for k in t if k.endswith(_BUFFER_SUFFIXES)]:
    del t[k]
  if heads.get(cfg.head).hf_tied:
    emb = "gpt_neox.embed_in.weight" if model_type == "gpt_neox" else "transformer.wte.weight"
    for k in ("embed_out.weight", "lm_head.weight"):
      if k in t and emb in t:
        if t[k].shape != t[emb].shape or not np.array_equal(np.asarray(t[k]), np.asarray(t[emb])):
          raise ValueError(f"config ties the head to {emb} (tie_word_embeddings=True) but the "
                           f"checkpoint's {k} differs from it; unknown keys: ['{k}']")
        del t[k]
  return t


def check_tensors(tensors: dict, cfg: ModelConfig, model_type: str, where: str = ""):
  """Raise ValueError listing missing/unknown names and shape mismatches."""
  want = expected_shapes(cfg, model_type)
  missing = sorted(set(want) - set(tensors))
  unknown = sorted(set(tensors) - set(want))
  bad_shape = sorted(f"{k}: got {tuple(tensors[k].shape)}, expected {want[k]}"
                     for k in set(want) & set(tensors) if tuple(tensors[k].shape) != want[k])
  problems = []
  if missing:
    problems.append(f"missing keys ({len(missing)}): {_list(missing)}")
  if unknown:
    problems.append(f"unknown keys ({len(unknown)}): {_list(unknown)}")
  if bad_shape:
    problems.append(f"shape mismatches ({len(bad_shape)}): {_list(bad_shape)}")
  if problems:
    raise ValueError(f"{where}checkpoint does not match its {model_type} config: "
                     + "; ".join(problems))


# ----------------------------------------------------------------------------- weights


def _shards(path: str, index_name: str) -> list[str]:
  with open(os.path.join(path, index_name)) as fh:
    index = json.load(fh)
  files = sorted(set(index.get("weight_map", {}).values()))
  if not files:
    raise ValueError(f"{path}/{index_name}: empty weight_map")
  missing = [f for f in files if not os.path.isfile(os.path.join(path, f))]
  if missing:
    raise ValueError(f"{path}: shard files listed in {index_name} are missing: {missing}")
  return files


def _find(path: str, index: str, single: str, suffix: str) -> list[str]:
  if os.path.isfile(os.path.join(path, index)):
    return [index]
  if os.path.isfile(os.path.join(path, single)):
    return [single]
  return sorted(f for f in os.listdir(path) if f.endswith(suffix))


def weight_files(path: str, allow_pickle: bool = False) -> list[str]:
  """The weight files of a HF model directory: the shards its index lists, else the single
  file, else every file of the kind; safetensors first, PyTorch pickles only with
  ``allow_pickle`` (ValueError naming them otherwise, and when there are no weights)."""
  files = _find(path, SAFE_INDEX, SAFE_SINGLE, ".safetensors")
  if not files:
    files = _find(path, PICKLE_INDEX, PICKLE_SINGLE, ".bin")
    if not files:
      raise ValueError(f"{path}: no weights found (expected {SAFE_SINGLE}, {SAFE_INDEX} "
                       f"or, with allow_pickle, {PICKLE_SINGLE})")
    if not allow_pickle:
      raise ValueError(
          f"{path}: has only PyTorch pickle weights ({', '.join(files)}), no .safetensors. "
          "Unpickling can run arbitrary code, so sbjax refuses it by default; if you trust "
          "this checkpoint pass allow_pickle=True (CLI: --allow_pickle) to load it with "
          "torch.load(weights_only=True), or convert it to safetensors first.")
  return _shards(path, files[0]) if files[0].endswith(".index.json") else files


def read_safetensors(path: str) -> dict[str, np.ndarray]:
  """The tensors of a safetensors file, read by the ``safetensors`` package, which checks its
  header as the format defines it (a JSON object, known dtypes, byte ranges that hold their
  shapes and tile the data section: no gap, overlap or truncation); ValueError naming the
  file."""
  require("reading safetensors", "hf", ("safetensors",))
  from safetensors import SafetensorError, safe_open  # noqa: PLC0415 - the [hf] extra

  try:
    with safe_open(path, framework="numpy") as f:
      return {k: f.get_tensor(k) for k in f.keys()}
  except SafetensorError as e:
    raise ValueError(f"{path}: not a valid safetensors file ({e})") from None


def load_hf_tensors(path: str, *, allow_pickle: bool = False) -> dict[str, np.ndarray]:
  """Name -> array for the weights in a HF model directory (``weight_files``)."""
  files = weight_files(path, allow_pickle)
  if files[0].endswith(".bin"):
    warnings.warn(f"{path}: loading PyTorch pickle weights ({', '.join(files)}) with "
                  "torch.load(weights_only=True) because allow_pickle=True", stacklevel=3)
  out = {}
  for f in files:
    part = (load_pickle if f.endswith(".bin") else read_safetensors)(os.path.join(path, f))
    dup = set(part) & set(out)
    if dup:
      raise ValueError(f"{path}: tensors appear in more than one shard: {_list(dup)}")
    out.update(part)
  return out


# ----------------------------------------------------------------------------- params


def _leaves(x: np.ndarray, path: tuple, leaf_shape: tuple | None) -> list:
  """The sbjax leaves of HF tensor ``x`` (``layout``; q, k and v for a fused one)."""
  if "{}" in path[-1]:
    w = x.reshape(leaf_shape[-2], 3, leaf_shape[-1], *x.shape[1:])  # H×3×Dh(×D)
    return [w[:, j].transpose(2, 0, 1) if x.ndim == 2 else w[:, j] for j in range(3)]
  return [x if leaf_shape is None else x.T.reshape(leaf_shape)]


def params_from_hf(cfg: ModelConfig, tensors: dict, model_type: str, dtype="float32") -> dict:
  """Build the sbjax param pytree from (checked, normalised) HF tensors (``layout``)."""
  p: dict = {}
  for name, path, _, leaf_shape in layout(cfg, model_type, cfg.qkv_bias):
    for n, leaf in zip("qkv", _leaves(np.asarray(tensors[name], np.float32), path, leaf_shape)):
      tree = p
      for key in path[:-1]:
        tree = tree.setdefault(key, {})
      tree[path[-1].format(n)] = leaf
  if model_type == "gpt_neox" and not cfg.qkv_bias:  # sbjax always has an output bias
    for i in range(cfg.n_layers):
      p[f"block_{i}"]["attn"]["o_bias"] = np.zeros((cfg.d_model,), np.float32)
  if _head_tensor(cfg):
    p[heads.HEAD_KEY] = heads.get(cfg.head).hf_params(
        np.asarray(tensors[HEAD_NAMES[model_type]], np.float32), cfg)
  dt = np.dtype(dtype) if not isinstance(dtype, str) else _np_dtype(dtype)
  return jax.tree.map(lambda x: np.ascontiguousarray(x).astype(dt), p)


def _np_dtype(name: str) -> np.dtype:
  return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def check_finite(tensors: dict, where: str) -> None:
  """Refuse weights holding NaN or inf, naming the tensors."""
  bad = [name for name, t in tensors.items()
         if t.dtype.kind in "fV" and not np.isfinite(np.asarray(t, np.float32)).all()]
  if bad:
    raise ValueError(f"{where}weights hold NaN or inf values in {len(bad)} tensor(s): "
                     f"{_list(bad, 8)}; nothing was imported. Use an intact checkpoint, or pass "
                     "--allow_nonfinite (allow_nonfinite=True) to import them as they are")


def import_hf(path: str, *, dtype: str = "float32", allow_pickle: bool = False,
              allow_nonfinite: bool = False) -> tuple[ModelConfig, dict]:
  """(ModelConfig, params) from a local HF GPT-NeoX/GPT-Neo directory. Weights holding NaN or
  inf are refused, naming the tensors, unless ``allow_nonfinite``."""
  where = f"{path}: "
  hf = read_hf_config(path)
  cfg = model_config_from_hf(hf, param_dtype=dtype, where=where)
  mt = hf["model_type"]
  tensors = _normalise_names(load_hf_tensors(path, allow_pickle=allow_pickle), cfg, mt)
  check_tensors(tensors, cfg, mt, where)
  if not allow_nonfinite:
    check_finite(tensors, where)
  return cfg, params_from_hf(cfg, tensors, mt, dtype)
