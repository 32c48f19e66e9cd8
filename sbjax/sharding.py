"""The device mesh and every PartitionSpec, in one place.

Mesh axes: ``data`` (pure data parallel), ``fsdp`` (data parallel + parameter sharding) and
``tensor`` (vocabulary / heads / MLP hidden). Sizes come from ``MeshConfig``; one of them may
be -1 (fill with the remaining devices). Rules (``TRUNK_SPECS``; head leaves follow the
``leaf_specs`` of their head kind, ``sbjax.heads``; a leaf no rule names raises ValueError):

- embedding and head matrices (V×D): vocab on ``tensor``, D on ``fsdp``;
- attention q/k/v (D×H×Dh): D on ``fsdp``, heads on ``tensor``; o (H×Dh×D) the transpose;
- MLP fc_in (D×F): D on ``fsdp``, F on ``tensor``; fc_out (F×D) the transpose;
- vectors (biases, norms) and scalars are replicated;
- scanned layers (``blocks``) get a leading unsharded layer axis, a population a leading
  unsharded member axis (``leading=1``); the optimizer state follows the parameters (same
  trailing tree paths inside optax states);
- the batch (B×T) shards over ``data`` × ``fsdp``; metrics are replicated.

Activations: one constraint, at the embedding lookup (``embed_lookup``); XLA's propagation
does the rest. A parameter dimension that its axis does not divide is left unsharded on it,
except the vocabulary and the batch (``check_divisible`` refuses them, naming the fix).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from sbjax import heads as heads_lib
from sbjax.config import MeshConfig, ModelConfig

AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")


def mesh_shape(mc: MeshConfig, n_devices: int) -> tuple[int, int, int]:
  """(data, fsdp, tensor) sizes for ``n_devices``; one -1 fills; a clear error otherwise."""
  sizes = [mc.data, mc.fsdp, mc.tensor]  # (checked by MeshConfig: >= 1, at most one -1)
  known = math.prod(s for s in sizes if s != -1)
  if -1 in sizes and n_devices % known == 0:
    sizes[sizes.index(-1)] = n_devices // known
  if math.prod(sizes) != n_devices:
    raise ValueError(f"mesh (data, fsdp, tensor)={(mc.data, mc.fsdp, mc.tensor)} does not divide "
                     f"the {n_devices} devices; make the product of the sizes {n_devices}, or "
                     "use -1 for one axis (filled with the rest)")
  return tuple(sizes)


def make_mesh(mc: MeshConfig = MeshConfig(), devices=None) -> jax.sharding.Mesh:
  """A (data, fsdp, tensor) mesh over ``devices`` (default: all devices of all processes)."""
  devices = list(devices) if devices is not None else jax.devices()
  shape = mesh_shape(mc, len(devices))
  return jax.make_mesh(shape, AXES, axis_types=(AxisType.Auto,) * 3, devices=devices)


def data_parallel_size(mesh) -> int:
  return mesh.shape["data"] * mesh.shape["fsdp"]


def check_divisible(cfg: ModelConfig, mesh, global_batch: int, grad_accum: int = 1,
                    process_count: int | None = None):
  """Refuse shapes the mesh cannot shard: batch vs data×fsdp, vocab vs tensor, and (with
  several processes) a data-parallel size that the process count does not divide."""
  dp = data_parallel_size(mesh)
  if global_batch % (dp * grad_accum):
    raise ValueError(f"global batch {global_batch} is not divisible by the data-parallel size "
                     f"data*fsdp={dp} (times grad_accum={grad_accum}); use a batch that is a "
                     f"multiple of {dp * grad_accum} (train.batch_size)")
  t = mesh.shape["tensor"]
  if cfg.vocab_size % t:
    padded = -(-cfg.vocab_size // t) * t
    raise ValueError(f"model.vocab_size={cfg.vocab_size} is not divisible by the tensor axis "
                     f"size {t}; pad the vocabulary to {padded} "
                     f"(model.vocab_size={padded}) or use a tensor axis that "
                     "divides it")
  n_proc = jax.process_count() if process_count is None else process_count
  if n_proc > 1 and dp % n_proc:
    raise ValueError(f"the data-parallel size data*fsdp={dp} is not a multiple of the "
                     f"{n_proc} processes; each process feeds its own slice of the batch, so "
                     f"make data*fsdp a multiple of {n_proc} (e.g. mesh.data=-1)")


# Every trunk parameter leaf by name (sbjax.model's layout); () = replicated. Head leaves
# (under params["head"]) take the specs their head kind declares (sbjax.heads).
TRUNK_SPECS = {
    "embed": ("tensor", "fsdp"),  # V×D
    "pos_embed": (None, "fsdp"),  # max_len×D
    "q_kernel": ("fsdp", "tensor", None), "k_kernel": ("fsdp", "tensor", None),  # D×H×Dh
    "v_kernel": ("fsdp", "tensor", None),
    "o_kernel": ("tensor", None, "fsdp"),  # H×Dh×D
    "fc_in_kernel": ("fsdp", "tensor"),  # D×F
    "fc_out_kernel": ("tensor", "fsdp"),  # F×D
    "q_bias": (), "k_bias": (), "v_bias": (), "o_bias": (), "fc_in_bias": (), "fc_out_bias": (),
    "scale": (), "bias": (),  # LayerNorm
}


def _spec_for(path: tuple[str, ...], ndim: int) -> tuple:
  """The spec of the leaf at ``path`` (its trailing names decide); ValueError for a leaf
  that no rule knows (rather than silently replicating it)."""
  name = path[-1] if path else ""
  if heads_lib.HEAD_KEY in path[:-1]:
    base = heads_lib.leaf_spec(name)
    where = f"its head kind's leaf_specs (sbjax.heads, kinds {list(heads_lib.names())})"
  else:
    base = TRUNK_SPECS.get(name)
    where = "sbjax.sharding.TRUNK_SPECS"
  if base is None:
    raise ValueError(f"no sharding rule for the parameter leaf {'/'.join(path) or '<root>'} "
                     f"({ndim} dims); add one to {where}")
  return tuple(base) or (None,) * ndim


def _path_names(path) -> tuple[str, ...]:
  out = []
  for k in path:
    if hasattr(k, "key"):
      out.append(str(k.key))
    elif hasattr(k, "name"):
      out.append(str(k.name))
  return tuple(out)


def param_spec(path, leaf, mesh, leading: int = 0) -> P:
  """PartitionSpec of one parameter leaf (tree path from jax.tree_util).

  ``leading``: number of extra unsharded leading axes (1 for a population's member axis)."""
  names = _path_names(path)
  shape = tuple(getattr(leaf, "shape", ()))
  if len(shape) <= leading:
    return P()
  scanned = "blocks" in names
  n_lead = leading + int(scanned)
  base = _spec_for(names, max(len(shape) - n_lead, 0))
  spec = (None,) * n_lead + tuple(base)
  spec = spec[: len(shape)] + (None,) * (len(shape) - len(spec))
  fixed = []
  for dim, ax in zip(shape, spec):
    fixed.append(ax if ax is None or dim % mesh.shape[ax] == 0 else None)
  return P(*fixed)


def tree_specs(tree, mesh, leading: int = 0):
  """PartitionSpecs for a params pytree, or any pytree containing params subtrees
  (optimizer states): leaves are matched by their trailing path names."""
  return jax.tree_util.tree_map_with_path(lambda p, x: param_spec(p, x, mesh, leading), tree)


def tree_shardings(tree, mesh, leading: int = 0):
  return jax.tree.map(lambda s: NamedSharding(mesh, s), tree_specs(tree, mesh, leading),
                      is_leaf=lambda x: isinstance(x, P))


def batch_spec() -> P:
  return P(BATCH_AXES, None)


def batch_sharding(mesh) -> NamedSharding:
  return NamedSharding(mesh, batch_spec())


def replicated(mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def _fit(spec: P, shape, mesh) -> P:
  """``spec`` with the axes of dimensions they do not divide dropped (e.g. init's batch of 1)."""
  out = []
  for dim, ax in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
    names = () if ax is None else (ax if isinstance(ax, tuple) else (ax,))
    size = math.prod(mesh.shape[n] for n in names)
    out.append(ax if dim % size == 0 else None)
  return P(*out)


def embed_lookup(table_VxD, tokens_BxT):
  """``jnp.take(table, tokens, axis=0)`` for a (tensor, fsdp)-sharded table: under a mesh
  the table is all-gathered over ``fsdp`` first (FSDP semantics) and the B×T×D result
  constrained batch-sharded. Without these two constraints XLA's partitioner gathers a
  D-sharded result and then has to replicate and re-partition the whole residual
  stream ("Involuntary full rematerialization"). A no-op without a mesh."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or set(AXES) - set(mesh.axis_names):
    return jnp.take(table_VxD, tokens_BxT, axis=0)
  table_VxD = jax.lax.with_sharding_constraint(table_VxD,
                                               _fit(P("tensor", None), table_VxD.shape, mesh))
  x = jnp.take(table_VxD, tokens_BxT, axis=0)
  return jax.lax.with_sharding_constraint(x, _fit(P(BATCH_AXES, None, None), x.shape, mesh))


def global_batch(local_batch: np.ndarray, mesh) -> jax.Array:
  """Assemble the global batch from this process's slice (multi-host safe).

  Each process passes the rows ``[p·B/P, (p+1)·B/P)`` of global batch B (what
  ``Dataset.train_batch`` returns); the devices of process p must hold exactly those
  rows, which ``make_mesh`` ensures when data×fsdp is a multiple of the process count
  (``check_divisible``)."""
  local_batch = np.asarray(local_batch)
  n_proc = jax.process_count()
  if n_proc == 1:
    return jax.device_put(local_batch, batch_sharding(mesh))
  global_shape = (local_batch.shape[0] * n_proc,) + local_batch.shape[1:]
  return jax.make_array_from_process_local_data(batch_sharding(mesh), local_batch, global_shape)
