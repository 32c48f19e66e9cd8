"""The attention core: causal (optionally local-window) softmax attention, five kernels.

All take q, k, v as B×T×H×Dh (compute dtype) and return B×T×H×Dh:

    o_i = Σ_{j ∈ W(i)} softmax_j(scale · q_i·k_j) v_j,   W(i) = {j : j <= i, i − j < window}

(window = ∞ for global layers; GPT-Neo's local layers use window = ``model.window_size``).

``model.attn_impl`` picks the kernel (``resolve``, per platform): ``einsum``
(``attention_reference``: plain einsums, float32 softmax; the reference, fastest on XLA:CPU,
the only one with float64); ``dpa`` (``jax.nn.dot_product_attention``, JAX's choice);
``cudnn`` (cuDNN flash attention: GPU, bf16/f16, head_dim a multiple of 8 and <= 128);
``splash`` (JAX's Pallas TPU splash kernel, seq_len a multiple of 128, per shard under a mesh;
interpret mode off TPU); ``auto`` (default): einsum on CPU, cuDNN on a GPU where the config and
the device allow it (``cudnn_available``) else XLA's kernel (``xla``), ``xla`` on TPU.

``attend`` stages the kernels of the platforms with ``jax.lax.platform_dependent``, so a trace
made on this machine is the right program on each backend (each compiles only its own
branch) and ``jax.export`` of ``auto`` for ("cpu", "cuda", "tpu") works from a CPU host.

Precision (``model.matmul_precision``, ``sbjax.precision``): the einsum kernel's dots take
it as ``precision=``; ``dpa``/``xla`` run under it (``precision_scope``); cuDNN and splash
keep their kernels' precision.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas.ops.tpu import splash_attention as splash_lib
from jax.sharding import PartitionSpec as P

from sbjax.config import ModelConfig
from sbjax.precision import matmul_precision, precision_scope

log = logging.getLogger("sbjax")

SPLASH_BLOCK = 128  # the kernel's tile (a multiple of the TPU's 128 lanes)
MESH_AXES = ("data", "fsdp", "tensor")  # sbjax.sharding.AXES (not imported: model -> sharding)
_ASSUME_CUDNN: list = []  # a stack of overrides of cudnn_available (see assume_cudnn)


def attention_reference(q, k, v, *, scale: float, window: int | None, precision=None):
  """Plain einsum causal attention (float32 softmax), the reference for tests; ``precision``
  is that of both einsums (a ``jax.lax.Precision``; None: the backend default). The softmax
  is normalised after the P·V product: o = (e·V) / Σ e with e = exp(s − max s) (faster on
  XLA:CPU than softmax(s)·V, the same values)."""
  t = q.shape[1]
  s = jnp.einsum("bqhk,bshk->bhqs", q.astype(jnp.float32), k.astype(jnp.float32),
                 precision=precision) * scale
  i = jnp.arange(t)[:, None]
  j = jnp.arange(t)[None, :]
  mask = j <= i
  if window is not None:
    mask = mask & (i - j < window)
  s = jnp.where(mask[None, None], s, jnp.finfo(jnp.float32).min)
  e = jnp.exp(s - jax.lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True)))  # the diagonal is kept
  o = jnp.einsum("bhqs,bshk->bqhk", e, v.astype(jnp.float32), precision=precision)
  return (o / jnp.moveaxis(jnp.sum(e, axis=-1), 1, 2)[..., None]).astype(q.dtype)


def cudnn_shape_ok(c: ModelConfig) -> tuple[bool, str]:
  """(ok, why not): cuDNN flash attention needs bf16/f16 compute and head_dim % 8 == 0, <= 128."""
  if c.dtype not in ("bfloat16", "float16"):
    return False, f"model.dtype={c.dtype} (cuDNN attention needs bfloat16 or float16)"
  if c.head_dim % 8 or c.head_dim > 128:
    return False, f"head_dim={c.head_dim} (cuDNN attention needs a multiple of 8, <= 128)"
  return True, ""


@contextlib.contextmanager
def assume_cudnn(available: bool):
  """Within the block ``cudnn_available`` answers ``available`` (``sbjax.lowering_suite``:
  sharded cuDNN attention cannot be exported)."""
  _ASSUME_CUDNN.append(bool(available))
  try:
    yield
  finally:
    _ASSUME_CUDNN.pop()


@functools.lru_cache(maxsize=None)
def _probe_cudnn() -> tuple[bool, str]:
  """Compile a tiny cuDNN attention on the first GPU once: (works, error text)."""
  gpus = [d for d in jax.devices() if d.platform == "gpu"]
  if not gpus:
    return False, "no GPU device"
  x = jax.ShapeDtypeStruct((1, 128, 1, 64), jnp.bfloat16)
  try:
    jax.jit(functools.partial(jax.nn.dot_product_attention, is_causal=True,
                              implementation="cudnn")).lower(x, x, x).compile()
  except Exception as e:  # noqa: BLE001 - any failure means: not usable here
    return False, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
  return True, ""


def cudnn_available() -> tuple[bool, str]:
  """(available, why not) for cuDNN flash attention on this machine's GPU."""
  if _ASSUME_CUDNN:
    return _ASSUME_CUDNN[-1], "" if _ASSUME_CUDNN[-1] else "assumed unavailable"
  return _probe_cudnn()


@functools.lru_cache(maxsize=64)
def _say(msg: str):
  log.info(msg)


def resolve(c: ModelConfig, backend: str | None = None, say: bool = True) -> str:
  """The kernel ``model.attn_impl`` means on ``backend`` (default ``jax.default_backend()``):
  one of einsum | dpa | xla | cudnn | splash. float64 always takes einsum (no other kernel has
  it). ``say``: log the choice of ``auto`` on a GPU (once per message)."""
  backend = backend or jax.default_backend()
  if c.param_dtype == "float64" or c.dtype == "float64":
    return "einsum"
  if c.attn_impl != "auto":
    return c.attn_impl
  if backend == "cpu":
    return "einsum"
  if backend == "gpu":
    ok, why = cudnn_shape_ok(c)
    if ok:
      ok, why = cudnn_available()
    if say:
      _say("attention (attn_impl=auto on gpu): " + ("cuDNN flash attention" if ok else
           f"XLA dot_product_attention; cuDNN not used: {why}"))
    return "cudnn" if ok else "xla"
  return "xla"


@functools.lru_cache(maxsize=32)
def _splash_kernel(t: int, heads: int, window: int | None, interpret: bool):
  if window is None:
    mask = splash_lib.CausalMask((t, t))
  else:  # j <= i and i − j < window: a left window of window−1 and none on the right
    mask = splash_lib.LocalMask((t, t), (window - 1, 0), 0)
  b = SPLASH_BLOCK
  sizes = splash_lib.BlockSizes(block_q=b, block_kv=b, block_kv_compute=b, block_q_dkv=b,
                                block_kv_dkv=b, block_kv_dkv_compute=b,
                                use_fused_bwd_kernel=True)  # dq, dk, dv in one kernel
  # mask tables made concrete and kept as numpy: the cached kernel holds no tracer
  with jax.ensure_compile_time_eval():
    kern = splash_lib.make_splash_mha(splash_lib.MultiHeadMask([mask] * heads),
                                      block_sizes=sizes, head_shards=1, q_seq_shards=1,
                                      interpret=interpret)
    return jax.tree.map(np.asarray, kern)


def _splash_local(q, k, v, scale: float, window: int | None, interpret: bool):
  """Unsharded splash on B×T×H×Dh: the kernel takes H×T×Dh per sequence (vmapped over B)."""
  kern = _splash_kernel(q.shape[1], q.shape[2], window, interpret)
  one = lambda q1, k1, v1: kern((q1 * scale).swapaxes(0, 1), k1.swapaxes(0, 1),  # noqa: E731
                                v1.swapaxes(0, 1)).swapaxes(0, 1)
  return jax.vmap(one)(q, k, v)


def _splash_any(q, k, v, scale: float, window: int | None):
  """The compiled (Mosaic) kernel on TPU, interpret mode elsewhere (``platform_dependent``)."""
  return jax.lax.platform_dependent(
      q, k, v, tpu=functools.partial(_splash_local, scale=scale, window=window, interpret=False),
      default=functools.partial(_splash_local, scale=scale, window=window, interpret=True))


def splash_attention(q, k, v, *, scale: float, window: int | None):
  """Causal (window=None) or local splash attention on B×T×H×Dh (interpret mode off TPU).
  Under a mesh with sbjax's axes it runs per shard (batch over data×fsdp when they divide B,
  heads over tensor when it divides H)."""
  t = q.shape[1]
  if t % SPLASH_BLOCK:
    raise ValueError(f"attn_impl=splash needs a sequence length that is a multiple of "
                     f"{SPLASH_BLOCK}, got {t}; use train.seq_len=<multiple of "
                     f"{SPLASH_BLOCK}> or model.attn_impl=dpa")
  fn = functools.partial(_splash_any, scale=scale, window=window)
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or set(MESH_AXES) - set(mesh.axis_names):
    return fn(q, k, v)
  dp = math.prod(mesh.shape[a] for a in ("data", "fsdp"))
  spec = P(("data", "fsdp") if q.shape[0] % dp == 0 else None, None,
           "tensor" if q.shape[2] % mesh.shape["tensor"] == 0 else None, None)
  return jax.shard_map(fn, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec,
                       check_vma=False)(q, k, v)


def _kernel(impl: str, c: ModelConfig, scale: float, window: int | None):
  """(q, k, v) -> attention with kernel ``impl`` (one of ``resolve``'s answers)."""
  def run(q, k, v):
    if impl == "einsum":
      return attention_reference(q, k, v, scale=scale, window=window,
                                 precision=matmul_precision(c))
    if impl == "splash":
      return splash_attention(q, k, v, scale=scale, window=window)
    with precision_scope(c):  # the XLA kernel's einsums take no precision argument
      return jax.nn.dot_product_attention(
          q, k, v, scale=scale, is_causal=True,
          local_window_size=(window - 1, 0) if window is not None else None,
          implementation=None if impl == "dpa" else impl)
  return run


def platform_kernels(c: ModelConfig) -> dict[str, str]:
  """The kernel of each ``platform_dependent`` branch of ``attend``: cpu, cuda, and the
  default (tpu and any other platform). The GPU choice is logged on a GPU machine only."""
  on_gpu = jax.default_backend() == "gpu"  # for the log only; the choice is per platform
  return {"cpu": resolve(c, "cpu"), "cuda": resolve(c, "gpu", say=on_gpu),
          "default": resolve(c, "tpu")}


def attend(c: ModelConfig, q, k, v, *, scale: float, local: bool):
  """Causal attention of one layer: the kernel ``resolve`` picks for each platform, staged
  with ``jax.lax.platform_dependent`` when they differ (``attn_impl=auto``): the backend that
  compiles the program keeps its own branch only."""
  window = c.window_size if local else None
  impls = platform_kernels(c)
  if len(set(impls.values())) == 1:
    return _kernel(impls["cpu"], c, scale, window)(q, k, v)
  fns = {impl: _kernel(impl, c, scale, window) for impl in set(impls.values())}
  return jax.lax.platform_dependent(q, k, v, cpu=fns[impls["cpu"]], cuda=fns[impls["cuda"]],
                                    default=fns[impls["default"]])
