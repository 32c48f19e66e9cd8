"""Train one architecture group and measure every snapshot (the rows of collapse_models.csv);
the R² and token tables written by ``run``."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np

from experiments.collapse.presets import Preset
from experiments.shared import config_from, read_rows
from sbjax.config import ModelConfig, TrainConfig
from sbjax.data.dataset import Dataset
from sbjax.data.tokenizer import Tokenizer
from sbjax.model import Model
from sbjax.studies import collapse_grid as cg
from sbjax.studies import stats

# The paper's R² against validation loss (METRICS.md section 5) and the sign of r they imply.
ANCHORS = {"nc1_log10_cdnv": (0.92, +1), "nc4_agreement": (0.89, -1),
           "unc3_cos_cov": (0.69, +1), "nc2_norm_cov": (0.08, 0)}
# Scalar metrics of collapse_metrics (counts such as n_classes are in the CSV, not fitted).
METRICS = ("nc1_cdnv", "nc1_log10_cdnv", "nc1_log10_cdnv_std", "nc1_log10_mean_cdnv",
           "nc2_norm_cov", "nc2_log_norm_cov", "nc2_cos_mean", "nc2_cos_std", "etf_error",
           "gnc2_log_kernel_mean", "gnc2_log_kernel_var", "nc3_cos_mean", "unc3_cos_cov",
           "dual_error", "nc4_agreement")
COUNT_KEYS = ("nc1_n_pairs", "nc1_n_coincident_pairs", "nc1_n_zero_pairs",
              "gnc2_n_coincident_pairs", "n_classes")
TOP_TOKENS = 10
SETTINGS = {"min_count": 1, "cdnv_exponent": 2.0, "weighted_mean": False,
            "nc4_search": "analyzed", "norm_variant": "norm", "angle_variant": "cos",
            "gnc2_centered": True, "variance": "two_pass", "ddof": 1}
PASS_KEYS = ("min_count", "cdnv_exponent", "weighted_mean", "nc4_search")


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


def _scalar(v):
  if isinstance(v, (bool, np.bool_)):
    return bool(v)
  if isinstance(v, (int, np.integer)):
    return int(v)
  return float(v)


def _row(g, m, e: int, spe: int, p: Preset, mc: ModelConfig, n_params: int, r: dict) -> dict:
  name, kind, n_layers, d, _, _ = g
  seq_len, batch = p.overrides["train.seq_len"], p.overrides["train.batch_size"]
  row = {"model": f"{name}-wd{m.weight_decay:g}-s{m.seed}-e{e}", "group": name, "kind": kind,
         "n_layers": n_layers, "d_model": d, "n_heads": mc.n_heads, "vocab_size": mc.vocab_size,
         "n_params": n_params, "weight_decay": m.weight_decay, "seed": m.seed,
         "data_seed": m.data_seed, "epochs": e, "steps": spe * e,
         "train_tokens_seen": spe * e * batch * seq_len, "val_loss": r["val_loss"],
         "val_tokens": r["val_tokens"], "train_tokens": r["train_tokens"]}
  row.update({k: _scalar(r.get(k, float("nan"))) for k in METRICS + COUNT_KEYS})
  row.update(SETTINGS)
  return row


def run_group(p: Preset, g, tr, va, vocab: int, out: Path, verbose: bool = True) -> list[dict]:
  """Train one architecture group, measure every snapshot; rows (kept in OUT/groups/, so a
  finished group is read back and its data arrays are never touched)."""
  name, _, n_layers, d, members, epochs = g
  path = out / "groups" / f"{name}.json"
  if path.exists():
    return json.loads(path.read_text())["rows"]
  seq_len, batch = p.overrides["train.seq_len"], p.overrides["train.batch_size"]
  mc = model_config(p, n_layers, d, vocab)
  dss = [Dataset(tr, va, seq_len=seq_len, global_batch_size=batch, seed=m.data_seed,
                 vocab_size=vocab, process_index=0, process_count=1) for m in members]
  spe = max(1, dss[0].n_train_windows // batch)  # steps per epoch
  t0 = time.perf_counter()
  snaps, info = cg.train_group(mc, train_config(p, spe * max(epochs)), members, dss,
                               [spe * e for e in epochs], name=name,
                               log_every=(spe if verbose else 0))
  t_train = time.perf_counter() - t0
  trw, vaw = windows(tr, seq_len), windows(va, seq_len)
  rows, n_params = [], Model(mc).param_count()
  (out / "perclass").mkdir(parents=True, exist_ok=True)
  for e in epochs:
    t1 = time.perf_counter()
    res = cg.collapse_pass(mc, snaps[spe * e], trw, vaw, chunk=p.knobs.chunk,
                           **{k: SETTINGS[k] for k in PASS_KEYS})
    t_pass = (time.perf_counter() - t1) / len(members)
    for m, r in zip(members, res):
      row = _row(g, m, e, spe, p, mc, n_params, r)
      np.savez(out / "perclass" / f"{row['model']}.npz", class_ids=r["class_ids"],
               per_class_cdnv=r["per_class_cdnv"],
               per_class_interference=r["per_class_interference"], counts=r["class_counts"])
      row.update(train_seconds=round(t_train / len(members), 2), pass_seconds=round(t_pass, 2),
                 error=r["error"])
      rows.append(row)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_suffix(".tmp")
  tmp.write_text(json.dumps({"rows": rows, "train_info": {
      "seconds": info["seconds"], "steps": info["steps"],
      "train_loss": [float(x) for x in info["train_loss"]]}}, indent=1))
  tmp.replace(path)
  return rows


# ------------------------------------------------------------------------------ tables
def model_rows(out: Path, kind: str) -> list[dict]:
  """The rows of collapse_models.csv of one kind (grid | seeds)."""
  return [r for r in read_rows(Path(out) / "collapse_models.csv") if r.get("kind") == kind]


def column(rows, key) -> np.ndarray:
  return np.asarray([float(r.get(key, np.nan)) for r in rows], np.float64)


def r2_table(rows: list[dict], n_perm: int = 0) -> list[dict]:
  """Per metric: n, R², Pearson r (and the permutation p) of the metric vs val_loss."""
  y = column(rows, "val_loss")
  out = []
  for i, k in enumerate(METRICS):
    s = stats.correlation_summary(column(rows, k), y, n_perm=n_perm, seed=i)
    out.append({"metric": k, **s, "paper_r2": ANCHORS[k][0] if k in ANCHORS else ""})
  return out


def _piece(out: Path, meta: dict):
  """Token id -> its piece with the experiment's tokenizer (the id itself without one)."""
  tok = meta.get("tokenizer")
  if tok:
    tp = Path(tok) if Path(tok).is_absolute() else Path(out) / tok
    if tp.exists():
      return Tokenizer(tp).id_to_piece
  return str


def token_table(out: Path, top: int = TOP_TOKENS) -> list[dict]:
  """Table 5: per-class CDNV and interference of the most frequent tokens of the grid's
  best model (lowest val loss) vs the average analysed token."""
  ok = [r for r in model_rows(out, "grid") if math.isfinite(r["val_loss"]) and
        math.isfinite(r.get("nc1_log10_cdnv", math.nan))]
  best = min(ok, key=lambda r: r["val_loss"])
  z = np.load(Path(out) / "perclass" / f"{best['model']}.npz")
  ids, cdnv, itf = z["class_ids"], z["per_class_cdnv"], z["per_class_interference"]
  cnt = z["counts"][ids]
  piece = _piece(out, json.loads((Path(out) / "collapse_meta.json").read_text()))
  rows = []
  for rank, j in enumerate(np.argsort(-cnt, kind="stable")[:top], 1):
    rows.append({"model": best["model"], "rank": rank, "token_id": int(ids[j]),
                 "token": piece(int(ids[j])), "count": int(cnt[j]), "cdnv": float(cdnv[j]),
                 "log10_cdnv": float(np.log10(cdnv[j])), "interference": float(itf[j])})
  rows.append({"model": best["model"], "rank": "average", "token_id": "", "token": "(mean over "
               f"{ids.size} classes)", "count": float(cnt.mean()),
               "cdnv": float(np.nanmean(cdnv)), "log10_cdnv": float(np.nanmean(np.log10(cdnv))),
               "interference": float(np.mean(itf))})
  return rows
