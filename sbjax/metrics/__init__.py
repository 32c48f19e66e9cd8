"""sbjax.metrics: pure jax.numpy metrics for the softmax bottleneck, neural collapse and CKA.

Submodules (no flax anywhere):

* :mod:`sbjax.metrics.spectrum` -- singular values of heads, KL-to-uniform,
  effective rank, PER, W-error, stable rank, condition number (all its public
  names are re-exported here).
* :mod:`sbjax.metrics.anisotropy` -- mean pairwise cosine in O(N d).
* :mod:`sbjax.metrics.cka` -- linear CKA (biased / debiased HSIC).
* :mod:`sbjax.metrics.collapse` -- streaming neural-collapse accumulators
  and NC1-NC4 metrics (blocked pair streaming, never K x K); host functions
  that validate and call the pure kernels of
  :mod:`sbjax.metrics.collapse_kernel` (masks, static V: jit and vmap over
  checkpoints).
* :mod:`sbjax.metrics.collapse_variants` -- bias-corrected class-mean norms
  and the guarded UNC3 (used by ``collapse``; NamedTuple results).

Each metric works on one checkpoint and composes with ``jax.vmap`` over a
leading checkpoint/head axis.  Formulas and the authors' code variants are in
each docstring and in ``docs/metrics.md``.
"""

from . import anisotropy, cka, collapse, spectrum
from .anisotropy import anisotropy_by_layer
from .cka import cka_to_reference, cka_to_reference_by_layer, linear_cka
from .collapse import collapse_metrics, metrics_from_stats, per_class_stats
from .spectrum import *  # noqa: F403  (its public names, listed once: spectrum.__all__)

__all__ = [
    "spectrum",
    "anisotropy",
    "cka",
    "collapse",
    *spectrum.__all__,
    "anisotropy_by_layer",
    "linear_cka",
    "cka_to_reference",
    "cka_to_reference_by_layer",
    "collapse_metrics",
    "metrics_from_stats",
    "per_class_stats",
]
