r"""Layer convergence vs model size (Diehl Martinez, Lesci & Buttery 2024).

  python -m experiments.convergence --preset=cpu --out=out/convergence
  python -m experiments.convergence --series=pythia-70m,pythia-160m --series_tokens=batch.npy \
      --out=out/convergence_pythia

Trains one model per width with dense checkpoints (the log schedule 0, 1, 2, ..., 512
plus >= 20 evenly spaced ones), or takes imported Hugging Face series (directories of
``step<N>`` revisions, e.g. Pythia, with a fixed token batch as an ``.npy`` int array
[n, T+1]); then, on one fixed batch, measures every checkpoint's linear CKA to the final
checkpoint per layer (MLP output, OV circuit; last-token and all-token; biased and
debiased HSIC) and the PER of fc_out and of the per-head OV matrices (and of their
gradients). Definitions: sbjax/studies/convergence.py.

Writes to OUT: ``fig_cka_bands.png`` (percentile bands 10/25/50/75/90 over layers of
CKA-to-final vs step, per model, MLP and OV rows; the authors' main figure, for the
primary token mode / estimator), ``fig_cka_bands_<tokens>_<estimator>.png`` for every
combination (not for the quick preset), ``fig_step_vs_per.png``, ``layers.csv`` /
``layers.md`` (per layer: the first step at which CKA >= 0.9 of its final value, and PER),
``correlations.csv`` (Pearson / Spearman of that step with PER), ``bands.csv``,
``models.csv``, ``measure/<model>/`` (the long cka.csv, per.csv, steps.csv of every
checkpoint), ``runs/<model>/`` (the training workdirs), ``summary.json`` and (CLI only)
``section.md``, the report section. Rerunning skips finished training and
measurements.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import sys
import time
from pathlib import Path

import numpy as np
from absl import flags

from experiments import common

log = logging.getLogger("sbjax")
REPO = Path(__file__).resolve().parents[1]
SHAKESPEARE = REPO.parent / "shared" / "data" / "shakespeare"  # ../shared/data/shakespeare
PAPER_FRAC = 0.2  # "large models converge within the first ~20% of training"
FRAC = 0.9  # a layer has converged at the first step with CKA >= 0.9 of its final value

# width grids, model shape, training and measurement sizes of each preset
PRESETS = {
    # for tests and `reproduce --quick`: three tiny widths on the planted language
    "quick": dict(widths=(16, 32, 48), n_layers=2, n_heads=2, steps=32, ckpt_every=8,
                  batch=8, seq_len=16, lr=3e-3, warmup=4, data="planted", vocab=512,
                  n_sequences=16, all_sequences=4, grad_per=False, group_size=8, chunk=16),
    # <= 30 min on 2 cores: three widths, 4 layers, 1000 steps, 31 checkpoints each
    "cpu": dict(widths=(32, 64, 128), n_layers=4, n_heads=4, steps=1000, ckpt_every=50,
                batch=32, seq_len=64, lr=2e-3, warmup=50, data="text", vocab=1024,
                n_sequences=128, all_sequences=32, grad_per=True, group_size=4, chunk=32),
    # the paper's scale (Pythia-70m/160m/410m shapes); validated in tests, not run on CPU
    "tpu": dict(widths=(512, 768, 1024), n_layers=(6, 12, 24), n_heads=(8, 12, 16),
                steps=20000, ckpt_every=1000, batch=256, seq_len=2048, lr=(1e-3, 6e-4, 3e-4),
                warmup=200, data="tfds", tfds_name="lm1b", vocab=50304, n_sequences=128,
                all_sequences=8, grad_per=True, group_size=2, chunk=8),
}


def define_flags():
  """The CLI flags; defined only when run as a script, so that importing this module
  (e.g. from experiments.reproduce) defines no absl flags."""
  global OUT, PRESET, DATA, SERIES, SERIES_TOKENS, TOKEN_MODES, ESTIMATORS, PER_MLP_R, PER_OV_R, WIDTHS, GRAD_PER
  OUT = flags.DEFINE_string("out", "out/convergence", "output directory")
  PRESET = flags.DEFINE_enum("preset", "cpu", list(PRESETS), "size preset")
  DATA = flags.DEFINE_string("data", "", "a directory of .txt files for the text presets "
                             "('' = ../shared/data/shakespeare if present, else the planted "
                             "language)")
  SERIES = flags.DEFINE_list("series", [], "imported HF series directories (step<N>/ revisions) "
                             "to measure instead of training")
  SERIES_TOKENS = flags.DEFINE_string("series_tokens", "", "with --series: an .npy int array "
                                      "[n, T+1] of token windows (the fixed batch)")
  TOKEN_MODES = flags.DEFINE_list("token_modes", ["last", "all"], "CKA token modes computed; the "
                                  "first is the primary one (figure, table)")
  ESTIMATORS = flags.DEFINE_list("estimators", ["biased", "debiased"], "CKA estimators computed; "
                                 "the first is the primary one")
  PER_MLP_R = flags.DEFINE_integer("per_mlp_r", 0, "PER of fc_out over the top r singular "
                                   "values; 0 = all (min(F, D))")
  PER_OV_R = flags.DEFINE_integer("per_ov_r", 0, "PER of the OV matrices over the top r; "
                                  "0 = head_dim (gradients: 2 head_dim)")
  WIDTHS = flags.DEFINE_list("widths", [], "a subset of the preset's widths (default: all)")
  GRAD_PER = flags.DEFINE_enum("grad_per", "preset", ["preset", "on", "off"],
                               "PER of the gradients on the fixed batch")


# ------------------------------------------------------------------------------ configs
def _pick(v, i):
  return v[i] if isinstance(v, (tuple, list)) else v


def data_config(preset: str, data: str = ""):
  """The DataConfig of a preset (text falls back to the planted language without a corpus)."""
  from sbjax.config import DataConfig  # noqa: PLC0415

  p = PRESETS[preset]
  if p["data"] == "tfds":
    return DataConfig(source="tfds", tfds_name=p["tfds_name"], vocab_size=p["vocab"])
  path = data or (str(SHAKESPEARE) if p["data"] == "text" and SHAKESPEARE.is_dir() else "")
  if path:
    if not Path(path).is_dir():
      raise FileNotFoundError(f"--data={path} is not a directory of .txt files")
    return DataConfig(source="text", path=path, vocab_size=p["vocab"])
  if p["data"] == "text":
    log.warning("no text corpus (%s is missing; pass --data=DIR): using the planted language",
                SHAKESPEARE)
  quick = preset == "quick"
  return DataConfig(source="planted", planted_vocab=64 if quick else 256,
                    planted_rank=4 if quick else 8,
                    planted_train_tokens=50_000 if quick else 400_000,
                    planted_val_tokens=4096 if quick else 16_384)


def configs(preset: str, data: str = "", widths: tuple | None = None) -> list:
  """[(name, Config)] of the preset's models (validated; nothing is trained). ``widths``
  selects a subset of the preset's widths (their depth, heads and lr go with them)."""
  from sbjax.config import Config, ModelConfig, TrainConfig  # noqa: PLC0415

  if preset not in PRESETS:
    raise ValueError(f"unknown preset {preset!r}; known: {sorted(PRESETS)}")
  p = PRESETS[preset]
  dc = data_config(preset, data)
  if widths is not None and not set(widths) <= set(p["widths"]):
    raise ValueError(f"widths {sorted(set(widths) - set(p['widths']))} are not in the {preset} "
                     f"preset's widths {p['widths']}")
  out = []
  for i, w in enumerate(p["widths"]):
    if widths is not None and w not in widths:
      continue
    mc = ModelConfig(vocab_size=0, d_model=w, n_layers=_pick(p["n_layers"], i),
                     n_heads=_pick(p["n_heads"], i), max_len=p["seq_len"])
    tc = TrainConfig(steps=p["steps"], batch_size=p["batch"], seq_len=p["seq_len"],
                     lr=_pick(p["lr"], i), warmup_steps=p["warmup"],
                     eval_every=p["steps"], eval_batches=2, log_every=max(1, p["steps"] // 20),
                     ckpt_every=p["ckpt_every"], ckpt_log_spaced=True)
    out.append((f"d{w}", Config(model=mc, data=dc, train=tc, name=f"convergence-d{w}")))
  return out


def settings_for(preset: str, **over):
  from sbjax.studies.convergence import ConvergenceSettings  # noqa: PLC0415

  p = PRESETS[preset]
  kw = dict(n_sequences=p["n_sequences"], all_sequences=p["all_sequences"],
            grad_per=p["grad_per"], group_size=p["group_size"], chunk=p["chunk"])
  kw.update({k: v for k, v in over.items() if v is not None})
  return ConvergenceSettings(**kw)


# ------------------------------------------------------------------------------ run
def _write_csv(path: Path, rows: list[dict]):
  from sbjax.analysis.table import write_csv  # noqa: PLC0415

  write_csv(path, rows)


def _read_csv(path: Path) -> list[dict]:
  from sbjax.analysis.table import read_csv  # noqa: PLC0415

  return read_csv(path)


def _digest(obj) -> str:
  return hashlib.blake2b(json.dumps(obj, sort_keys=True, default=str).encode(),
                         digest_size=8).hexdigest()


def _measure_one(src, batch, settings, mdir: Path) -> dict:
  """Measure one source into mdir (skipped when meta.json matches)."""
  from sbjax.studies import convergence as conv  # noqa: PLC0415
  from sbjax.analysis.table import atomic_write_json  # noqa: PLC0415

  key = _digest({"settings": settings.to_dict(), "steps": src.steps, "model": str(src.model),
                 "batch": hashlib.blake2b(np.ascontiguousarray(batch).tobytes(),
                                          digest_size=8).hexdigest()})
  meta_path = mdir / "meta.json"
  if meta_path.exists() and json.loads(meta_path.read_text()).get("key") == key:
    return json.loads(meta_path.read_text())
  mdir.mkdir(parents=True, exist_ok=True)
  t0 = time.perf_counter()
  cka, per, steps = conv.measure(src, batch, settings, progress=lambda m: log.info("%s", m))
  _write_csv(mdir / "cka.csv", cka)
  _write_csv(mdir / "per.csv", per)
  _write_csv(mdir / "steps.csv", steps)
  mc = src.model
  meta = {"key": key, "model": src.name, "width": mc.d_model, "n_layers": mc.n_layers,
          "n_heads": mc.n_heads, "head_dim": mc.head_dim, "vocab_size": mc.vocab_size,
          "steps": src.steps, "final_step": src.steps[-1], "settings": settings.to_dict(),
          "per_r": conv.per_ranks(mc, settings), "batch_shape": list(batch.shape),
          "seconds": round(time.perf_counter() - t0, 2)}
  atomic_write_json(meta_path, meta)
  return meta


def _train_all(out: Path, preset: str, data: str, widths) -> tuple[list, np.ndarray, dict]:
  """Train (or skip) each width; returns (sources, fixed batch, data info)."""
  from sbjax import checkpoint as ckpt  # noqa: PLC0415
  from sbjax.studies import convergence as conv  # noqa: PLC0415
  from sbjax.analysis import samples  # noqa: PLC0415
  from sbjax.data import make_dataset  # noqa: PLC0415
  from sbjax.train import train  # noqa: PLC0415

  cfgs = configs(preset, data, widths)
  tc0, dc = cfgs[0][1].train, cfgs[0][1].data
  ds = make_dataset(dc, seq_len=tc0.seq_len, global_batch_size=tc0.batch_size,
                    seed=tc0.data_seed, workdir=str(out / "data"))
  sources, timings = [], {}
  for name, cfg in cfgs:
    wd = out / "runs" / name
    have = ckpt.list_steps(wd) if wd.exists() else []
    t0 = time.perf_counter()
    if not have or have[-1] < cfg.train.steps:
      train(cfg, wd, dataset=ds, quiet=True)
    timings[name] = round(time.perf_counter() - t0, 2)
    sources.append(conv.workdir_source(wd, name))
  batch = samples.eval_sample(ds, PRESETS[preset]["n_sequences"])
  info = {"source": dc.source, "corpus": Path(dc.path).name if dc.path else ds.name,
          "vocab_size": ds.vocab_size, "train_seconds": timings}
  return sources, batch, info


def run(out: Path, preset: str, *, data: str = "", series: list | None = None,
        series_tokens: str = "", widths: tuple | None = None, **settings_over) -> None:
  """Train (or read the series), measure and summarise into ``out``. ``widths``: a subset
  of the preset's widths; ``settings_over``: ConvergenceSettings fields."""
  from sbjax.studies import convergence as conv  # noqa: PLC0415

  out = Path(out)
  out.mkdir(parents=True, exist_ok=True)
  t0 = time.perf_counter()
  if preset not in PRESETS:
    raise ValueError(f"unknown preset {preset!r}; known: {sorted(PRESETS)}")
  settings = settings_for(preset, **settings_over)
  if series:
    if not series_tokens:
      raise ValueError("--series needs --series_tokens=FILE.npy: an int array [n, T+1] of "
                       "token windows in the series' vocabulary (the fixed batch)")
    if not Path(series_tokens).is_file():
      raise FileNotFoundError(f"--series_tokens={series_tokens} does not exist")
    batch = np.load(series_tokens, allow_pickle=False)
    sources = [conv.series_source(p) for p in series]
    info = {"source": "series", "series": [Path(p).name for p in series],
            "tokens_file": Path(series_tokens).name}
  else:
    sources, batch, info = _train_all(out, preset, data, widths)
  metas = [_measure_one(s, batch, settings, out / "measure" / s.name) for s in sources]
  summarise(out, metas, all_figures=preset != "quick")
  from sbjax.analysis.table import atomic_write_json  # noqa: PLC0415

  atomic_write_json(out / "summary.json", {
      "preset": preset, "data": info, "settings": settings.to_dict(), "frac": FRAC,
      "models": [m["model"] for m in metas], "seconds": round(time.perf_counter() - t0, 1)})


# ------------------------------------------------------------------------------ summaries
def _primary(settings: dict) -> tuple[str, str]:
  return settings["token_modes"][0], settings["estimators"][0]


def summarise(out: Path, metas: list[dict], all_figures: bool = True) -> None:
  """bands.csv, layers.csv/.md, correlations.csv, models.csv and the figures (the band
  figure of every token mode / estimator, or of the primary one only)."""
  from sbjax.studies import convergence as conv  # noqa: PLC0415

  bands, layers, models = [], [], []
  for m in metas:
    mdir = out / "measure" / m["model"]
    cka, per, steps = (_read_csv(mdir / f) for f in ("cka.csv", "per.csv", "steps.csv"))
    for r in cka:
      r["layer"] = int(r["layer"])
    for r in per:
      r["layer"] = int(r["layer"])
    final = m["final_step"]
    for kind in conv.KINDS:
      for tokens in m["settings"]["token_modes"]:
        for est in m["settings"]["estimators"]:
          s, c = conv.cka_matrix(cka, kind, tokens, est)
          for st, q in zip(s, conv.percentile_bands(c)):
            bands.append({"model": m["model"], "width": m["width"], "kind": kind,
                          "tokens": tokens, "estimator": est, "step": int(st),
                          "frac": st / final if final else 0.0,
                          **{f"p{p}": float(v) for p, v in zip(conv.PERCENTILES, q)}})
    rows = conv.layer_table(cka, per, FRAC)
    for r in rows:
      layers.append({"model": m["model"], "width": m["width"], **r})
    tok, est = _primary(m["settings"])
    prim = [r for r in rows if r["tokens"] == tok and r["estimator"] == est]
    fr = np.array([r["first_frac"] for r in prim], float)
    models.append({"model": m["model"], "width": m["width"], "n_layers": m["n_layers"],
                   "final_step": final, "n_checkpoints": len(m["steps"]),
                   "final_loss": float(steps[-1]["eval_loss"]),
                   "median_first_frac": float(np.nanmedian(fr)) if np.isfinite(fr).any()
                   else float("nan"),
                   "share_by_paper_frac": float(np.mean(np.nan_to_num(fr, nan=2.0) <= PAPER_FRAC)),
                   "median_first_frac_mlp": float(np.nanmedian(
                       [r["first_frac"] for r in prim if r["kind"] == "mlp"])),
                   "median_first_frac_ov": float(np.nanmedian(
                       [r["first_frac"] for r in prim if r["kind"] == "ov"]))})
  _write_csv(out / "bands.csv", bands)
  _write_csv(out / "layers.csv", layers)
  _write_csv(out / "models.csv", models)
  corr = []
  tok, est = _primary(metas[0]["settings"])
  combos = sorted({(r["tokens"], r["estimator"]) for r in layers})
  for t, e in combos:
    sel = [r for r in layers if r["tokens"] == t and r["estimator"] == e]
    for scope in ["all"] + [m["model"] for m in metas]:
      for kind in ("all",) + conv.KINDS:
        rows = [r for r in sel if (scope == "all" or r["model"] == scope)
                and (kind == "all" or r["kind"] == kind)]
        for c in conv.correlations(rows, "first_frac" if scope == "all" else "first_step"):
          corr.append({"model": scope, "kind": kind, "tokens": t, "estimator": e, **c})
  _write_csv(out / "correlations.csv", corr)
  (out / "layers.md").write_text(layers_markdown(layers, tok, est) + "\n")
  draw_figures(out, bands, layers, metas, all_figures)


def _fmt(v, nd=3) -> str:
  """A table cell: '–' for missing/NaN, floats with nd decimals (nd=0: an integer)."""
  if v is None or (isinstance(v, float) and not math.isfinite(v)):
    return "–"
  if isinstance(v, float):
    return str(int(round(v))) if nd == 0 else f"{v:.{nd}f}"
  return str(v)


def layers_markdown(layers: list[dict], tokens: str, estimator: str) -> str:
  """The per-layer table (primary token mode / estimator) as markdown, from layers.csv rows."""
  sel = [r for r in layers if r["tokens"] == tokens and r["estimator"] == estimator]
  has_g = any("per_gradients_final" in r for r in sel)
  head = ("| model | kind | layer | first step CKA ≥ 0.9·final | as % of training | stays from "
          "| PER (final) | PER r |" + (" grad PER (final) |" if has_g else ""))
  lines = [head, "|" + "---|" * (8 + has_g)]
  for r in sel:
    pct = r["first_frac"] * 100 if isinstance(r["first_frac"], float) and math.isfinite(
        r["first_frac"]) else None
    line = (f"| {r['model']} | {r['kind']} | {int(r['layer'])} | {_fmt(r['first_step'], 0)} | "
            f"{_fmt(pct, 1)} | {_fmt(r['stable_step'], 0)} | {_fmt(r.get('per_weights_final'))} | "
            f"{_fmt(r.get('per_weights_r'), 0)} |")
    if has_g:
      line += f" {_fmt(r.get('per_gradients_final'))} |"
    lines.append(line)
  return "\n".join(lines)


def draw_figures(out: Path, bands, layers, metas, all_figures: bool = True) -> None:
  import matplotlib  # noqa: PLC0415

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  models = [m["model"] for m in metas]
  tok0, est0 = _primary(metas[0]["settings"])
  combos = [(t, e) for t in metas[0]["settings"]["token_modes"]
            for e in metas[0]["settings"]["estimators"]]
  for tokens, est in combos if all_figures else combos[:1]:
    fig, axes = plt.subplots(2, len(models), figsize=(3.4 * len(models) + 0.6, 5.6),
                             squeeze=False, sharey=True)
    for j, name in enumerate(models):
      for i, kind in enumerate(("mlp", "ov")):
        ax = axes[i][j]
        rows = [r for r in bands if r["model"] == name and r["kind"] == kind
                and r["tokens"] == tokens and r["estimator"] == est]
        x = np.array([r["step"] for r in rows], float)
        g = {p: np.array([r[f"p{p}"] for r in rows]) for p in (10, 25, 50, 75, 90)}
        ax.fill_between(x, g[10], g[90], color="C0", alpha=0.2, lw=0, label="10–90%")
        ax.fill_between(x, g[25], g[75], color="C0", alpha=0.4, lw=0, label="25–75%")
        ax.plot(x, g[50], color="C0", lw=1.5, label="median")
        final = max(x) if x.size else 1.0
        ax.axvline(PAPER_FRAC * final, color="k", ls=":", lw=1, label="20% of training")
        ax.axhline(FRAC, color="gray", ls="--", lw=0.8)
        ax.set_xscale("symlog", linthresh=1.0, linscale=0.4)
        ax.set_xlim(0, final * 1.15)
        ax.set_ylim(min(-0.05, float(np.nanmin(g[10])) - 0.05) if x.size else -0.05, 1.05)
        ax.set_title(f"{name} – {'MLP' if kind == 'mlp' else 'OV circuit'}", fontsize=9)
        if i == 1:
          ax.set_xlabel("step (symlog)")
        if j == 0:
          ax.set_ylabel("CKA to final")
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"CKA to the final checkpoint,\npercentiles over layers ({tokens} token"
                 f"{'s' if tokens == 'all' else ''}, {est})", fontsize=9)
    fig.tight_layout()
    names = [f"fig_cka_bands_{tokens}_{est}.png"] if all_figures else []
    if (tokens, est) == (tok0, est0):
      names.append("fig_cka_bands.png")
    for n in names:
      fig.savefig(out / n, dpi=100)
    plt.close(fig)
  sel = [r for r in layers if r["tokens"] == tok0 and r["estimator"] == est0]
  fig, ax = plt.subplots(figsize=(5.2, 3.8))
  for j, name in enumerate(models):
    for kind, mk in (("mlp", "o"), ("ov", "^")):
      rr = [r for r in sel if r["model"] == name and r["kind"] == kind]
      ax.scatter([r.get("per_weights_final", np.nan) for r in rr],
                 [r["first_frac"] for r in rr], marker=mk, color=f"C{j}",
                 label=f"{name} {kind}")
  ax.set_xlabel("PER at the final checkpoint")
  ax.set_ylabel("first step CKA ≥ 0.9 (fraction of training)")
  ax.legend(fontsize=7, ncol=2)
  fig.tight_layout()
  fig.savefig(out / "fig_step_vs_per.png", dpi=100)
  plt.close(fig)


# ------------------------------------------------------------------------------ report
def report_section(out: Path, rel: str) -> str:
  """The markdown section of the report; every number is read from out's CSVs."""
  out = Path(out)
  summary = json.loads((out / "summary.json").read_text())
  models = _read_csv(out / "models.csv")
  layers = _read_csv(out / "layers.csv")
  corr = _read_csv(out / "correlations.csv")
  tok, est = summary["settings"]["token_modes"][0], summary["settings"]["estimators"][0]
  lines = ["## convergence", "",
           "Layer convergence (Diehl Martinez, Lesci & Buttery 2024): linear CKA of each "
           "layer's activations to the final checkpoint on one fixed batch of "
           f"{summary['settings']['n_sequences']} sequences ({tok} token, {est} HSIC), "
           f"data: {summary['data'].get('source')} ({summary['data'].get('corpus', '')}); a "
           "layer has converged at the first "
           f"checkpoint with CKA ≥ {FRAC}·final.", "",
           f"![CKA-to-final percentile bands]({rel}/fig_cka_bands.png)", "",
           f"![first step vs PER]({rel}/fig_step_vs_per.png)", "",
           "| model | width | layers | checkpoints | final step | loss (fixed batch) | median "
           "first step / final (MLP, OV) | layers converged by 20% |",
           "|---|---|---|---|---|---|---|---|"]
  for m in models:
    lines.append(f"| {m['model']} | {int(m['width'])} | {int(m['n_layers'])} | "
                 f"{int(m['n_checkpoints'])} | {int(m['final_step'])} | {m['final_loss']:.3f} | "
                 f"{_fmt(m['median_first_frac_mlp'], 2)}, {_fmt(m['median_first_frac_ov'], 2)} | "
                 f"{100 * m['share_by_paper_frac']:.0f}% |")
  lines += ["", "Per layer:", "", layers_markdown(layers, tok, est), ""]
  pc = [c for c in corr if c["tokens"] == tok and c["estimator"] == est and c["kind"] == "all"]
  lines += ["| models | PER | n | Pearson | Spearman |", "|---|---|---|---|---|"]
  for c in pc:
    lines.append(f"| {c['model']} | {c['y']} | {int(c['n'])} | {_fmt(c['pearson'], 2)} | "
                 f"{_fmt(c['spearman'], 2)} |")
  lines += ["", _paragraph(models, pc)]
  return "\n".join(lines) + "\n"


def _paragraph(models, pc) -> str:
  """What the paper found, what sbjax found (computed), and whether they agree."""
  from sbjax.studies import convergence as conv  # noqa: PLC0415

  ms = sorted(models, key=lambda m: m["width"])
  big = ms[-1]
  parts = ["The paper finds that the layers of larger Pythia models reach high CKA to their "
           "final checkpoint within the first ~20% of training, while small models converge "
           "later and less stably, especially layers of low PER."]
  fr = ", ".join(f"{m['model']} {_fmt(m['median_first_frac'], 2)}" for m in ms)
  parts.append(f"Here the median layer first reaches CKA ≥ {FRAC} of its final value at these "
               f"fractions of training: {fr}.")
  agree_big = big["median_first_frac"] <= PAPER_FRAC
  parts.append(f"The largest model here ({big['model']}) has "
               f"{100 * big['share_by_paper_frac']:.0f}% of its layers converged by 20% of "
               "training, so " + ("this agrees with the ~20% finding." if agree_big else
                                  "it does NOT converge within ~20% as the paper's large "
                                  "models do (its scale is far smaller)."))
  if len(ms) >= 3:
    rho = conv.spearman([m["width"] for m in ms], [m["median_first_frac"] for m in ms])
    trend = ("larger models converge earlier (agrees with the paper)" if rho < 0 else
             "larger models do not converge earlier (disagrees with the paper)" if rho > 0 else
             "no monotone trend with width (disagrees with the paper)")
    parts.append(f"Across widths, Spearman(width, median fraction) = {_fmt(rho, 2)}: {trend}.")
  allc = [c for c in pc if c["model"] == "all" and c["y"] == "per_weights_final"]
  if allc and math.isfinite(allc[0]["spearman"]):
    s = allc[0]["spearman"]
    parts.append(f"Over all {int(allc[0]['n'])} layers, Spearman(first-step fraction, final "
                 f"PER) = {s:.2f}: " + ("low-PER layers converge later, as the paper reports."
                                        if s < 0 else "low-PER layers do not converge later "
                                        "here, unlike the paper."))
  return " ".join(parts)


# ------------------------------------------------------------------------------ CLI
def main(argv):
  del argv
  grad = {"preset": None, "on": True, "off": False}[GRAD_PER.value]
  run(Path(OUT.value), PRESET.value, data=DATA.value, series=SERIES.value,
      series_tokens=SERIES_TOKENS.value,
      widths=tuple(int(w) for w in WIDTHS.value) if WIDTHS.value else None,
      token_modes=tuple(TOKEN_MODES.value), estimators=tuple(ESTIMATORS.value),
      per_mlp_r=PER_MLP_R.value, per_ov_r=PER_OV_R.value, grad_per=grad)
  out = Path(OUT.value)
  (out / "section.md").write_text(report_section(out, "."))
  print(json.dumps({"out": str(out), "section": str(out / "section.md"),
                    **json.loads((out / "summary.json").read_text())}))


if __name__ == "__main__":
  define_flags()
  logging.basicConfig(level=logging.INFO, stream=sys.stderr)
  common.run(main)
