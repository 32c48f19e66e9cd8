"""The device mesh and every PartitionSpec, in one place.

Mesh axes: ``data`` (pure data parallel), ``fsdp`` (data parallel + parameter
sharding) and ``tensor`` (vocabulary / heads / MLP hidden). Rules:

- embedding and head matrices (V×D): vocab on ``tensor``, D on ``fsdp``;
  low-rank A (V×r): vocab on ``tensor``; B (r×D): D on ``fsdp``;
  mos: the shared V×D matrix as the dense head, projections D on ``fsdp``;
- attention q/k/v (D×H×Dh): D on ``fsdp``, heads on ``tensor``; o (H×Dh×D): heads
  on ``tensor``, D on ``fsdp``;
- MLP fc_in (D×F): D on ``fsdp``, F on ``tensor``; fc_out (F×D): the transpose;
- vectors (biases, norms) are replicated;
- the batch shards over ``data`` × ``fsdp``;
- the optimizer state follows the parameters (same tree paths inside optax states).

A dimension that does not divide its axis size is left unsharded on that axis,
except the vocabulary: ``check_divisible`` refuses a vocab that the ``tensor``
axis does not divide, with the padded size to use.
"""

from __future__ import annotations

import math

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from sbjax.config import MeshConfig, ModelConfig

AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")


def mesh_shape(mc: MeshConfig, n_devices: int) -> tuple[int, int, int]:
  sizes = [mc.data, mc.fsdp, mc.tensor]
  if any(s == 0 or s < -1 for s in sizes):
    raise ValueError(f"invalid mesh (data, fsdp, tensor)={tuple(sizes)}: sizes are >= 1 or -1")
  if sizes.count(-1) > 1:
    raise ValueError(f"invalid mesh (data, fsdp, tensor)={tuple(sizes)}: at most one -1")
  known = math.prod(s for s in sizes if s != -1)
  if -1 in sizes:
    if n_devices % known:
      raise ValueError(f"mesh (data, fsdp, tensor)={tuple(sizes)} does not divide the "
                       f"{n_devices} devices; choose sizes whose product divides {n_devices}")
    sizes[sizes.index(-1)] = n_devices // known
  if math.prod(sizes) != n_devices:
    raise ValueError(f"mesh (data, fsdp, tensor)={tuple(sizes)} needs {math.prod(sizes)} devices "
                     f"but {n_devices} are available; make the product equal {n_devices} "
                     "or use -1 for one axis")
  return tuple(sizes)


def make_mesh(mc: MeshConfig = MeshConfig(), devices=None) -> jax.sharding.Mesh:
  devices = list(devices) if devices is not None else jax.devices()
  shape = mesh_shape(mc, len(devices))
  return jax.make_mesh(shape, AXES, axis_types=(AxisType.Auto,) * 3, devices=devices)


def data_parallel_size(mesh) -> int:
  return mesh.shape["data"] * mesh.shape["fsdp"]


def check_divisible(cfg: ModelConfig, mesh, global_batch: int, grad_accum: int = 1):
  dp = data_parallel_size(mesh)
  if global_batch % (dp * grad_accum):
    raise ValueError(f"global batch {global_batch} is not divisible by the data-parallel size "
                     f"data*fsdp={dp} (times grad_accum={grad_accum}); use a batch that is a "
                     f"multiple of {dp * grad_accum}")
  t = mesh.shape["tensor"]
  if cfg.vocab_size % t:
    padded = -(-cfg.vocab_size // t) * t
    raise ValueError(f"model.vocab_size={cfg.vocab_size} is not divisible by the tensor axis "
                     f"size {t}; pad the vocabulary to {padded} (--config.model.vocab_size={padded})"
                     " or use a tensor axis that divides it")


def _spec_for(path: tuple[str, ...], ndim: int) -> tuple:
  name = path[-1]
  parent = path[-2] if len(path) > 1 else ""
  if name in ("embed", "w") or (parent == "head" and name == "a"):
    if name == "a":
      return ("tensor", None)
    return ("tensor", "fsdp")
  if parent == "head" and name == "b":
    return (None, "fsdp")
  if name == "pos_embed":
    return (None, "fsdp")
  if name == "proj_w":  # mos D×M×D
    return ("fsdp", None, None)
  if name == "prior_w":
    return ("fsdp", None)
  if name in ("q_kernel", "k_kernel", "v_kernel"):
    return ("fsdp", "tensor", None)
  if name == "o_kernel":
    return ("tensor", None, "fsdp")
  if name == "fc_in_kernel":
    return ("fsdp", "tensor")
  if name == "fc_out_kernel":
    return ("tensor", "fsdp")
  return (None,) * ndim


def _path_names(path) -> tuple[str, ...]:
  out = []
  for k in path:
    if hasattr(k, "key"):
      out.append(str(k.key))
    elif hasattr(k, "name"):
      out.append(str(k.name))
  return tuple(out)


def param_spec(path, leaf, mesh) -> P:
  """PartitionSpec of one parameter leaf (tree path from jax.tree_util)."""
  names = _path_names(path)
  shape = getattr(leaf, "shape", ())
  if not shape:
    return P()
  scanned = "blocks" in names
  base = _spec_for(names, len(shape) - int(scanned))
  spec = ((None,) if scanned else ()) + tuple(base)
  spec = spec[: len(shape)] + (None,) * (len(shape) - len(spec))
  fixed = []
  for dim, ax in zip(shape, spec):
    fixed.append(ax if ax is None or dim % mesh.shape[ax] == 0 else None)
  return P(*fixed)


def tree_specs(tree, mesh):
  """PartitionSpecs for a params pytree, or any pytree containing params subtrees
  (optimizer states): leaves are matched by their trailing path names."""
  return jax.tree_util.tree_map_with_path(lambda p, x: param_spec(p, x, mesh), tree)


def tree_shardings(tree, mesh):
  return jax.tree.map(lambda s: NamedSharding(mesh, s), tree_specs(tree, mesh),
                      is_leaf=lambda x: isinstance(x, P))


def batch_sharding(mesh) -> NamedSharding:
  return NamedSharding(mesh, P(BATCH_AXES, None))


def replicated(mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def global_batch(local_batch: np.ndarray, mesh) -> jax.Array:
  """Assemble the global batch from this process's slice (multi-host safe)."""
  return jax.make_array_from_process_local_data(batch_sharding(mesh), local_batch)
