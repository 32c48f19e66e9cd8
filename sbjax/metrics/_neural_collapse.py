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
  exact b_c and what it does not remove: the module doc of ``_collapse_variants``.
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

Robustness: inside :func:`neural_collapse` nothing depends on concrete values: where the
metrics are undefined (fewer than 2 analysed classes, every class mean identical) the floating
fields are NaN, and labels outside [0, V) are dropped.  Wrong shapes, a non-integer label dtype
and bad options raise one ``ValueError`` when traced.  The host wrappers of
``_collapse_host`` (``collapse_metrics``, ``collapse_metrics_from_stats``) check concrete
inputs instead (NaN/inf features, labels outside [0, V), fewer than 2 analysed classes, all
class means identical: ``ValueError``) and return Python numbers; ``nc1_n_pairs`` is the
exact Python integer there and ``gnc2_riesz_mean`` the float64 exp of the log mean (here its
exp in the compute dtype).  Single-token classes have sigma^2 = 0 (fine); log(0) never
reaches a sum.

Many checkpoints in one call (the number of classes is static, V = ``w.shape[0]``; the
analysed classes are a mask, N_c >= ``min_count``, computed inside)::

  opts = CollapseOptions(min_count=2)                        # static: hashable, frozen
  f = jax.jit(jax.vmap(partial(neural_collapse, options=opts), in_axes=(0, None, 0)))
  out = f(feats_KxNxd, labels_N, w_KxVxd)                    # CollapseStats of (K,) arrays
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ._accumulators import (
    NC4State, class_means, class_variances, mean_init, mean_update, nc4_agreement, nc4_init, nc4_update,
    one_pass_variances, var_init, var_update,
)
from ._collapse_core import core, finish
from ._collapse_types import CollapseOptions, CollapseStats
from ._util import acc_dtype, check_shapes

_DEFAULT = CollapseOptions()


def stats_aux(means, variances, counts, w, nc4: NC4State | None, opts: CollapseOptions):
  """(CollapseStats, aux) from accumulated statistics; aux = {"max_norm": max ||mu~_c||} for
  the host's 'all means identical' error."""
  dt = acc_dtype()
  v = w.shape[0]
  cnt = jnp.asarray(counts)
  valid = cnt >= opts.min_count
  k = jnp.sum(valid.astype(jnp.int32))
  rtol = float(opts.coincide_rtol) if opts.coincide_rtol is not None else 8.0 * float(jnp.finfo(dt).eps)
  res = core(
      jnp.asarray(means).astype(dt), jnp.asarray(variances).astype(dt), jnp.asarray(w).astype(dt),
      cnt.astype(dt), valid, k, weighted_mean=bool(opts.weighted_mean), norm_variant=opts.norm_variant,
      ddof=int(opts.ddof), block=int(min(opts.block_size, -(-v // 8) * 8)), cdnv_exponent=float(opts.cdnv_exponent),
      angle_variant=opts.angle_variant, gnc2_centered=bool(opts.gnc2_centered), coincide_rtol=rtol,
      riesz_s=float(opts.riesz_s),
  )
  out = finish(res, k, per_class=bool(opts.per_class))
  if opts.per_class:
    out["class_analyzed"] = valid
  out["nc4_agreement"] = None if nc4 is None else nc4_agreement(nc4, weighted=bool(opts.nc4_weighted))
  absent = dict.fromkeys(("class_analyzed", "per_class_cdnv", "per_class_interference"))
  return CollapseStats(**{**absent, **out}), {"max_norm": res["max_norm"]}


def _check_stats(fn, means, variances, counts, w):
  check_shapes(fn, means=(means, "V d"), variances=(variances, "V"), counts=(counts, "V"), w=(w, "V d"))


def neural_collapse_from_stats(means, variances, counts, w, nc4: NC4State | None = None, *,
                               options: CollapseOptions = _DEFAULT) -> CollapseStats:
  """NC1-NC4 of one checkpoint from its accumulated statistics (pure: jit- and vmap-able).

  Args:
    means: (V, d) class means (``class_means``), any float dtype.
    variances: (V,) sigma_c^2, the biased trace (``class_variances``).
    counts: (V,) integer N_c; the analysed classes are N_c >= ``options.min_count``.
    w: (V, d) LM head.
    nc4: optional :class:`NC4State` (its search set chosen by the caller, e.g.
      ``nc4_search_set``); adds ``nc4_agreement``.
    options: a :class:`CollapseOptions` (static).

  Returns:
    A :class:`CollapseStats` of jax scalars (float32, or float64 under x64; the counts
    integers); NaN where undefined (module doc).
  """
  _check_stats("neural_collapse_from_stats", means, variances, counts, w)
  return stats_aux(means, variances, counts, w, nc4, options)[0]


def token_scan(step, state, feats, labels, mask, batch_size: int):
  """Fold ``step(state, h, y, m)`` over token batches of static size (no padded copy: the
  last batch is shifted back and masks the tokens already seen)."""
  n = feats.shape[0]
  if n < 1:
    raise ValueError("collapse statistics need at least one token (got N = 0)")
  bs = int(min(batch_size, n))
  mask = jnp.ones((n,), bool) if mask is None else jnp.asarray(mask, bool)
  ar = jnp.arange(bs)

  def body(st, i):
    s = jnp.minimum(i * bs, n - bs)
    m = lax.dynamic_slice_in_dim(mask, s, bs) & (s + ar >= i * bs)
    h, y = (lax.dynamic_slice_in_dim(x, s, bs) for x in (feats, labels))
    return step(st, h, y, m), None

  return lax.scan(body, state, jnp.arange(-(-n // bs)))[0]


def features_aux(feats, labels, w, val_feats, val_labels, mask, val_mask, opts: CollapseOptions):
  """(CollapseStats, aux) of :func:`neural_collapse` (aux as in :func:`stats_aux`)."""
  v, d = w.shape
  feats, labels = jnp.asarray(feats), jnp.asarray(labels)
  st = token_scan(mean_update, mean_init(v, d), feats, labels, mask, opts.batch_size)
  means, counts = class_means(st)
  if opts.variance == "one_pass":
    variances = one_pass_variances(st)
  else:
    vs = token_scan(lambda s, h, y, m: var_update(s, h, y, means, m), var_init(v), feats, labels, mask,
                    opts.batch_size)
    variances = class_variances(vs)
  nc4 = None
  if val_feats is not None:
    analysed = counts >= opts.min_count
    wv, mv = (analysed, analysed) if opts.nc4_search == "analyzed" else (jnp.ones((v,), bool), counts > 0)
    nc4 = nc4_update(nc4_init(v), val_feats, val_labels, w, means, w_valid=wv, mean_valid=mv,
                     valid=val_mask, chunk_size=opts.nc4_chunk_size)
  return stats_aux(means, variances, counts, w, nc4, opts)


def check_features(fn, feats, labels, w, val_feats, val_labels, mask=None, val_mask=None):
  """Shapes (features first, so a transposed head is blamed, not the features) and integer
  labels, at trace time."""
  check_shapes(fn, feats=(feats, "N d"), labels=(labels, "N"), w=(w, "V d"), mask=(mask, "N"),
               val_feats=(val_feats, "M d"), val_labels=(val_labels, "M"), val_mask=(val_mask, "M"))
  if (val_feats is None) != (val_labels is None):
    raise ValueError(f"{fn}: give both val_feats and val_labels, or neither")
  for name, y in (("labels", labels), ("val_labels", val_labels)):
    if y is not None and not jnp.issubdtype(jnp.result_type(y), jnp.integer):
      raise ValueError(f"{fn}: {name} has dtype {jnp.result_type(y)}, expected an integer dtype")


def neural_collapse(feats, labels, w, val_feats=None, val_labels=None, *, mask=None, val_mask=None,
                    options: CollapseOptions = _DEFAULT) -> CollapseStats:
  """NC1-NC4 of one checkpoint from its features (pure: jit- and vmap-able).

  The three passes of the authors (class means, two-pass variances, NC4 hits on validation
  tokens) stream the tokens in ``options.batch_size`` batches, then every statistic of the
  module doc.  The number of classes is static, V = ``w.shape[0]``; the analysed classes
  (N_c >= ``options.min_count``) are a mask, so nothing depends on concrete values.

  Args:
    feats: (N, d) last-layer features, any float dtype (bf16 upcast).
    labels: (N,) integer classes (next tokens) in [0, V); others are dropped.
    w: (V, d) LM head (rows = classes).
    val_feats: optional (M, d) validation features; with ``val_labels`` they add
      ``nc4_agreement``.
    val_labels: optional (M,) integer classes.
    mask: optional (N,) bool; False tokens are dropped (padding, a class missing in one
      checkpoint).
    val_mask: optional (M,) bool.
    options: a :class:`CollapseOptions` (static).

  Returns:
    A :class:`CollapseStats` of jax scalars (float32, or float64 under x64; the counts
    integers); NaN where undefined (module doc).
  """
  check_features("neural_collapse", feats, labels, w, val_feats, val_labels, mask, val_mask)
  return features_aux(feats, labels, w, val_feats, val_labels, mask, val_mask, options)[0]


jit_stats_aux = jax.jit(stats_aux, static_argnames=("opts",))
jit_features_aux = jax.jit(features_aux, static_argnames=("opts",))
