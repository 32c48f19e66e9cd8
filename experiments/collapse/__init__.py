r"""Linguistic collapse (Wu & Papyan 2024): neural-collapse metrics vs validation loss.

  python -m experiments.collapse --preset=cpu --out=out/collapse
  python -m experiments.collapse --preset=quick --out=/tmp/c --data=DIR_OF_TXT

A grid of GPT-Neo-like models (``sbjax.presets.neo``: learned positions, tied head,
alternating global/local attention), depth L x width d, each trained with weight decay
0 and 0.1 and measured after 1 and 3 epochs, plus a seed-only group (one architecture,
>= 8 data-order seeds). Models of one architecture train together in one vmapped program
(``sbjax.studies.collapse_grid.train_group``: per-member data order, init seed and weight
decay). The learning rate is constant after warm-up, so the 1-epoch model is exactly the
3-epoch run's snapshot at the end of epoch 1. An "epoch" is one pass over a fixed token
budget (the first ``epoch_tokens`` tokens of the training split).

For every model: the three streaming passes (train-split class means and variances, NC4
and the loss on validation), every key of ``sbjax.metrics.collapse_metrics``, and the
settings min_count / cdnv_exponent / weighted_mean / nc4_search, one CSV row per model.

Outputs in OUT: ``collapse_models.csv`` (one row per model), ``collapse_r2.csv`` (R² and
Pearson r of every metric vs validation loss over the grid), ``collapse_seeds.csv``
(seed-only group: r, R² and the permutation p-value with 10^4 permutations, Table 1),
``collapse_tokens.csv`` (per-class CDNV and interference of the most frequent tokens vs
the average token of the best model, Table 5), ``fig_collapse_vs_loss.png`` (Fig. 1) and
``collapse_meta.json``. Finished architecture groups are kept in ``OUT/groups/`` and
skipped on a rerun. ``report_section(out, rel)`` gives the markdown section.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
import time
from pathlib import Path

import numpy as np
from absl import flags

from experiments import common

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = "../shared/data/shakespeare"  # relative to the repository root

# The paper's R² against validation loss (METRICS.md section 5) and the sign of r they imply.
ANCHORS = {"nc1_log10_cdnv": (0.92, +1), "nc4_agreement": (0.89, -1),
           "unc3_cos_cov": (0.69, +1), "nc2_norm_cov": (0.08, 0)}
NAMES = {"nc1_log10_cdnv": "log10 CDNV (NC1)", "nc4_agreement": "NC4 agreement",
         "unc3_cos_cov": "UNC3 (CoV of self-duality)", "nc2_norm_cov": "CoV of norms (NC2)"}
# Scalar metrics of collapse_metrics (counts such as n_classes are in the CSV, not fitted).
METRICS = ("nc1_cdnv", "nc1_log10_cdnv", "nc1_log10_cdnv_std", "nc1_log10_mean_cdnv",
           "nc2_norm_cov", "nc2_log_norm_cov", "nc2_cos_mean", "nc2_cos_std", "etf_error",
           "gnc2_log_kernel_mean", "gnc2_log_kernel_var", "nc3_cos_mean", "unc3_cos_cov",
           "dual_error", "nc4_agreement")
COUNT_KEYS = ("nc1_n_pairs", "nc1_n_coincident_pairs", "nc1_n_zero_pairs",
              "gnc2_n_coincident_pairs", "n_classes")
N_PERM = 10_000
TOP_TOKENS = 10


@dataclasses.dataclass(frozen=True)
class Preset:
  depths: tuple
  widths: tuple
  epochs: tuple = (1, 3)
  weight_decays: tuple = (0.0, 0.1)
  seeds: int = 8  # seed-only group size
  seed_arch: tuple = (2, 64)  # (L, d) of the seed-only group
  seed_weight_decay: float = 0.1
  vocab: int = 1024  # tokenizer size
  seq_len: int = 64
  batch: int = 16
  epoch_tokens: int = 65_536  # 0 = the whole training split
  val_tokens: int = 16_384  # 0 = the whole validation split
  lr: float = 2e-3
  warmup: int = 20
  chunk: int = 32  # windows per forward chunk of the collapse pass
  source: str = "text"  # "text" (a directory) or "tfds"
  tfds_name: str = ""


PRESETS = {
    # quick: 3 weight decays and 3 seeds, so the seed group (M=3, L1-d16) reuses the
    # compiled step of the L1-d16 grid group.
    "quick": Preset(depths=(1, 2), widths=(16,), weight_decays=(0.0, 0.05, 0.1), seeds=3,
                    seed_arch=(1, 16), vocab=128,
                    seq_len=32, batch=8, epoch_tokens=4096, val_tokens=2048, lr=3e-3, warmup=5),
    "cpu": Preset(depths=(1, 2, 4), widths=(32, 64, 128, 256)),
    # The paper's grid (230 TinyStories models; GPT-Neo tokenizer size 50257).
    "tpu": Preset(depths=(1, 2, 4, 8, 12), widths=(64, 128, 256, 512, 768, 1024), seeds=10,
                  seed_arch=(4, 256), vocab=50257, seq_len=512, batch=64, epoch_tokens=0,
                  val_tokens=1 << 22, lr=1e-3, warmup=500, chunk=16, source="tfds",
                  tfds_name="lm1b"),
}
SETTINGS = {"min_count": 1, "cdnv_exponent": 2.0, "weighted_mean": False,
            "nc4_search": "analyzed", "norm_variant": "norm", "angle_variant": "cos",
            "gnc2_centered": True, "variance": "two_pass", "ddof": 1}


def get_preset(name: str) -> Preset:
  if name not in PRESETS:
    raise ValueError(f"unknown --preset={name!r}; use one of {sorted(PRESETS)}")
  return PRESETS[name]


def model_config(p: Preset, n_layers: int, d: int, vocab: int):
  """The GPT-Neo-like model of the grid (validated ``ModelConfig``)."""
  from sbjax import presets  # noqa: PLC0415

  cfg = presets.build(presets.neo(n_layers, d))
  return dataclasses.replace(cfg.model, vocab_size=vocab, max_len=max(p.seq_len, 8),
                             window_size=min(cfg.model.window_size, p.seq_len))


def train_config(p: Preset, steps: int):
  from sbjax.config import TrainConfig  # noqa: PLC0415

  return TrainConfig(steps=steps, batch_size=p.batch, seq_len=p.seq_len, lr=p.lr,
                     warmup_steps=min(p.warmup, max(steps - 1, 0)), min_lr_ratio=1.0,
                     weight_decay=0.0)


def groups(p: Preset):
  """[(name, kind, L, d, [Member], snapshot epochs)]: the grid, then the seed group."""
  from sbjax.studies.collapse_grid import Member  # noqa: PLC0415

  out = []
  for n_layers in p.depths:
    for d in p.widths:
      ms = [Member(seed=0, data_seed=0, weight_decay=float(wd)) for wd in p.weight_decays]
      out.append((f"L{n_layers}-d{d}", "grid", n_layers, d, ms, tuple(p.epochs)))
  n_layers, d = p.seed_arch
  ms = [Member(seed=s, data_seed=s, weight_decay=p.seed_weight_decay) for s in range(p.seeds)]
  out.append((f"seeds-L{n_layers}-d{d}", "seeds", n_layers, d, ms, (max(p.epochs),)))
  return out


def validate(p: Preset, vocab: int | None = None) -> list:
  """Build and validate every model and train config of the preset (no data, no training)."""
  cfgs = []
  for _, _, n_layers, d, _, _ in groups(p):
    mc = model_config(p, n_layers, d, vocab or p.vocab)
    cfgs.append((mc, train_config(p, 1)))
  return cfgs


def _data(p: Preset, out: Path, data: str | None):
  """(train_tokens, val_tokens, vocab_size, tokenizer_path) of the preset's corpus subset."""
  from sbjax.config import DataConfig  # noqa: PLC0415
  from sbjax.data import make_dataset  # noqa: PLC0415

  if p.source == "tfds":
    dc = DataConfig(source="tfds", tfds_name=data or p.tfds_name, vocab_size=p.vocab)
  else:
    path = Path(data or DEFAULT_DATA)
    path = path if path.is_absolute() or path.exists() else REPO / path
    if not path.is_dir():
      raise FileNotFoundError(f"corpus directory {data or DEFAULT_DATA} not found; pass "
                              "--data=DIR (a directory of .txt files)")
    dc = DataConfig(source="text", path=str(path), vocab_size=p.vocab)
  ds = make_dataset(dc, seq_len=p.seq_len, global_batch_size=p.batch, seed=0,
                    workdir=str(out / "data"), process_index=0, process_count=1)
  tr, va = ds.train_tokens, ds.val_tokens
  if p.epoch_tokens and len(tr) > p.epoch_tokens + 1:
    tr = tr[:p.epoch_tokens + 1]
  if p.val_tokens and len(va) > p.val_tokens + 1:
    va = va[:p.val_tokens + 1]
  return tr, va, ds.vocab_size, ds.tokenizer_path


def _windows(tokens: np.ndarray, seq_len: int) -> np.ndarray:
  n = (len(tokens) - 1) // seq_len
  return tokens[np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)].astype(np.int32)


def _scalar(v):
  if isinstance(v, (bool, np.bool_)):
    return bool(v)
  if isinstance(v, (int, np.integer)):
    return int(v)
  return float(v)


def run_group(p: Preset, g, tr, va, vocab: int, out: Path, verbose: bool = True) -> list[dict]:
  """Train one architecture group, measure every snapshot; rows (also in OUT/groups/)."""
  from sbjax.studies import collapse_grid as cg  # noqa: PLC0415
  from sbjax.data.pipeline import Dataset  # noqa: PLC0415
  from sbjax.model import Model  # noqa: PLC0415

  name, kind, n_layers, d, members, epochs = g
  path = out / "groups" / f"{name}.json"
  if path.exists():
    return json.loads(path.read_text())["rows"]
  mc = model_config(p, n_layers, d, vocab)
  dss = [Dataset(tr, va, seq_len=p.seq_len, global_batch_size=p.batch, seed=m.data_seed,
                 vocab_size=vocab, process_index=0, process_count=1) for m in members]
  spe = max(1, dss[0].n_train_windows // p.batch)  # steps per epoch
  tc = train_config(p, spe * max(epochs))
  t0 = time.perf_counter()
  snaps, info = cg.train_group(mc, tc, members, dss, [spe * e for e in epochs], name=name,
                               log_every=(spe if verbose else 0))
  t_train = time.perf_counter() - t0
  trw, vaw = _windows(tr, p.seq_len), _windows(va, p.seq_len)
  rows, n_params = [], Model(mc).param_count()
  (out / "perclass").mkdir(parents=True, exist_ok=True)
  for e in epochs:
    t1 = time.perf_counter()
    res = cg.collapse_pass(mc, snaps[spe * e], trw, vaw, chunk=p.chunk,
                           **{k: SETTINGS[k] for k in ("min_count", "cdnv_exponent",
                                                       "weighted_mean", "nc4_search")})
    t_pass = (time.perf_counter() - t1) / len(members)
    for m, r in zip(members, res):
      mid = f"{name}-wd{m.weight_decay:g}-s{m.seed}-e{e}"
      np.savez(out / "perclass" / f"{mid}.npz", class_ids=r["class_ids"],
               per_class_cdnv=r["per_class_cdnv"],
               per_class_interference=r["per_class_interference"], counts=r["class_counts"])
      row = {"model": mid, "group": name, "kind": kind, "n_layers": n_layers, "d_model": d,
             "n_heads": mc.n_heads, "vocab_size": vocab, "n_params": n_params,
             "weight_decay": m.weight_decay, "seed": m.seed, "data_seed": m.data_seed,
             "epochs": e, "steps": spe * e, "train_tokens_seen": spe * e * p.batch * p.seq_len,
             "val_loss": r["val_loss"], "val_tokens": r["val_tokens"],
             "train_tokens": r["train_tokens"]}
      row.update({k: _scalar(r.get(k, float("nan"))) for k in METRICS + COUNT_KEYS})
      row.update(SETTINGS)
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


def _write_csv(path: Path, rows: list[dict]) -> None:
  from sbjax.analysis.table import write_csv  # noqa: PLC0415

  write_csv(path, rows)


def _check_same_experiment(out: Path, key: dict) -> None:
  """Finished groups are reused only by the same preset, corpus and settings."""
  path = out / "groups" / "_experiment.json"
  key = json.loads(json.dumps(key))
  if path.exists():
    old = json.loads(path.read_text())
    if old != key:
      diff = sorted(k for k in set(old) | set(key) if old.get(k) != key.get(k))
      raise ValueError(f"{out} holds groups of another collapse experiment (differs in "
                       f"{diff}); nothing was changed; use a new --out")
    return
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(key, indent=1))


def run(out: Path, preset: str, data: str | None = None, verbose: bool = True) -> None:
  """Run the experiment into ``out`` (finished groups are skipped); see the module doc."""
  p = get_preset(preset)
  out = Path(out)
  out.mkdir(parents=True, exist_ok=True)
  t0, c0 = time.perf_counter(), time.process_time()
  tr, va, vocab, tok_path = _data(p, out, data)
  _check_same_experiment(out, {"preset": preset, "fields": dataclasses.asdict(p),
                               "vocab": int(vocab), "train_tokens": int(len(tr)),
                               "val_tokens": int(len(va)), "settings": SETTINGS})
  rows = []
  for g in groups(p):
    rows += run_group(p, g, tr, va, vocab, out, verbose)
    _write_csv(out / "collapse_models.csv", rows)
  tok = Path(tok_path).resolve() if tok_path else None
  meta = {"preset": preset, "preset_fields": dataclasses.asdict(p), "settings": SETTINGS,
          "vocab_size": vocab, "n_permutations": N_PERM,
          "tokenizer": (str(tok.relative_to(out.resolve())) if tok and
                        tok.is_relative_to(out.resolve()) else tok_path),
          "train_tokens": int(len(tr) - 1), "val_tokens": int(len(va) - 1),
          "epoch_definition": "one pass over the first train_tokens tokens of the training "
                              "split (windows of seq_len, reshuffled every epoch)",
          "seconds": round(time.perf_counter() - t0, 1),
          "cpu_seconds": round(time.process_time() - c0, 1)}  # this call (groups skipped = 0)
  (out / "collapse_meta.json").write_text(json.dumps(meta, indent=1))
  write_tables(out)
  figure(out)


# ------------------------------------------------------------------------------- report
def _rows(out: Path, kind: str) -> list[dict]:
  from sbjax.analysis.table import read_csv  # noqa: PLC0415

  return [r for r in read_csv(Path(out) / "collapse_models.csv") if r.get("kind") == kind]


def _col(rows, key) -> np.ndarray:
  return np.asarray([float(r.get(key, np.nan)) for r in rows], np.float64)


def r2_table(rows: list[dict], n_perm: int = 0) -> list[dict]:
  """Per metric: n, R², Pearson r (and the permutation p) of the metric vs val_loss."""
  from sbjax.studies import stats  # noqa: PLC0415

  y = _col(rows, "val_loss")
  out = []
  for i, k in enumerate(METRICS):
    s = stats.correlation_summary(_col(rows, k), y, n_perm=n_perm, seed=i)
    out.append({"metric": k, **s, "paper_r2": ANCHORS[k][0] if k in ANCHORS else ""})
  return out


def token_table(out: Path, top: int = TOP_TOKENS) -> list[dict]:
  """Table 5: per-class CDNV and interference of the most frequent tokens of the grid's
  best model (lowest val loss) vs the average analysed token."""
  ok = [r for r in _rows(out, "grid") if math.isfinite(r["val_loss"]) and
        math.isfinite(r.get("nc1_log10_cdnv", math.nan))]
  best = min(ok, key=lambda r: r["val_loss"])
  z = np.load(Path(out) / "perclass" / f"{best['model']}.npz")
  ids, cdnv, itf = z["class_ids"], z["per_class_cdnv"], z["per_class_interference"]
  cnt = z["counts"][ids]
  meta = json.loads((Path(out) / "collapse_meta.json").read_text())
  piece = lambda i: str(i)  # noqa: E731
  tok = meta.get("tokenizer")
  if tok:
    tp = Path(tok) if Path(tok).is_absolute() else Path(out) / tok
    if tp.exists():
      from sbjax.data.tokenizer import Tokenizer  # noqa: PLC0415

      t = Tokenizer(tp)
      piece = t.id_to_piece  # noqa: E731
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


def write_tables(out: Path) -> None:
  out = Path(out)
  _write_csv(out / "collapse_r2.csv", r2_table(_rows(out, "grid")))
  seeds = _rows(out, "seeds")
  if len(seeds) >= 3:
    _write_csv(out / "collapse_seeds.csv", r2_table(seeds, n_perm=N_PERM))
  _write_csv(out / "collapse_tokens.csv", token_table(out))


def figure(out: Path) -> Path:
  """Fig. 1 analogue: every metric vs validation loss, R² and r on each panel."""
  import matplotlib  # noqa: PLC0415
  import matplotlib.ticker  # noqa: PLC0415

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  from sbjax.studies import stats  # noqa: PLC0415

  grid, seeds = _rows(out, "grid"), _rows(out, "seeds")
  y = _col(grid, "val_loss")
  depths = sorted({int(r["n_layers"]) for r in grid})
  cmap = plt.get_cmap("viridis")
  ncol = 4
  nrow = -(-len(METRICS) // ncol)
  fig, axes = plt.subplots(nrow, ncol, figsize=(4 * ncol, 3.2 * nrow))
  for ax, k in zip(axes.ravel(), METRICS):
    x = _col(grid, k)
    for r, xi, yi in zip(grid, x, y):
      c = cmap(depths.index(int(r["n_layers"])) / max(len(depths) - 1, 1))
      ax.scatter(xi, yi, s=10 + 40 * math.log2(int(r["d_model"]) / 16 + 1) / 5, color=c,
                 marker="o" if int(r["epochs"]) == 1 else "^", alpha=0.8)
    if seeds:
      ax.scatter(_col(seeds, k), _col(seeds, "val_loss"), s=12, color="red", marker="x")
    s = stats.correlation_summary(x, y)
    ax.set_title(f"{k}\nR²={s['r2']:.2f}  r={s['pearson_r']:+.2f}", fontsize=9)
    ax.set_ylabel("val loss", fontsize=8)
    ax.tick_params(labelsize=7)
    if k == "nc1_cdnv" and np.all(x[np.isfinite(x)] > 0):
      ax.set_xscale("log")
      ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
  for ax in axes.ravel()[len(METRICS):]:
    ax.axis("off")
  fig.suptitle("collapse metrics vs validation loss (colour: depth; o: 1 epoch, ^: 3 epochs; "
               "size: width; x: seed group)", fontsize=10)
  fig.tight_layout()
  path = Path(out) / "fig_collapse_vs_loss.png"
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def _fmt(v, nd=3):
  if v is None or v == "" or (isinstance(v, float) and math.isnan(v)):
    return "–"
  if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
    return str(int(v))
  return f"{v:.{nd}g}" if isinstance(v, float) else str(v)


def _verdict(k: str, r2: float, r: float) -> str:
  anchor, sign = ANCHORS[k]
  if not np.isfinite(r2):
    return "undefined here"
  if sign == 0:
    return "agrees (no relation)" if r2 <= 0.3 else f"disagrees (R² {r2:.2f} is not negligible)"
  if np.sign(r) != sign:
    return "disagrees (opposite sign)"
  if r2 >= anchor - 0.25:
    return "agrees"
  return "same sign, weaker"


def section(out: Path, rel: str) -> str:
  from sbjax.analysis.table import read_csv  # noqa: PLC0415

  out = Path(out)
  meta = json.loads((out / "collapse_meta.json").read_text())
  r2 = {r["metric"]: r for r in read_csv(out / "collapse_r2.csv")}
  grid = _rows(out, "grid")
  lines = ["## Linguistic collapse (Wu & Papyan 2024)", "",
           f"{len(grid)} grid models (preset `{meta['preset']}`, vocabulary "
           f"{meta['vocab_size']}, {meta['train_tokens']} training tokens per epoch, "
           f"{meta['val_tokens']} validation tokens; settings: "
           + ", ".join(f"{k}={v}" for k, v in meta["settings"].items()) + ").", "",
           f"![collapse metrics vs validation loss]({rel}/fig_collapse_vs_loss.png)", "",
           "| metric | R² vs val loss | Pearson r | paper R² |", "|---|---|---|---|"]
  for k in METRICS:
    r = r2[k]
    lines.append(f"| {k} | {_fmt(r['r2'])} | {_fmt(r['pearson_r'])} | {_fmt(r['paper_r2'])} |")
  if (out / "collapse_seeds.csv").exists():
    sd = read_csv(out / "collapse_seeds.csv")
    n = int(sd[0]["n"]) if sd else 0
    lines += ["", f"Seed-only group ({n} data-order seeds of one architecture; two-sided "
              f"permutation p-values, {meta.get('n_permutations', N_PERM)} permutations; "
              "their Table 1):", "", "| metric | Pearson r | R² | p |", "|---|---|---|---|"]
    lines += [f"| {r['metric']} | {_fmt(r['pearson_r'])} | {_fmt(r['r2'])} | "
              f"{_fmt(r['p_perm'])} |" for r in sd]
  tk = read_csv(out / "collapse_tokens.csv")
  lines += ["", f"Token-level view of the best grid model `{tk[0]['model']}` (their Table 5): "
            "per-class CDNV = mean over c' of s(c, c'), interference = mean cos(μ̃_c, μ̃_c').",
            "", "| rank | token | count | log10 CDNV_c | interference |", "|---|---|---|---|---|"]
  for r in tk:
    tok = (str(r["token"]).replace("\n", "\\n").replace("\t", "\\t")
           .replace("|", "\\|"))
    lines.append(f"| {_fmt(r['rank'])} | `{tok}` | {_fmt(r['count'])} | {_fmt(r['log10_cdnv'])} | "
                 f"{_fmt(r['interference'])} |")
  avg, top = tk[-1], tk[:-1]
  top_l = float(np.mean([r["log10_cdnv"] for r in top]))
  top_i = float(np.mean([r["interference"] for r in top]))
  parts = []
  for k, (a, sgn) in ANCHORS.items():
    rr = r2[k]
    parts.append(f"{NAMES[k]}: R² {rr['r2']:.2f}, r {rr['pearson_r']:+.2f} (paper R² {a}"
                 f"{'' if sgn == 0 else ', r ' + ('+' if sgn > 0 else '-')}) -> "
                 f"{_verdict(k, float(rr['r2']), float(rr['pearson_r']))}")
  lines += ["", "Wu & Papyan found, over 230 TinyStories models, that validation loss falls as "
            "collapse grows: log CDNV (R² ≈ 0.92) and NC4 (≈ 0.89) track it closely, uniform "
            "duality UNC3 less (≈ 0.69) and the CoV of norms not at all (≈ 0.08). Here: "
            + "; ".join(parts) + ". The most frequent tokens have mean log10 CDNV_c "
            f"{top_l:.2f} vs {float(avg['log10_cdnv']):.2f} for the average token and "
            f"interference {top_i:.3f} vs {float(avg['interference']):.3f}. These models are "
            "orders of magnitude smaller and shorter-trained than the paper's, so agreement "
            "in sign matters more than in R²; where a verdict above says 'disagrees' or "
            "'weaker', sbjax does not reproduce the paper's finding at this scale."]
  return "\n".join(lines) + "\n"


def report_section(out: Path, rel: str) -> str:
  """The markdown section of the report (numbers read from the CSVs in ``out``)."""
  return section(Path(out), rel)


def define_flags():
  """The CLI flags; defined only when run as a script, so that importing this module
  (e.g. from experiments.reproduce) defines no absl flags."""
  global PRESET, OUT, DATA
  PRESET = flags.DEFINE_string("preset", "cpu", "quick | cpu | tpu")
  OUT = flags.DEFINE_string("out", "out/collapse", "output directory")
  DATA = flags.DEFINE_string("data", None, "a directory of .txt files (text presets; default "
                             f"{DEFAULT_DATA}) or a TFDS name (tpu preset)")


def main(argv):
  del argv
  run(Path(OUT.value), PRESET.value, DATA.value)
  print(report_section(Path(OUT.value), "."))


if __name__ == "__main__":
  define_flags()
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  common.run(main)
