"""Head FLOPs per token: the forward matmul FLOPs of the output head alone (2 per multiply-add),
beside its parameter count, so that heads can be compared at matched compute (the planted and
mos_text experiments).

    dense   (V×d):                    2 d V
    lowrank (W = A·B, A d×r, B r×V):  2 (d r + r V)
    mos     (M components of dim e):  2 (d M + d M e + M e V)   [prior, projections, M logit sets]

A MoS head applies its shared V×e matrix once per component: its FLOPs grow with M while
its parameters do not (``sbjax.heads.MoS.param_count`` counts V e once). The softmaxes'
elementwise work (M V exponentials for MoS, V for the others) is not counted here; a test
checks these counts against XLA's own cost analysis of the head's forward pass.
"""

from __future__ import annotations


def head_flops(model_cfg) -> int:
  """Forward matmul FLOPs per token of the head of ``model_cfg`` (module docstring)."""
  h = model_cfg.head
  d, v = int(model_cfg.d_model), int(model_cfg.vocab_size)
  if h.kind == "mos":
    m, e = int(h.n_mix), int(h.dim or d)
    return 2 * (d * m + d * m * e + m * e * v)
  if h.kind == "lowrank":
    r = int(h.rank)
    return 2 * (d * r + r * v)
  if h.kind == "dense":
    return 2 * d * v
  raise ValueError(f"head_flops: no FLOP count for head kind {h.kind!r}; known: dense, "
                   "lowrank, mos")
