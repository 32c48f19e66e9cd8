"""Neural-collapse metrics for LM heads (Wu & Papyan 2024; the `neural-collapse` library).

Definitions (``docs/metrics.md`` section 3).  mu_c = class mean of
the last-layer features h_i with next token y_i = c; sigma_c^2 =
(1/N_c) sum_{y_i=c} ||h_i - mu_c||^2 (biased trace of the class covariance);
the analysed classes are those with N_c >= ``min_count`` (authors' default 1);
K = their number; mu_G = unweighted mean of the analysed class means
(``weighted_mean=False``, authors' default; ``True`` = token-weighted mean);
mu~_c = mu_c - mu_G; W is restricted to the analysed rows.

* ``nc1_cdnv``: mean over unordered pairs c < c' of
  s(c,c') = ((sigma_c^2 + sigma_c'^2) / 2) / ||mu_c - mu_c'||^(2k),
  k = ``cdnv_exponent`` (authors: **k = 2**, distance^4; k = 1 is Galanti
  et al.'s original CDNV).  Two logs, two different statistics:
  ``nc1_log10_mean_cdnv`` = log10(nc1_cdnv), the log of the mean -- **the
  authors' "log CDNV"** (R^2 ~ 0.92 vs val loss, computed from their released
  results); ``nc1_mean_log10_cdnv`` = mean over pairs of log10 s, the mean of
  the logs (<= the former by Jensen), with ``nc1_mean_log10_cdnv_std``.
  ``nc1_log10_cdnv`` / ``nc1_log10_cdnv_std`` are the old names of the mean
  of the logs, kept so old CSVs and callers keep working (not the authors'
  statistic).  Pairs with s = 0 (both classes have zero spread, e.g. two
  single-token classes) are excluded from the mean of logs only and counted
  in ``nc1_n_zero_pairs``.
* Coincident class means (||mu_c - mu_c'||^2 <= rtol (||mu~_c||^2 + ||mu~_c'||^2),
  rtol = ``coincide_rtol``, default 8 eps of the compute dtype, i.e. equal up
  to rounding of the matmul-form distance): s = inf there; such pairs are
  *excluded* from all CDNV statistics and counted in
  ``nc1_n_coincident_pairs`` (never a silent NaN/inf).  In float32 this
  means relative mean separations below ~1e-3 are unresolvable; use x64.
* ``nc2_norm_cov``: std(n_c) / mean(n_c), n_c = ||mu~_c|| (default
  ``norm_variant="norm"``; ``"squared"`` = the paper-era code's ||mu~_c||^2).
  ``nc2_log_norm_cov``: std(log n_c) / mean(log n_c) (current code).
  ``nc2_norm_cov_corrected``: the same CoV of the bias-corrected norms
  sqrt(max(||mu_c - mu_G||^2 - b_c, 0)), b_c ~ sigma_c^2 / N_c with the
  unbiased sigma_c^2 (N_c - 1), over the analysed classes with N_c >= 2
  (``nc2_corrected_n_classes``; ``nc2_corrected_n_clipped`` clipped at 0); the
  exact b_c and what it does not remove: :mod:`sbjax.metrics.collapse_variants`.
* ``nc2_cos_mean`` / ``nc2_cos_std``: over c < c' of cos(mu~_c, mu~_c')
  (``angle_variant="cos"``, paper-era default); ``"inner"`` = unnormalised
  <mu~_c, mu~_c'> (current code).
* ``etf_error`` = ||G/||G||_F - (I - 11^T/K)/sqrt(K-1)||_F, G = M~ M~^T,
  computed from ||G||_F^2 = ||M~^T M~||_F^2 (d x d) plus a streamed sum of
  squared residuals over pairs (no K x K, no cancellation).
* ``gnc2_log_kernel_mean`` / ``_var``: kernel log(1/||u_c - u_c'||) over
  c < c', u_c = mu~_c/||mu~_c|| (``gnc2_centered=True``, current code) or
  mu_c/||mu_c|| (``False``, paper-era).  Coincident directions (kernel =
  +inf) are excluded and counted in ``gnc2_n_coincident_pairs``.
* ``gnc2_riesz_log_mean``: log of the mean Riesz s-energy
  mean_{c<c'} ||u_c - u_c'||^(-s) (``riesz_s``, default 1), the other kernel of
  hyperspherical uniformity (Wu & Papyan use the log kernel, the s -> 0 limit).
  The sum is accumulated in log space (log-sum-exp), so nearly coincident
  directions cannot overflow float32; ``gnc2_riesz_mean`` is its exp in
  float64 on the host (+inf only beyond ~1.8e308).  Coincident pairs are
  excluded as for the log kernel.
* ``nc3_cos_mean``: mean_c cos(w_c, mu~_c); ``unc3_cos_cov``: std/mean of it
  (unguarded, as the authors); ``unc3_cos_cov_guarded``: NaN when |mean| <
  3 standard errors (``nc3_cos_se`` = std/sqrt(K); ``unc3_ill_conditioned`` =
  1 then; the reason as text: ``unc3_reason(nc3_cos_mean, nc3_cos_se)``).
* Sign conventions (checked against values derived by hand from the authors' formulas,
  ``tests/unit/test_collapse_signs.py``; sbjax's signs are the authors'): NC3 is +1 when
  every w_c points along mu~_c and -1 when against it; UNC3 = std/mean carries the sign of
  NC3's mean (the same classifier with W -> -W flips UNC3's sign, not its size), so the sign
  of a UNC3-loss correlation depends on the sign of NC3's mean; NC3 is *not* invariant under
  the softmax gauge W -> W + 1 b^T (every prediction unchanged; a common row shift can take
  NC3's mean from +1 to negative values), so its sign is not a property of the predictions
  alone (``w - w.mean(0)`` over the analysed rows removes the gauge). GNC2's log kernel is
  larger (less negative) for a less uniform set of directions: -1/2 log(2K/(K-1)) for a
  simplex ETF, -log sqrt(2) for orthogonal directions.
* ``dual_error`` = ||W M~^T/||W M~^T||_F - (I - 11^T/K)/sqrt(K-1)||_F via the exact
  identities ||W M~^T||_F^2 = <W^T W, M~^T M~> and <W M~^T, I - 11^T/K> =
  sum_c <w_c, mu~_c> - <sum w, sum mu~>/K (absolute accuracy ~sqrt(eps)).
* ``nc4_agreement``: fraction of validation tokens where argmax_c <w_c, h>
  == argmin_c ||h - mu_c||^2; ``nc4_search="analyzed"`` (paper-era default:
  both searches over the analysed classes) or ``"all"`` (current code: W over
  all V rows, the NCC over every class that has a mean, N_c > 0).  Weighted
  (hits / tokens, authors' default) or per-class mean (``nc4_weighted=False``).

Standard deviations use ``ddof`` (default 1, like ``torch.std`` in the
authors' code).  Pairs are streamed in blocks (``block_size``) with only
running sums kept: peak memory O(V d + block^2) (the V class rows with a mask).

Robustness: NaN/inf features, labels outside [0, V), fewer than 2 analysed
classes, all class means identical, ``min_count < 1`` and unknown options raise
``ValueError`` here, on the host, before or after one call of the pure kernel of
:mod:`sbjax.metrics.collapse_kernel` (which has no host-side checks and is what to
``jax.jit(jax.vmap(...))`` over checkpoints); single-token classes have sigma^2 = 0
(fine); log(0) never reaches a sum.  The host functions return Python floats/ints;
``nc1_n_pairs`` is the exact Python integer and ``gnc2_riesz_mean`` the float64 exp of the
kernel's log mean (the kernel's own exp is float32 without x64).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .accumulators import (
    MeanState,
    NC4State,
    VarState,
    class_means,
    class_variances,
    mean_init,
    mean_update,
    merge,
    nc4_agreement,
    nc4_init,
    nc4_update,
    one_pass_variances,
    var_init,
    var_update,
)
from .collapse_kernel import MetricOptions, PassOptions, jit_features_aux, jit_stats_aux, metric_options
from .collapse_variants import CorrectedNorms, Unc3, corrected_sq_norms, norm_cov, unc3_guarded, unc3_reason

__all__ = [
    "MeanState", "VarState", "NC4State", "mean_init", "mean_update", "class_means", "var_init", "var_update",
    "class_variances", "one_pass_variances", "nc4_init", "nc4_update", "nc4_agreement", "merge",
    "analyzed_classes", "nc4_search_set", "metrics_from_stats", "per_class_stats", "collapse_metrics",
    "CorrectedNorms", "Unc3", "corrected_sq_norms", "norm_cov", "unc3_guarded", "unc3_reason",
]


def analyzed_classes(counts, min_count: int = 1) -> np.ndarray:
    """Indices of classes with N_c >= min_count (concrete, outside jit).

    Raises ``ValueError`` if min_count < 1 or fewer than 2 classes qualify.
    """
    if min_count < 1:
        raise ValueError(f"min_count must be >= 1 (classes without tokens have no mean), got {min_count}")
    counts = np.asarray(counts)
    idx = np.flatnonzero(counts >= min_count)
    if idx.size < 2:
        raise ValueError(
            f"neural-collapse metrics need at least 2 analysed classes, but only {idx.size} "
            f"class(es) have >= min_count={min_count} tokens (out of {counts.size}); "
            "lower min_count or accumulate more tokens"
        )
    return idx


def nc4_search_set(means, counts, w, *, min_count: int = 1, search: str = "analyzed"):
    """Rows (w_rows, mean_rows, w_valid, mean_valid) for :func:`nc4_update`.

    ``"analyzed"`` (default, paper-era): both searches over the analysed
    classes (N_c >= min_count).  ``"all"`` (current code): the linear
    classifier over all V rows of W, the NCC over every class with N_c > 0.
    """
    counts = np.asarray(counts)
    if search == "analyzed":
        idx = analyzed_classes(counts, min_count)
        ones = jnp.ones((idx.size,), bool)
        return jnp.asarray(w)[idx], jnp.asarray(means)[idx], ones, ones
    if search == "all":
        v = counts.shape[0]
        return jnp.asarray(w), jnp.asarray(means), jnp.ones((v,), bool), jnp.asarray(counts > 0)
    raise ValueError(f"nc4_search must be 'analyzed' or 'all', got {search!r}")


def check_finite(name, x):
    x = np.asarray(x)
    if not np.all(np.isfinite(x)):
        bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
        raise ValueError(f"{name} contains {bad} non-finite value(s) (NaN/inf); clean the input before computing collapse metrics")


def check_inputs(name, feats, labels, v, d):
    """Shapes, integer labels in [0, V) and finite features of one token set (host side)."""
    if feats.ndim != 2 or feats.shape[1] != d:
        raise ValueError(f"{name} features must have shape (N, {d}), got {feats.shape}")
    if labels.ndim != 1 or labels.shape[0] != feats.shape[0]:
        raise ValueError(f"{name} labels must have shape ({feats.shape[0]},), got {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{name} labels must be integers, got dtype {labels.dtype}")
    if labels.size and (labels.min() < 0 or labels.max() >= v):
        raise ValueError(f"{name} labels must lie in [0, V={v}); found values in [{labels.min()}, {labels.max()}]")
    check_finite(f"{name} features", np.asarray(feats, np.float32) if feats.dtype.itemsize < 4 else feats)


def to_host(out, aux, idx, opts: MetricOptions) -> dict:
    """The kernel's keys as Python floats/ints (per-class arrays restricted to ``idx``)."""
    out, aux = jax.device_get((out, aux))
    if float(aux["max_norm"]) == 0.0:
        raise ValueError("all analysed class means are identical (every centred mean is zero); collapse metrics are undefined")
    per = {key: np.asarray(out.pop(key)) for key in ("class_analyzed", "per_class_cdnv", "per_class_interference") if key in out}
    res = {key: int(x) if np.issubdtype(np.asarray(x).dtype, np.integer) else float(x) for key, x in out.items()}
    k = int(idx.size)
    res["nc1_n_pairs"] = k * (k - 1) // 2  # exact (the kernel's integer wraps beyond ~65k classes without x64)
    res["gnc2_riesz_mean"] = float(np.exp(np.float64(res["gnc2_riesz_log_mean"])))  # +inf only beyond ~1.8e308
    if opts.per_class:
        res.update(class_ids=idx, per_class_cdnv=per["per_class_cdnv"][idx],
                   per_class_interference=per["per_class_interference"][idx])
    return res


def metrics_from_stats(means, variances, counts, w, *, nc4: NC4State | None = None, **options) -> dict:
    """Collapse metrics from accumulated statistics of one checkpoint.

    Args:
      means: (V, d) class means (e.g. :func:`class_means`), variances: (V,)
        sigma_c^2 (:func:`class_variances` or :func:`one_pass_variances`),
        counts: (V,) N_c, w: (V, d) LM head.  nc4: optional
        :class:`NC4State` accumulated on validation tokens with
        :func:`nc4_update` (use :func:`nc4_search_set` for the search set).
      options: the fields of :class:`~sbjax.metrics.collapse_kernel.MetricOptions`
        (min_count=1, cdnv_exponent=2, weighted_mean=False, norm_variant="norm",
        angle_variant="cos", gnc2_centered=True, nc4_weighted=True, block_size=512,
        ddof=1, per_class=False, coincide_rtol=None, riesz_s=1.0); the module
        docstring gives each variant.

    Returns a dict of Python floats/ints: nc1_cdnv, nc1_log10_mean_cdnv,
    nc1_mean_log10_cdnv(_std) (old names nc1_log10_cdnv(_std)), nc1_n_pairs,
    nc1_n_coincident_pairs, nc1_n_zero_pairs, nc2_norm_cov, nc2_log_norm_cov,
    nc2_norm_cov_corrected, nc2_corrected_n_classes, nc2_corrected_n_clipped,
    unc3_cos_cov_guarded, nc3_cos_se, unc3_ill_conditioned, nc2_cos_mean, nc2_cos_std, etf_error,
    gnc2_log_kernel_mean, gnc2_log_kernel_var, gnc2_n_coincident_pairs, gnc2_riesz_log_mean,
    gnc2_riesz_mean, nc3_cos_mean, unc3_cos_cov, dual_error, n_classes, (nc4_agreement if
    nc4 given), and with ``per_class=True`` numpy arrays class_ids, per_class_cdnv,
    per_class_interference (see :func:`per_class_stats`).

    Validates on the host, then one call of the jitted
    :func:`~sbjax.metrics.collapse_kernel.stats_kernel` over all V rows with the analysed
    classes as a mask (it recompiles only per V, d and options).
    """
    opts = metric_options(**options)
    counts = np.asarray(counts)
    v = counts.shape[0]
    means, variances, w = np.asarray(means), np.asarray(variances), np.asarray(w)
    if counts.ndim != 1 or means.shape[0] != v or variances.shape != (v,) or w.shape != means.shape:
        raise ValueError(f"shape mismatch: means {means.shape}, variances {variances.shape}, counts {counts.shape}, "
                         f"w {w.shape}; give means and w as (V, d), variances and counts as (V,)")
    idx = analyzed_classes(counts, opts.min_count)
    check_finite("class means", means[idx])
    check_finite("class variances", variances[idx])
    check_finite("W (analysed rows)", w[idx])
    out, aux = jit_stats_aux(means, variances, counts, w, nc4, opts=opts)
    return to_host(out, aux, idx, opts)


def per_class_stats(means, variances, counts, *, min_count: int = 1, cdnv_exponent: float = 2, weighted_mean: bool = False, block_size: int = 512):
    """Token-level view: per analysed class c,

    * ``per_class_cdnv[c]`` = mean over c' != c of s(c, c') (coincident
      partners excluded; NaN only if c has no non-coincident partner),
    * ``per_class_interference[c]`` = mean over c' != c of cos(mu~_c, mu~_c'),

    streamed with the same blocked pass as :func:`metrics_from_stats` (O(K)
    extra memory).  Returns dict with ``class_ids`` (K,) and the two (K,) arrays.
    """
    w = np.zeros_like(np.asarray(means))
    r = metrics_from_stats(
        means, variances, counts, w, min_count=min_count, cdnv_exponent=cdnv_exponent,
        weighted_mean=weighted_mean, block_size=block_size, per_class=True,
    )
    return {k: r[k] for k in ("class_ids", "per_class_cdnv", "per_class_interference")}


def collapse_metrics(
    feats,
    labels,
    w,
    val_feats=None,
    val_labels=None,
    *,
    nc4_search: str = "analyzed",
    variance: str = "two_pass",
    batch_size: int = 65536,
    nc4_chunk_size: int = 4096,
    **options,
) -> dict:
    """One-call collapse metrics: feats (N, d), labels (N,) in [0, V), w (V, d).

    A thin host wrapper: validates the inputs (``ValueError``: shapes, integer labels in
    [0, V), finite features, >= 2 analysed classes, the options), then one call of the
    jitted :func:`~sbjax.metrics.collapse_kernel.collapse_kernel`, which streams the
    tokens in ``batch_size`` batches through :func:`mean_update` and
    (``variance="two_pass"``, default) :func:`var_update`, or uses the float64-only
    :func:`one_pass_variances` (``variance="one_pass"``, needs x64).  With
    ``val_feats``/``val_labels`` it adds ``nc4_agreement`` (search set per ``nc4_search``,
    ``nc4_chunk_size`` classes at a time).  ``options`` and the keys: as
    :func:`metrics_from_stats` (see there and the module docstring).
    """
    opts = metric_options(**options)
    popts = metric_options(PassOptions, nc4_search=nc4_search, variance=variance, batch_size=batch_size,
                           nc4_chunk_size=nc4_chunk_size)
    feats_np, labels_np, w_np = np.asarray(feats), np.asarray(labels), np.asarray(w)
    if w_np.ndim != 2:
        raise ValueError(f"w must be (V, d), got shape {w_np.shape}")
    v, d = w_np.shape
    check_inputs("train", feats_np, labels_np, v, d)
    if (val_feats is None) != (val_labels is None):
        raise ValueError("give both val_feats and val_labels, or neither")
    idx = analyzed_classes(np.bincount(labels_np, minlength=v), opts.min_count)  # early, clear error
    check_finite("W (analysed rows)", w_np[idx])
    if val_feats is not None:
        val_feats, val_labels = np.asarray(val_feats), np.asarray(val_labels)
        check_inputs("validation", val_feats, val_labels, v, d)
    out, aux = jit_features_aux(feats_np, labels_np, w_np, val_feats, val_labels, None, None, opts=opts, popts=popts)
    return to_host(out, aux, idx, opts)
