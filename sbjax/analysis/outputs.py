"""The files an analysis writes: OUT/metrics.csv, spectrum.npz, metrics.json, the figures.

``metrics.json`` records the settings, the cache key, the samples, the metric variants, the
column definitions (``COLUMN_DOCS``), how the work was scheduled, the damaged checkpoints set
aside (``set_aside``) and the steps without a checksum manifest (``unverified_steps``).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

import sbjax
from sbjax import checkpoint as ckpt
from sbjax.analysis import figures, table
from sbjax.atomic import atomic_write_bytes, atomic_write_json
from sbjax.analysis.settings import Settings

COLUMN_DOCS = {
    "step": "checkpoint step",
    "gamma": "weight-decay timescales lambda * sum_{t<step} lr_t (runs sbjax trained only)",
    "eval_loss": "mean next-token cross-entropy (nats) on the evaluation sample",
    "eval_acc": "next-token top-1 accuracy on the evaluation sample",
    "anisotropy_layer_<i>": "mean pairwise cosine of the residual stream after block i",
    "anisotropy_last": "mean pairwise cosine of the final-norm features h (head input)",
    "head_kl_uniform": "KL(sigma/sum sigma || uniform) of the head matrix (Godey Fig. 5)",
    "head_erank": "effective rank exp(H(p)) of the head",
    "head_per": "head erank / min(V, d)",
    "head_stable_rank": "||W||_F^2 / sigma_1^2",
    "head_sigma_max": "largest singular value of the head",
    "head_w_error_<d>": "relative Frobenius error of the best rank-d approximation of W",
    "head_kl_uniform_centred": "head_kl_uniform of the vocabulary-centred head (I - 11^T/V) W",
    "head_erank_centred": "head_erank of (I - 11^T/V) W",
    "head_w_error_centred_<d>": "head_w_error_<d> of (I - 11^T/V) W",
    "nc1_cdnv ... n_classes": "sbjax.metrics.collapse_metrics keys (train-sample means, "
                              "NC4 on the evaluation sample)",
    "cka_to_final_mlp_<i>": "linear CKA of block i's MLP output vs the final checkpoint's",
    "cka_to_final_attn_<i>": "linear CKA of block i's OV-circuit output vs the final checkpoint's",
    "per_mlp_<i>": "proportional effective rank of block i's fc_out_kernel",
    "per_ov_<i>": "mean over heads of PER(W_V,h W_O,h) with r = head_dim",
}


def write_spectrum(out: Path, cfg, settings: Settings, tops: dict, steps) -> dict:
  """OUT/spectrum.npz: steps, normalized_top (S x spectrum_top, NaN where unknown)."""
  k = settings.spectrum_top
  top = np.array([tops[s] if tops.get(s) is not None else [np.nan] * k for s in steps],
                 np.float32).reshape(len(steps), k)
  buf = io.BytesIO()
  n_sv = min(cfg.model.vocab_size, cfg.model.d_model)
  np.savez(buf, steps=np.asarray(steps, np.int64), normalized_top=top,
           n_singular_values=np.asarray(n_sv))
  atomic_write_bytes(out / "spectrum.npz", buf.getvalue())
  return {"steps": np.asarray(steps, np.int64), "normalized_top": top}


def variants(cfg, settings: Settings, n_coll_failed: int) -> dict:
  """The metric variants of this analysis (metrics.json ``variants``)."""
  mc = cfg.model
  return {
      "anisotropy": "mean pairwise cosine over distinct pairs of the sampled positions "
                    "(sbjax.metrics.anisotropy)",
      "spectrum": "singular values of heads.head_matrix (method=auto); p = sigma / sum sigma",
      "w_error_dims": [int(x) for x in settings.w_error_dims if x <= mc.d_model],
      "collapse": {"min_count": settings.min_count, "cdnv_exponent": settings.cdnv_exponent,
                   "weighted_mean": settings.weighted_mean, "nc4_search": settings.nc4_search,
                   "norm_variant": "norm", "angle_variant": "cos", "gnc2_centered": True,
                   "variance": "two_pass", "ddof": 1,
                   "means_on": "train sample", "nc4_on": "evaluation sample",
                   "failed_steps": n_coll_failed},
      "cka": {"estimator": "debiased HSIC" if settings.cka_debiased else "biased HSIC (linear)",
              "tokens": settings.cka_tokens, "reference": "final checkpoint",
              "attn": "OV-circuit output sum_h (x W_V,h + b_V,h) W_O,h, no attention weighting"},
      "per": {"mlp": f"PER(sigma(fc_out_kernel)), r = "
                     f"{settings.per_mlp_r or 'len(sigma) (full)'}",
              "ov": f"mean over {mc.n_heads} heads of PER(sigma(W_V,h W_O,h)), "
                    f"r = head_dim = {mc.head_dim}"},
  }


def write_outputs(out: Path, workdir, cfg, settings: Settings, rows, tops, steps, sample_info,
                  run_key: str, schedule: dict, n_coll_failed: int,
                  set_aside: list | None = None) -> None:
  """metrics.csv, spectrum.npz (spectrum group), metrics.json and the figures.
  ``schedule``: group_size, param_bytes_per_checkpoint, computed_checkpoints, seconds;
  ``set_aside``: the damaged steps left out ({step, reason, moved_to})."""
  table.write_csv(out / "metrics.csv", rows)
  spectrum = write_spectrum(out, cfg, settings, tops, steps) if settings.has("spectrum") else None
  meta = {
      "sbjax_version": sbjax.__version__,
      "workdir": str(workdir),
      "run_name": cfg.name,
      "steps": list(steps),
      "n_checkpoints": len(steps),
      "final_step": ckpt.list_steps(workdir)[-1],
      "settings": settings.to_dict(),
      "cache_key": run_key,
      "samples": sample_info,
      "variants": variants(cfg, settings, n_coll_failed),
      "columns": COLUMN_DOCS,
      "set_aside": list(set_aside or []),
      "unverified_steps": ckpt.unverified_steps(workdir, steps),  # no checksum manifest
      **schedule,
  }
  atomic_write_json(out / "metrics.json", meta)
  if settings.figures:
    figures.draw_run(out, rows, spectrum)
