"""The options and the result of the neural-collapse statistics: a frozen (hashable, static
under ``jax.jit``) options dataclass, checked when it is made, and a NamedTuple whose field
names are the columns that reports and CSVs use."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax

_CHOICES = {"norm_variant": ("norm", "squared"), "angle_variant": ("cos", "inner"),
            "nc4_search": ("analyzed", "all"), "variance": ("two_pass", "one_pass")}
_POSITIVE = ("min_count", "block_size", "batch_size", "nc4_chunk_size")


@dataclasses.dataclass(frozen=True)
class CollapseOptions:
  """The static options of :func:`neural_collapse` and the collapse host wrappers.

  Statistics (the authors' defaults unless noted; ``docs/metrics.md`` section 6):
    min_count: classes with N_c >= min_count are analysed (>= 1; the authors: 1).
    cdnv_exponent: k of the CDNV's ||mu_c - mu_c'||^(2k) (the authors: 2; Galanti: 1).
    weighted_mean: the global mean token-weighted (default: unweighted, the authors).
    norm_variant: "norm" (CoV of ||mu~_c||) or "squared" (of ||mu~_c||^2, paper-era code).
    angle_variant: "cos" (paper-era) or "inner" (unnormalised, current code).
    gnc2_centered: GNC2 on centred means (current code) or uncentred (paper-era).
    nc4_weighted: NC4 per token (the authors) or the mean of per-class rates.
    ddof: of every standard deviation (1, as torch.std).
    per_class: also the per-class CDNV and interference (V,) arrays.
    coincide_rtol: when two class means coincide (default 8 eps of the compute dtype).
    riesz_s: s of the Riesz s-energy.
  Token passes (features in, :func:`neural_collapse` and ``collapse_metrics``):
    nc4_search: "analyzed" (both NC4 searches over the analysed classes, paper-era) or "all"
      (W over all V rows, the NCC over every class with tokens, current code).
    variance: "two_pass" or "one_pass" (float64 only).
    block_size: classes per block of the pair pass.
    batch_size: tokens per batch of the class-mean and variance passes.
    nc4_chunk_size: classes per chunk of the NC4 search.

  Raises ``ValueError`` when made with a value outside its choices or a size below 1.
  """

  min_count: int = 1
  cdnv_exponent: float = 2.0
  weighted_mean: bool = False
  norm_variant: str = "norm"
  angle_variant: str = "cos"
  gnc2_centered: bool = True
  nc4_weighted: bool = True
  ddof: int = 1
  per_class: bool = False
  coincide_rtol: float | None = None
  riesz_s: float = 1.0
  nc4_search: str = "analyzed"
  variance: str = "two_pass"
  block_size: int = 512
  batch_size: int = 65536
  nc4_chunk_size: int = 4096

  def __post_init__(self):
    for name, choices in _CHOICES.items():
      if getattr(self, name) not in choices:
        raise ValueError(f"CollapseOptions: {name} must be one of {choices}, got {getattr(self, name)!r}")
    for name in _POSITIVE:
      if int(getattr(self, name)) < 1:
        why = " (classes without tokens have no mean)" if name == "min_count" else ""
        raise ValueError(f"CollapseOptions: {name} must be >= 1{why}, got {getattr(self, name)}")


class CollapseStats(NamedTuple):
  """NC1-NC4 of one checkpoint (a leading axis per ``jax.vmap``), in the CSVs' column order:
  jax scalars from :func:`neural_collapse` (float32, float64 under x64; counts integers),
  Python numbers from the host wrappers. ``docs/metrics.md`` section 3 gives each formula.

  Over the K analysed classes, with mu~_c = mu_c - mu_G and pairs c < c': ``nc1_cdnv`` =
  mean ((sigma_c^2 + sigma_c'^2) / 2) / ||mu_c - mu_c'||^(2k), ``nc1_log10_mean_cdnv`` its
  log10 (the authors' "log CDNV"), ``nc1_mean_log10_cdnv`` (``_std``) the mean (std) of the
  pairs' log10 (old names ``nc1_log10_cdnv``, ``_std``); ``nc2_norm_cov`` = std / mean of
  ||mu~_c|| (``_log_`` of its log, ``_corrected`` of :func:`corrected_sq_norms`);
  ``nc2_cos_mean`` / ``_std`` of cos(mu~_c, mu~_c'); ``etf_error`` and ``dual_error``: the
  distances of G = M~ M~^T and of W M~^T to the simplex ETF; ``gnc2_*``: the log and Riesz
  kernels of ||u_c - u_c'||, u_c = mu~_c / ||mu~_c||; ``nc3_cos_mean`` = mean cos(w_c, mu~_c),
  ``unc3_cos_cov`` its std / mean (``_guarded``: :func:`unc3_guarded`); ``nc4_agreement`` =
  the fraction of validation tokens with argmax_c <w_c, h> == argmin_c ||h - mu_c||^2 (None
  without them); ``*_n_*``: counts of pairs and classes. With ``per_class``: ``class_analyzed``
  (V,) bool and the (V,) mean CDNV and cosine of each class over its partners.
  """

  class_analyzed: jax.Array | None
  dual_error: jax.Array
  etf_error: jax.Array
  gnc2_log_kernel_mean: jax.Array
  gnc2_log_kernel_var: jax.Array
  gnc2_n_coincident_pairs: jax.Array
  gnc2_riesz_log_mean: jax.Array
  gnc2_riesz_mean: jax.Array
  n_classes: jax.Array
  nc1_cdnv: jax.Array
  nc1_log10_cdnv: jax.Array
  nc1_log10_cdnv_std: jax.Array
  nc1_log10_mean_cdnv: jax.Array
  nc1_mean_log10_cdnv: jax.Array
  nc1_mean_log10_cdnv_std: jax.Array
  nc1_n_coincident_pairs: jax.Array
  nc1_n_pairs: jax.Array
  nc1_n_zero_pairs: jax.Array
  nc2_corrected_n_classes: jax.Array
  nc2_corrected_n_clipped: jax.Array
  nc2_cos_mean: jax.Array
  nc2_cos_std: jax.Array
  nc2_log_norm_cov: jax.Array
  nc2_norm_cov: jax.Array
  nc2_norm_cov_corrected: jax.Array
  nc3_cos_mean: jax.Array
  nc3_cos_se: jax.Array
  nc4_agreement: jax.Array | None
  per_class_cdnv: jax.Array | None
  per_class_interference: jax.Array | None
  unc3_cos_cov: jax.Array
  unc3_cos_cov_guarded: jax.Array
  unc3_ill_conditioned: jax.Array

  def to_dict(self) -> dict:
    """{field: value} of the fields that are set (not None), in field order: a CSV row."""
    return {k: v for k, v in self._asdict().items() if v is not None}
