"""Head FLOPs per token: the forward matmul FLOPs of the output head alone, 2 × its kind's
multiply-adds per token (``sbjax.heads.HeadKind.flop_params``), to compare heads at matched
compute. A MoS head applies its shared V×e matrix once per component, so its FLOPs grow with
the number of components while its parameters do not; biases and softmaxes are not counted."""

from __future__ import annotations

from sbjax import heads


def head_flops(model_cfg) -> int:
  """Forward matmul FLOPs per token of the head of ``model_cfg``."""
  return 2 * int(heads.get(model_cfg.head).flop_params(model_cfg))
