"""Train one architecture group and measure every snapshot (the rows of collapse_models.csv);
the R² and token tables written by ``run``."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from .budget import watch
from .presets import Preset
from ..shared import config_from, save_npz
from sbjax.atomic import atomic_write_text
from sbjax.config import ModelConfig, TrainConfig
from sbjax.data.dataset import Dataset
from sbjax.model import Model
from sbjax.studies import collapse_grid as cg

# The authors' R² against validation loss and the sign of r they imply (docs/metrics.md section 5:
# computed by us from the authors' released results table over 230 TinyStories models, not
# figures printed in the paper). None: no number in our reference (docs/metrics.md), so no verdict.
# Keys: our metric -> (authors' R², authors' sign, what it is).
ANCHORS = {
    "nc1_log10_mean_cdnv": (0.92, +1, "log10 of the mean CDNV, k=2 (the authors' log CDNV)"),
    "nc4_agreement": (0.89, -1, "NC4 agreement"),
    "unc3_cos_cov": (0.69, +1, "UNC3 = std/mean of cos(w_c, mu~_c), unguarded (as the authors)"),
    "unc3_cos_cov_guarded": (0.69, +1, "UNC3, NaN where |mean cos| < 3 SE"),
    "nc2_norm_cov": (0.08, 0, "CoV of norms (NC2), raw"),
    "nc2_norm_cov_corrected": (0.08, 0, "CoV of norms (NC2), bias-corrected"),
    "nc3_cos_mean": (None, None, "NC3 mean self-duality cos(w_c, mu~_c)"),
    "gnc2_log_kernel_mean": (None, None, "GNC2 mean log kernel (hyperspherical uniformity)"),
}
ANCHOR_SOURCE = "computed from the authors' results"
# Scalar metrics of collapse_metrics (counts such as n_classes are in the CSV, not fitted).
# nc1_mean_log10_cdnv is the mean over pairs of log10 (formerly the column nc1_log10_cdnv);
# nc1_log10_mean_cdnv is log10 of the mean, the authors' statistic.
METRICS = ("nc1_cdnv", "nc1_log10_mean_cdnv", "nc1_mean_log10_cdnv", "nc1_mean_log10_cdnv_std",
           "nc2_norm_cov", "nc2_norm_cov_corrected", "nc2_log_norm_cov", "nc2_cos_mean",
           "nc2_cos_std", "etf_error", "gnc2_log_kernel_mean", "gnc2_log_kernel_var",
           "nc3_cos_mean", "unc3_cos_cov", "unc3_cos_cov_guarded", "dual_error", "nc4_agreement")
COUNT_KEYS = ("nc1_n_pairs", "nc1_n_coincident_pairs", "nc1_n_zero_pairs",
              "gnc2_n_coincident_pairs", "n_classes", "nc2_corrected_n_classes",
              "nc2_corrected_n_clipped", "unc3_ill_conditioned", "nc3_cos_se")
TOP_TOKENS = 10
SETTINGS = {"cdnv_exponent": 2.0, "weighted_mean": False,
            "nc4_search": "analyzed", "norm_variant": "norm", "angle_variant": "cos",
            "gnc2_centered": True, "variance": "two_pass", "ddof": 1}
PASS_KEYS = ("cdnv_exponent", "weighted_mean", "nc4_search")
# the two selections of models an R² is computed over
POINTS = {"last": "one point per run (its last snapshot)",
          "all": "all snapshots (runs counted once per snapshot; not independent)"}


def _no_data(overrides: dict) -> dict:
  return {k: v for k, v in overrides.items() if not k.startswith("data.")}


def model_config(p: Preset, n_layers: int, d: int, vocab: int) -> ModelConfig:
  """The GPT-Neo-like model of the grid (validated ``ModelConfig``); local attention
  windows no longer than the sequence."""
  cfg = config_from(f"{p.base}-L{n_layers}-d{d}", _no_data(p.overrides))
  return dataclasses.replace(cfg.model, vocab_size=vocab,
                             window_size=min(cfg.model.window_size, p.overrides["train.seq_len"]))


def train_config(p: Preset, steps: int) -> TrainConfig:
  """The group's training: ``steps`` steps, warm-up at most steps - 1 (the train section is
  the same for every architecture of the family)."""
  o = p.overrides
  n_layers, d = p.knobs.seed_arch
  tc = config_from(f"{p.base}-L{n_layers}-d{d}", _no_data(o)).train
  return dataclasses.replace(tc, steps=steps,
                             warmup_steps=min(o["train.warmup_steps"], max(steps - 1, 0)))


def windows(tokens: np.ndarray, seq_len: int) -> np.ndarray:
  n = (len(tokens) - 1) // seq_len
  return tokens[np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)].astype(np.int32)


def scalar(v):
  """A metric value as a plain Python bool, int or float (for CSV rows and JSON)."""
  if isinstance(v, (bool, np.bool_)):
    return bool(v)
  if isinstance(v, (int, np.integer)):
    return int(v)
  return float(v)


def _row(g, m, e: int, spe: int, p: Preset, mc: ModelConfig, n_params: int, r: dict,
         min_count: int) -> dict:
  name, kind, n_layers, d, _, epochs = g
  seq_len, batch = p.overrides["train.seq_len"], p.overrides["train.batch_size"]
  run_id = f"{name}-wd{m.weight_decay:g}-s{m.seed}"
  row = {"model": f"{run_id}-e{e}", "run": run_id, "group": name, "kind": kind,
         "n_layers": n_layers, "d_model": d, "n_heads": mc.n_heads, "vocab_size": mc.vocab_size,
         "n_params": n_params, "weight_decay": m.weight_decay, "seed": m.seed,
         "data_seed": m.data_seed, "epochs": e, "last_snapshot": int(e == max(epochs)),
         "min_count": min_count, "steps": spe * e,
         "train_tokens_seen": spe * e * batch * seq_len, "val_loss": r["val_loss"],
         "val_tokens": r["val_tokens"], "train_tokens": r["train_tokens"]}
  row.update({k: scalar(r.get(k, float("nan"))) for k in METRICS + COUNT_KEYS})
  row.update(SETTINGS)
  row["unc3_reason"] = r.get("unc3_reason", "")
  return row


def run_group(p: Preset, g, tr, va, vocab: int, out: Path, verbose: bool = True,
              clock=None) -> list[dict]:
  """Train one architecture group, measure every snapshot at every min_count; rows (kept in
  OUT/groups/, so a finished group is read back and its data arrays are never touched).
  ``clock`` (``budget.Clock``): the group's time estimate and budget stop."""
  name, _, n_layers, d, members, epochs = g
  path = out / "groups" / f"{name}.json"
  if path.exists():
    return json.loads(path.read_text())["rows"]
  seq_len, batch = p.overrides["train.seq_len"], p.overrides["train.batch_size"]
  mc = model_config(p, n_layers, d, vocab)
  dss = [Dataset(tr, va, seq_len=seq_len, global_batch_size=batch, seed=m.data_seed,
                 vocab_size=vocab, process_index=0, process_count=1) for m in members]
  spe = max(1, dss[0].n_train_windows // batch)  # steps per epoch
  dss = watch(dss, clock, name, spe * max(epochs), batch * seq_len * len(members))
  t0 = time.perf_counter()
  snaps, info = cg.train_group(mc, train_config(p, spe * max(epochs)), members, dss,
                               [spe * e for e in epochs], name=name,
                               log_every=(spe if verbose else 0))
  t_train = time.perf_counter() - t0
  trw, vaw = windows(tr, seq_len), windows(va, seq_len)
  rows, n_params = [], Model(mc).param_count()
  (out / "perclass").mkdir(parents=True, exist_ok=True)
  min_counts = tuple(p.knobs.min_counts)
  for e in epochs:
    t1 = time.perf_counter()
    res = cg.collapse_pass_multi(mc, snaps[spe * e], trw, vaw, chunk=p.knobs.chunk,
                                 min_counts=min_counts, **{k: SETTINGS[k] for k in PASS_KEYS})
    t_pass = (time.perf_counter() - t1) / len(members)
    for m, per in zip(members, res):
      for mcount in min_counts:
        r = per[mcount]
        row = _row(g, m, e, spe, p, mc, n_params, r, mcount)
        if mcount == min_counts[0]:
          save_npz(out / "perclass" / f"{row['model']}.npz", class_ids=r["class_ids"],
                   per_class_cdnv=r["per_class_cdnv"],
                   per_class_interference=r["per_class_interference"], counts=r["class_counts"])
        row.update(train_seconds=round(t_train / len(members), 2),
                   pass_seconds=round(t_pass, 2), error=r["error"])
        rows.append(row)
  atomic_write_text(path, json.dumps({"rows": rows, "train_info": {
      "seconds": info["seconds"], "steps": info["steps"],
      "train_loss": [float(x) for x in info["train_loss"]]}}, indent=1))
  return rows
