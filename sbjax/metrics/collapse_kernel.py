"""Neural-collapse statistics as pure, jittable, vmappable kernels (NC1-NC4 of K checkpoints in
one call).

The number of classes is static: V = ``w.shape[0]`` (the rows of the LM head).  The
analysed classes are a **mask**, N_c >= ``min_count``, computed inside; absent classes and
classes with too few tokens are masked out, never gathered away on the host, so nothing
depends on concrete values and the kernels trace under ``jax.jit`` and ``jax.vmap``::

    kern = partial(collapse_kernel, min_count=2)              # options are static
    out = jax.jit(jax.vmap(kern, in_axes=(0, None, 0)))(feats_KxNxd, labels_N, w_KxVxd)
    out["nc1_log10_mean_cdnv"]                                 # shape (K,)

(``in_axes=(0, 0, 0)`` for per-checkpoint labels; a token ``mask`` (N,) drops padding.)

* :func:`collapse_kernel` -- features -> the three passes of ``accumulators`` (class means,
  two-pass variances, NC4 hits on validation tokens) -> :func:`stats_kernel`.
* :func:`stats_kernel` -- accumulated statistics (means, variances, counts, W, an optional
  NC4 state) -> every key of :func:`sbjax.metrics.collapse.collapse_metrics`, through the
  one core of ``_collapse_core`` (the host functions call the same core).

No host-side checks inside: where the metrics are undefined (fewer than 2 analysed classes,
every class mean identical) the floating keys are NaN; labels outside [0, V) are dropped.
The host wrappers in :mod:`sbjax.metrics.collapse` validate and raise instead.  Keys are jnp
scalars (``n_classes`` and the counts are integers); with ``per_class=True`` also
``class_analyzed`` (V,) bool and ``per_class_cdnv`` / ``per_class_interference`` (V,).
Computed in float32 (float64 when x64 is enabled), matmuls at HIGHEST precision.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ._collapse_core import core, finish
from ._util import acc_dtype
from .accumulators import (
    NC4State, class_means, class_variances, mean_init, mean_update, nc4_agreement, nc4_init, nc4_update,
    one_pass_variances, var_init, var_update,
)

__all__ = ["MetricOptions", "PassOptions", "metric_options", "collapse_kernel", "stats_kernel"]


class MetricOptions(NamedTuple):
    """The static options of the statistics (module doc of ``collapse`` for each variant)."""

    min_count: int = 1
    cdnv_exponent: float = 2.0
    weighted_mean: bool = False
    norm_variant: str = "norm"
    angle_variant: str = "cos"
    gnc2_centered: bool = True
    nc4_weighted: bool = True
    block_size: int = 512
    ddof: int = 1
    per_class: bool = False
    coincide_rtol: float | None = None
    riesz_s: float = 1.0


class PassOptions(NamedTuple):
    """The static options of the token passes of :func:`collapse_kernel`."""

    nc4_search: str = "analyzed"
    variance: str = "two_pass"
    batch_size: int = 65536
    nc4_chunk_size: int = 4096


_CHOICES = {"norm_variant": ("norm", "squared"), "angle_variant": ("cos", "inner"),
            "nc4_search": ("analyzed", "all"), "variance": ("two_pass", "one_pass")}


def metric_options(cls=MetricOptions, **kw):
    """``cls(**kw)`` checked: unknown names, values outside their choices, min_count < 1 and
    sizes < 1 raise a one-line ``ValueError``."""
    bad = sorted(set(kw) - set(cls._fields))
    if bad:
        raise ValueError(f"unknown collapse option(s) {bad}; valid options are {list(cls._fields)}")
    o = cls(**kw)
    for name, value in o._asdict().items():
        if name in _CHOICES and value not in _CHOICES[name]:
            raise ValueError(f"{name} must be one of {_CHOICES[name]}, got {value!r}")
        if name in ("block_size", "batch_size", "nc4_chunk_size") and int(value) < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if cls is MetricOptions and o.min_count < 1:
        raise ValueError(f"min_count must be >= 1 (classes without tokens have no mean), got {o.min_count}")
    return o


def stats_aux(means, variances, counts, w, nc4: NC4State | None, opts: MetricOptions):
    """(keys, aux) of :func:`stats_kernel`; aux = {"max_norm": max ||mu~_c||} for the host's
    'all means identical' error."""
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
    if nc4 is not None:
        out["nc4_agreement"] = nc4_agreement(nc4, weighted=bool(opts.nc4_weighted))
    return out, {"max_norm": res["max_norm"]}


def stats_kernel(means, variances, counts, w, nc4: NC4State | None = None, **options) -> dict:
    """Every collapse key from accumulated statistics of one checkpoint (pure, vmappable).

    means: (V, d) class means, variances: (V,) sigma_c^2 (biased), counts: (V,) N_c, w: (V, d)
    LM head; nc4: an :class:`NC4State` (its search set chosen by the caller).  ``options``:
    the fields of :class:`MetricOptions`."""
    return stats_aux(means, variances, counts, w, nc4, metric_options(**options))[0]


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


def features_aux(feats, labels, w, val_feats, val_labels, mask, val_mask, opts: MetricOptions, popts: PassOptions):
    """(keys, aux) of :func:`collapse_kernel` (aux as in :func:`stats_aux`)."""
    v, d = w.shape
    feats, labels = jnp.asarray(feats), jnp.asarray(labels)
    st = token_scan(mean_update, mean_init(v, d), feats, labels, mask, popts.batch_size)
    means, counts = class_means(st)
    if popts.variance == "one_pass":
        variances = one_pass_variances(st)
    else:
        vs = token_scan(lambda s, h, y, m: var_update(s, h, y, means, m), var_init(v), feats, labels, mask,
                        popts.batch_size)
        variances = class_variances(vs)
    nc4 = None
    if val_feats is not None:
        analysed = counts >= opts.min_count
        wv, mv = (analysed, analysed) if popts.nc4_search == "analyzed" else (jnp.ones((v,), bool), counts > 0)
        nc4 = nc4_update(nc4_init(v), val_feats, val_labels, w, means, w_valid=wv, mean_valid=mv,
                         valid=val_mask, chunk_size=popts.nc4_chunk_size)
    return stats_aux(means, variances, counts, w, nc4, opts)


def collapse_kernel(feats, labels, w, val_feats=None, val_labels=None, *, mask=None, val_mask=None,
                    nc4_search: str = "analyzed", variance: str = "two_pass", batch_size: int = 65536,
                    nc4_chunk_size: int = 4096, **options) -> dict:
    """NC1-NC4 of one checkpoint from its features (pure, jittable, vmappable).

    feats (N, d), labels (N,) ints in [0, V), w (V, d); optional val_feats (M, d),
    val_labels (M,) add ``nc4_agreement``; mask (N,) / val_mask (M,) bool drop tokens.
    ``nc4_search``, ``variance``, ``batch_size``, ``nc4_chunk_size`` as in
    ``collapse_metrics``; ``options``: the fields of :class:`MetricOptions`."""
    popts = metric_options(PassOptions, nc4_search=nc4_search, variance=variance, batch_size=batch_size,
                           nc4_chunk_size=nc4_chunk_size)
    return features_aux(feats, labels, w, val_feats, val_labels, mask, val_mask, metric_options(**options), popts)[0]


jit_stats_aux = jax.jit(stats_aux, static_argnames=("opts",))
jit_features_aux = jax.jit(features_aux, static_argnames=("opts", "popts"))
