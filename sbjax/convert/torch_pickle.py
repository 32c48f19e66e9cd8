"""PyTorch pickle weights (``pytorch_model.bin``), read only when the caller allowed pickles
(``allow_pickle=True``, CLI ``--allow_pickle``), with ``torch.load(weights_only=True)``.

torch is optional: sbjax and its ``[hf]`` extra never install it (a user's own GPU build must
not be replaced). Without torch, reading a pickle is one clear error naming the package.
"""

from __future__ import annotations

import numpy as np

__all__ = ["load_pickle"]


def load_pickle(path: str) -> dict[str, np.ndarray]:
  """Name -> float32/other numpy array of one pickle file (bfloat16 widened to float32)."""
  try:
    import torch  # noqa: PLC0415 - deferred: optional, only for explicitly allowed pickles
  except ImportError:
    raise RuntimeError(
        f"{path}: reading PyTorch pickle weights (allow_pickle=True, --allow_pickle) needs the "
        "package torch, which sbjax does not install (not even sbjax[hf]): pip install torch "
        "(any build; the CPU one is enough), or convert the checkpoint to safetensors") from None
  sd = torch.load(path, map_location="cpu", weights_only=True)  # noqa: TID251 - the one reviewed torch load (weights_only)
  out = {}
  for k, t in sd.items():
    t = t.detach()
    if t.dtype == torch.bfloat16:
      t = t.float()
    out[k] = t.numpy()
  return out
