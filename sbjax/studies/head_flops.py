"""Head FLOPs per token: the forward matmul FLOPs of the output head alone (2 per multiply-add),
beside its parameter count, so that heads can be compared at matched compute (the planted and
mos_text experiments).

    head_flops = 2 × flop_params,   flop_params = the head kind's multiply-adds per token
                                                   (``sbjax.heads.HeadKind.flop_params``)

The head registry holds the one count (the same one ``sbjax.model.flops_per_token`` takes 6×
for a training step); for the registered kinds it is

    dense      (V×d):                          d V
    tied       (the embedding's V×d):          d V
    lowrank    (W = A·B, A V×r, B r×d):        d r + r V
    mos        (M components of dim e):        d M + d M e + M e V   [prior, projections, logits]
    sigsoftmax (A V×r, B r×d, bias V):         d r + r V

A MoS head applies its shared V×e matrix once per component: its FLOPs grow with M while
its parameters do not (``param_count`` counts V e once). The biases and the softmaxes'
elementwise work (M V exponentials for MoS, V for the others) are not counted here; a test
checks these counts against XLA's own cost analysis of the head's forward pass.
"""

from __future__ import annotations

from sbjax import heads


def head_flops(model_cfg) -> int:
  """Forward matmul FLOPs per token of the head of ``model_cfg``: 2 × its kind's
  ``flop_params`` (module docstring)."""
  return 2 * int(heads.get(model_cfg.head).flop_params(model_cfg))
