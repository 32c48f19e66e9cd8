"""sbjax.metrics: pure ``jax.numpy`` metrics of the softmax bottleneck, neural collapse and
CKA, for any JAX code (``pip install sbjax`` needs jax and numpy only).

Every public name is a function or a type, exported here (the modules are private). Each
function works on one checkpoint and composes with ``jax.vmap`` over a leading checkpoint (or
head, or layer) axis; a wrong shape raises one ``ValueError`` naming the argument when traced.
Importing the package registers nothing with JAX and configures no logging. The formulas and
the authors' variants: ``docs/metrics.md``.
"""

from ._accumulators import (
    MeanState, NC4State, VarState, class_means, class_variances, mean_init, mean_update, merge,
    nc4_agreement, nc4_init, nc4_update, one_pass_variances, var_init, var_update,
)
from ._anisotropy import anisotropy, anisotropy_by_layer
from ._cka import cka_to_reference, cka_to_reference_by_layer, linear_cka
from ._collapse_host import analyzed_classes, collapse_metrics, collapse_metrics_from_stats, nc4_search_set
from ._collapse_types import CollapseOptions, CollapseStats
from ._collapse_variants import CorrectedNorms, Unc3, corrected_sq_norms, unc3_guarded, unc3_reason
from ._neural_collapse import neural_collapse, neural_collapse_from_stats
from ._singular_values import center_vocab, raw_and_centred_singular_values, singular_values
from ._spectrum import (
    HeadSpectra, SpectrumMetrics, condition_number, effective_rank, head_spectra, kl_to_uniform,
    normalized_top, proportional_effective_rank, singular_entropy, spectrum_metrics, stable_rank, w_error,
)

__all__ = [
    # spectra
    "singular_values", "raw_and_centred_singular_values", "center_vocab",
    "singular_entropy", "kl_to_uniform", "effective_rank", "proportional_effective_rank", "w_error",
    "stable_rank", "condition_number", "normalized_top", "spectrum_metrics", "SpectrumMetrics",
    "head_spectra", "HeadSpectra",
    # anisotropy and CKA
    "anisotropy", "anisotropy_by_layer", "linear_cka", "cka_to_reference", "cka_to_reference_by_layer",
    # neural collapse
    "neural_collapse", "neural_collapse_from_stats", "CollapseOptions", "CollapseStats",
    "collapse_metrics", "collapse_metrics_from_stats", "analyzed_classes", "nc4_search_set",
    "MeanState", "VarState", "NC4State", "mean_init", "mean_update", "class_means", "var_init",
    "var_update", "class_variances", "one_pass_variances", "nc4_init", "nc4_update", "nc4_agreement",
    "merge", "CorrectedNorms", "Unc3", "corrected_sq_norms", "unc3_guarded", "unc3_reason",
]
