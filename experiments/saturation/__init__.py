r"""Saturation of small language models (Godey et al. 2024, E1/E3/E4): a width sweep.

  python -m experiments.saturation --preset=cpu --out=out/saturation
  python -m experiments.saturation --preset=quick --out=/tmp/sat --data=DIR_OF_TXT

Models of widths d (cpu: 16, 32, 64, 128, 256) at a fixed depth and vocabulary are trained
on one text corpus (default ``../shared/data/shakespeare``, one sentencepiece tokenizer for
all widths) for the same number of steps, with log-spaced checkpoints (0, 1, 2, 4, ..., 512)
and then one every ``ckpt_every`` steps up to the end. Every run is analysed with
``sbjax.analysis.analyze_run`` (groups loss, anisotropy, spectrum; one fixed validation
sample). Then:

* Figures for all widths together: eval loss vs step coloured by last-layer anisotropy
  (Godey Fig. 3), the sigma_i/sigma_1 heat-map of the head (Fig. 4), KL(sigma || u) of the
  head vs step (Fig. 5), and ``fig_scaling.png`` (loss vs N with the fit; train loss vs step).
* The scaling law L = A / N^alpha + E (``sbjax.studies.scaling``) with N = non-embedding
  parameters (``sbjax.model.non_embedding_params``), fitted on the widths >= fit_min_width,
  once on their final and once on their best (lowest over checkpoints) eval loss; for every
  width the % gap 100 (L - L_fit(N)) / L_fit(N) of its final loss (vs the final fit) and of
  its best loss (vs the best fit).
* Late-rise (saturation) detection: rise = eval_loss(final) - min over checkpoints; a run
  has a late rise when rise > ``rise_tol`` nats. The training loss (metrics.jsonl,
  moving average over ``smooth`` records) gets the same test, so a rise that comes from
  over-fitting (train loss still falling) can be told from saturation (both rise).

Outputs in OUT: ``runs/d<w>/`` (workdirs with ``analysis/``), ``data/`` (tokenizer and
token cache), ``saturation_runs.csv`` (one row per width), ``saturation_fit.csv`` (the two
fits), ``saturation_meta.json``, ``fig_loss_anisotropy.png``, ``fig_spectrum_heatmap.png``,
``fig_kl_uniform.png``, ``fig_scaling.png``. Finished runs are skipped and analyses are
cached, so a rerun resumes. ``report_section(out, rel)`` gives the markdown section.
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
FIGS = {"loss_anisotropy": "fig_loss_anisotropy.png", "spectrum_heatmap": "fig_spectrum_heatmap.png",
        "kl_uniform": "fig_kl_uniform.png", "scaling": "fig_scaling.png"}


@dataclasses.dataclass(frozen=True)
class Preset:
  widths: tuple
  fit_min_width: int  # the scaling law is fitted on widths >= this
  n_layers: int = 2
  head_dim: int = 32  # heads = max(1, d // head_dim)
  vocab: int = 1024  # tokenizer size
  seq_len: int = 64
  batch: int = 16
  steps: int = 1200
  warmup: int = 50
  lr: float = 3e-3
  ckpt_every: int = 100  # after the log-spaced 0, 1, 2, 4, ..., 512
  eval_batches: int = 4  # training-time evals (metrics.jsonl)
  eval_sequences: int = 64  # analysis: validation windows of the fixed sample
  anisotropy_tokens: int = 1024
  rise_tol: float = 0.01  # nats
  smooth: int = 10  # train-loss moving average, in log records
  source: str = "text"  # text (a directory) | tfds
  tfds_name: str = ""
  max_docs: int = 0


PRESETS = {
    # tests and reproduce --quick (a smoke test, ~12 s of compilation per width): three
    # widths, all of them in the fit (the fit has three parameters), so no gap is measured
    "quick": Preset(widths=(8, 16, 32), fit_min_width=8, n_layers=1, head_dim=32, vocab=96,
                    seq_len=32, batch=8, steps=32, warmup=4, ckpt_every=16, eval_batches=2,
                    eval_sequences=16, anisotropy_tokens=128, smooth=2),
    # 9 min on 2 CPU cores, measured once (BUILD_NOTES.md); ~1.2M tokens per run, 0.6 epoch
    "cpu": Preset(widths=(16, 32, 64, 128, 256), fit_min_width=64),
    # Pythia-like: depth 6, V = 50304, 2048-token windows, 0.5M tokens per step (~15B tokens)
    "tpu": Preset(widths=(128, 256, 512, 768, 1024), fit_min_width=256, n_layers=6, head_dim=64,
                  vocab=50304, seq_len=2048, batch=256, steps=30_000, warmup=300, lr=1e-3,
                  ckpt_every=1000, eval_batches=8, eval_sequences=256, anisotropy_tokens=8192,
                  rise_tol=0.005, smooth=20, source="tfds", tfds_name="lm1b"),
}


def get_preset(name: str) -> Preset:
  if name not in PRESETS:
    raise ValueError(f"unknown saturation preset {name!r}; known: {', '.join(PRESETS)}")
  return PRESETS[name]


def _data_config(p: Preset, out: Path, data: str | None):
  from sbjax.config import DataConfig  # noqa: PLC0415

  if p.source == "tfds":
    return DataConfig(source="tfds", tfds_name=data or p.tfds_name, vocab_size=p.vocab,
                      max_docs=p.max_docs, tfds_data_dir="")
  path = Path(data or DEFAULT_DATA)
  path = path if path.is_absolute() or path.exists() else REPO / path
  if not path.is_dir():
    raise FileNotFoundError(f"corpus directory {data or DEFAULT_DATA} not found; pass "
                            "--data=DIR (a directory of .txt files)")
  return DataConfig(source="text", path=str(path), vocab_size=p.vocab,
                    tfds_data_dir=str(out / "data" / "tfds"))


def run_configs(p: Preset, data_cfg) -> list:
  """(width, Config) of every run; validated (a bad preset fails before training)."""
  from sbjax import presets  # noqa: PLC0415
  from sbjax.config import Config, ModelConfig, TrainConfig  # noqa: PLC0415

  base = presets.build(presets.load("planted"))
  out = []
  for w in p.widths:
    mc = dataclasses.replace(ModelConfig(), vocab_size=0, d_model=int(w), n_layers=p.n_layers,
                             n_heads=max(1, int(w) // p.head_dim), max_len=p.seq_len)
    tc = dataclasses.replace(TrainConfig(), steps=p.steps, batch_size=p.batch, seq_len=p.seq_len,
                             lr=p.lr, warmup_steps=p.warmup, eval_every=p.ckpt_every,
                             eval_batches=p.eval_batches, log_every=max(1, p.steps // 200),
                             ckpt_every=p.ckpt_every, ckpt_log_spaced=True)
    out.append((int(w), Config(model=mc, data=data_cfg, train=tc, mesh=base.mesh,
                               name=f"saturation-d{w}")))
  return out


def analysis_settings(p: Preset, width: int):
  from sbjax.analysis import Settings  # noqa: PLC0415

  dims = tuple(d for d in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if d <= width)
  return Settings(groups=("loss", "anisotropy", "spectrum"), eval_sequences=p.eval_sequences,
                  cka_sequences=p.eval_sequences, anisotropy_tokens=p.anisotropy_tokens,
                  w_error_dims=dims, batch_sequences=min(32, p.eval_sequences), progress=False,
                  figures=False)  # the experiment draws every width together


def detect_rise(steps, loss, tol: float) -> dict:
  """Late-rise test of one loss curve over checkpoints: best = argmin, rise = final - best,
  late_rise = rise > tol (the final checkpoint is the one with the largest step)."""
  steps, loss = np.asarray(steps), np.asarray(loss, np.float64)
  ok = np.isfinite(loss)
  if not ok.any():
    raise ValueError("no finite loss to test for a late rise (the run diverged)")
  steps, loss = steps[ok], loss[ok]
  ib, i_f = int(np.argmin(loss)), int(np.argmax(steps))
  rise = float(loss[i_f] - loss[ib])
  return {"best_step": int(steps[ib]), "best": float(loss[ib]), "final_step": int(steps[i_f]),
          "final": float(loss[i_f]), "rise": rise, "late_rise": bool(rise > tol),
          "i_best": ib, "i_final": i_f}


def _smooth(x: np.ndarray, k: int) -> np.ndarray:
  if x.size == 0 or k <= 1:
    return x
  k = min(k, x.size)
  return np.convolve(x, np.ones(k) / k, mode="valid")


def run(out: Path, preset, data: str | None = None, verbose: bool = True) -> None:
  """Train (or skip / resume) every width, analyse every run, fit and draw; see the doc.

  ``preset``: a name of PRESETS or a Preset."""
  from sbjax.analysis import analyze_run  # noqa: PLC0415
  from sbjax.data import make_dataset  # noqa: PLC0415
  from sbjax.sweep import run_state  # noqa: PLC0415
  from sbjax.train import train  # noqa: PLC0415

  p = preset if isinstance(preset, Preset) else get_preset(preset)
  out = Path(out)
  out.mkdir(parents=True, exist_ok=True)
  t0 = time.perf_counter()
  dc = _data_config(p, out, data)
  ds = make_dataset(dc, seq_len=p.seq_len, global_batch_size=p.batch, seed=0,
                    workdir=str(out / "data"), process_index=0, process_count=1)
  if ds.tokenizer_path:  # the runs' configs name the shared tokenizer (for re-analysis)
    dc = dataclasses.replace(dc, tokenizer=str(ds.tokenizer_path))
  timings = {}
  for w, cfg in run_configs(p, dc):
    wd = out / "runs" / f"d{w}"
    t1 = time.perf_counter()
    if run_state(wd, cfg.train.steps) != "done":
      if verbose:
        print(f"[saturation] training d={w} ({cfg.train.steps} steps)", file=sys.stderr)
      s = train(cfg, wd, dataset=ds, quiet=True)
      (wd / "DONE").write_text(json.dumps({"summary": s}, default=str))
    t2 = time.perf_counter()
    analyze_run(wd, analysis_settings(p, w), dataset=ds)
    timings[w] = {"train_s": round(t2 - t1, 1), "analyze_s": round(time.perf_counter() - t2, 1)}
  summarize(out, p)
  meta = {"preset": preset if isinstance(preset, str) else "custom", "preset_fields": dataclasses.asdict(p),
          "data": {"source": dc.source, "path": dc.path or dc.tfds_name,
                   "vocab_size": ds.vocab_size, "train_tokens": int(len(ds.train_tokens)),
                   "val_tokens": int(len(ds.val_tokens)),
                   "epochs": p.steps * p.batch * p.seq_len / max(1, len(ds.train_tokens))},
          "timings": timings, "seconds": round(time.perf_counter() - t0, 1)}
  (out / "saturation_meta.json").write_text(json.dumps(meta, indent=1))


# ------------------------------------------------------------------------------- summary
def run_summary(wd: Path, p: Preset) -> dict:
  """One width's row: losses over checkpoints, late-rise tests, spectrum at best/final."""
  from sbjax import checkpoint as ckpt  # noqa: PLC0415
  from sbjax.analysis import read_csv  # noqa: PLC0415
  from sbjax.model import Model, non_embedding_params  # noqa: PLC0415
  from sbjax.train import read_metrics  # noqa: PLC0415

  cfg = ckpt.load_config(wd)
  rows = [r for r in read_csv(wd / "analysis" / "metrics.csv") if math.isfinite(r["eval_loss"])]
  if not rows:
    raise ValueError(f"{wd}: no finite eval_loss in the analysis; the run diverged")
  ev = detect_rise([r["step"] for r in rows], [r["eval_loss"] for r in rows], p.rise_tol)
  ib, i_f = ev["i_best"], ev["i_final"]
  tr = np.array([r["loss"] for r in read_metrics(wd) if "loss" in r], np.float64)
  trs = _smooth(tr, p.smooth)
  train_rise = float(trs[-1] - trs.min()) if trs.size else math.nan
  model = Model(cfg.model)
  return {
      "width": cfg.model.d_model, "n_layers": cfg.model.n_layers,
      "n_nonembedding": non_embedding_params(cfg.model),
      "n_params": model.param_count(model.abstract_params()),
      "vocab_size": cfg.model.vocab_size, "steps": ev["final_step"],
      "final_eval_loss": ev["final"], "best_eval_loss": ev["best"],
      "best_step": ev["best_step"], "rise": ev["rise"], "late_rise": int(ev["late_rise"]),
      "train_rise": train_rise, "train_late_rise": int(train_rise > p.rise_tol),
      "kl_best": float(rows[ib].get("head_kl_uniform", math.nan)),
      "kl_final": float(rows[i_f].get("head_kl_uniform", math.nan)),
      "anisotropy_best": float(rows[ib].get("anisotropy_last", math.nan)),
      "anisotropy_final": float(rows[i_f].get("anisotropy_last", math.nan)),
  }


def _write_csv(path: Path, rows: list[dict]) -> None:
  from sbjax.analysis.table import write_csv  # noqa: PLC0415

  write_csv(path, rows)


def summarize(out: Path, p: Preset) -> None:
  """saturation_runs.csv, saturation_fit.csv and the figures from the analysed runs."""
  from sbjax.studies import scaling  # noqa: PLC0415

  out = Path(out)
  wds = sorted((d for d in (out / "runs").iterdir() if (d / "analysis" / "metrics.csv").exists()),
               key=lambda d: int(d.name[1:]))
  if not wds:
    raise FileNotFoundError(f"no analysed runs in {out / 'runs'}; run the experiment first")
  rows = [run_summary(wd, p) for wd in wds]
  n = np.array([r["n_nonembedding"] for r in rows], np.float64)
  infit = np.array([r["width"] >= p.fit_min_width for r in rows])
  fits = {}
  for key in ("final", "best"):
    y = np.array([r[f"{key}_eval_loss"] for r in rows])
    try:
      fits[key] = scaling.fit_power_law(n[infit], y[infit])
    except ValueError as e:
      logging.warning("saturation: no %s-loss fit: %s", key, e)
      fits[key] = scaling.nan_fit(int(infit.sum()))
  for r, f in zip(rows, infit):
    r["in_fit"] = int(f)
    for key in ("final", "best"):
      r[f"pred_{key}"] = float(fits[key].predict(r["n_nonembedding"]))
      r[f"gap_{key}_pct"] = float(fits[key].gap_pct(r[f"{key}_eval_loss"], r["n_nonembedding"]))
  _write_csv(out / "saturation_runs.csv", rows)
  fit_rows = [{"step": i, "fit_on": key, **fits[key].to_dict(),
               "widths": "+".join(str(r["width"]) for r in rows if r["in_fit"])}
              for i, key in enumerate(("final", "best"))]
  _write_csv(out / "saturation_fit.csv", fit_rows)
  draw(out, wds, rows, fits)


def draw(out: Path, wds: list, rows: list[dict], fits: dict) -> None:
  from sbjax.analysis import figures  # noqa: PLC0415 - matplotlib only here
  from sbjax.train import read_metrics  # noqa: PLC0415

  plt = figures.plt
  labels = [f"d={r['width']}" for r in rows]
  adirs = [wd / "analysis" for wd in wds]
  figures.plot_loss_anisotropy(adirs, out / FIGS["loss_anisotropy"], labels=labels,
                               title="Eval loss vs step, coloured by last-layer anisotropy")
  figures.plot_spectrum_heatmap(adirs, out / FIGS["spectrum_heatmap"], labels=labels)
  figures.plot_kl_uniform(adirs, out / FIGS["kl_uniform"], labels=labels)
  fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
  n = np.array([r["n_nonembedding"] for r in rows], float)
  for key, mk in (("final", "o"), ("best", "s")):
    y = np.array([r[f"{key}_eval_loss"] for r in rows])
    ax.scatter(n, y, marker=mk, label=f"{key} eval loss", zorder=3,
               facecolors=["C0" if r["in_fit"] else "none" for r in rows] if key == "final"
               else ["C1" if r["in_fit"] else "none" for r in rows],
               edgecolors="C0" if key == "final" else "C1")
    f = fits[key]
    if math.isfinite(f.alpha):
      nn = np.geomspace(n.min() / 1.5, n.max() * 1.5, 100)
      ax.plot(nn, f.predict(nn), "-" if key == "final" else "--",
              color="C0" if key == "final" else "C1",
              label=f"fit on {key}: {f.A:.3g}/N^{f.alpha:.3f} + {f.E:.3f}")
  for r in rows:
    ax.annotate(f"d={r['width']}", (r["n_nonembedding"], r["final_eval_loss"]), fontsize=7,
                xytext=(3, 3), textcoords="offset points")
  ax.set_xscale("log")
  ax.set_xlabel("non-embedding parameters N (filled: in the fit)")
  ax.set_ylabel("eval loss (nats)")
  ax.set_title("Scaling law L = A/N^alpha + E")
  ax.legend(fontsize=7)
  for wd, lab in zip(wds, labels):
    recs = [x for x in read_metrics(wd) if "loss" in x]
    s = np.array([x["step"] for x in recs], float)
    l = np.array([x["loss"] for x in recs], float)
    k = max(1, min(len(l), len(l) // 20))
    ls = _smooth(l, k)
    ax2.plot(s[k - 1:], ls, label=lab)
  ax2.set_xscale("symlog", linthresh=1.0)
  ax2.set_xlabel("training step (symlog)")
  ax2.set_ylabel("train loss, moving average (nats)")
  ax2.set_title("Training loss")
  ax2.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(out / FIGS["scaling"], dpi=110)
  plt.close(fig)


# ------------------------------------------------------------------------------- report
def _fmt(x, spec=".4f") -> str:
  return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def report_section(out: Path, rel: str) -> str:
  """The markdown section: figures, the per-width table and the fit, read from the CSVs."""
  from sbjax.analysis.table import read_csv  # noqa: PLC0415

  out = Path(out)
  rows = read_csv(out / "saturation_runs.csv")
  fits = {r["fit_on"]: r for r in read_csv(out / "saturation_fit.csv")}
  meta = json.loads((out / "saturation_meta.json").read_text()) if (
      out / "saturation_meta.json").exists() else {}
  tol = meta.get("preset_fields", {}).get("rise_tol", 0.01)
  lines = ["## saturation (Godey et al. 2024, E1/E3/E4)", ""]
  if meta:
    d = meta["data"]
    lines += [f"Preset `{meta['preset']}`: widths "
              f"{', '.join(str(int(r['width'])) for r in rows)}, "
              f"{int(rows[0]['n_layers'])} layers, V={int(rows[0]['vocab_size'])}, "
              f"{int(rows[0]['steps'])} steps ({d['epochs']:.2f} epochs of {d['train_tokens']} "
              f"training tokens); {meta['seconds'] / 60:.1f} min.", ""]
  for name, title in (("loss_anisotropy", "eval loss coloured by anisotropy (Fig. 3)"),
                      ("spectrum_heatmap", "head sigma_i/sigma_1 (Fig. 4)"),
                      ("kl_uniform", "KL(sigma||u) of the head (Fig. 5)"),
                      ("scaling", "scaling fit and training loss")):
    lines += [f"![{title}]({rel}/{FIGS[name]})", ""]
  lines += ["| d | N (non-emb.) | final loss | best loss (step) | rise | late rise | "
            "train rise | gap final % | gap best % | KL best → final | in fit |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(
        f"| {int(r['width'])} | {int(r['n_nonembedding'])} | {_fmt(r['final_eval_loss'])} | "
        f"{_fmt(r['best_eval_loss'])} ({int(r['best_step'])}) | {_fmt(r['rise'])} | "
        f"{'yes' if r['late_rise'] else 'no'} | {_fmt(r['train_rise'])} | "
        f"{_fmt(r['gap_final_pct'], '+.2f')} | {_fmt(r['gap_best_pct'], '+.2f')} | "
        f"{_fmt(r['kl_best'], '.3f')} → {_fmt(r['kl_final'], '.3f')} | "
        f"{'yes' if r['in_fit'] else 'no'} |")
  lines.append("")
  for key in ("final", "best"):
    f = fits.get(key)
    if f is not None:
      lines.append(f"Fit on the {key} losses of widths {f['widths']}: L = {_fmt(f['A'], '.4g')}"
                   f" / N^{_fmt(f['alpha'], '.4f')} + {_fmt(f['E'], '.4f')} "
                   f"(rmse {_fmt(f['rmse'], '.2g')} nats, {int(f['n_points'])} points).")
  lines += ["", _paragraph(rows, tol), ""]
  return "\n".join(lines)


def _paragraph(rows: list[dict], tol: float) -> str:
  """What the paper found, what these runs show, and whether they agree (from the CSV)."""
  small = [r for r in rows if not r["in_fit"]]
  rising = [int(r["width"]) for r in rows if r["late_rise"]]
  both = [int(r["width"]) for r in rows if r["late_rise"] and r["train_late_rise"]]
  paper = ("Godey et al. (2024) found that small models saturate: late in training their "
           "loss stops improving and rises, while the head's singular values degenerate "
           "(KL(sigma||u) jumps) and the last layer becomes anisotropic, and their final loss "
           "lies above the scaling law fitted on larger models.")
  if rising:
    found = (f"Here the eval loss rose late (> {tol} nats above its minimum over checkpoints) "
             f"at widths {rising}" + (f"; the smoothed training loss rose too at {both}" if both
                                      else "; the smoothed training loss did not rise") + ".")
  else:
    found = (f"Here no width showed a late rise (final eval loss within {tol} nats of its "
             "minimum over checkpoints): a null result for saturation at this scale.")
  gap_verdict = None
  if not small:
    gap = ("Every width is in the scaling fit (it has three parameters), so no gap below "
           "the fitted range is measured.")
  else:
    finite = [r for r in small if math.isfinite(r["gap_final_pct"])]
    if finite:
      gap = " ".join(f"d={int(r['width'])} lies {r['gap_final_pct']:+.2f}% from the law at its "
                     f"final checkpoint and {r['gap_best_pct']:+.2f}% at its best."
                     for r in finite)
      gap_verdict = all(r["gap_final_pct"] > 0 and r["gap_best_pct"] > 0 for r in finite)
    else:
      gap = "The scaling fit is undefined (too few widths in the fit), so no gap is measured."
  kl = " ".join(f"Head KL(sigma||u) of d={int(r['width'])}: {r['kl_best']:.3f} at the best "
                f"checkpoint, {r['kl_final']:.3f} at the final one." for r in rows
                if r["late_rise"])
  v1 = {True: "The smaller widths lie above the law fitted on the larger ones, as in the paper.",
        False: "Not every smaller width lies above the law fitted on the larger ones, unlike "
               "the paper.", None: ""}[gap_verdict]
  if rising and small and all(int(r["width"]) in both for r in small):
    v2 = "They also saturate (eval and training loss rise late), as in the paper."
  elif rising:
    v2 = ("The late rise matches the paper's saturation only in part (see which widths rose "
          "and whether their training loss rose too).")
  else:
    v2 = ("The late-training rise is not reproduced at this scale (the paper's models saw "
          "far more tokens).")
  return " ".join(x for x in (paper, found, gap, kl, v1, v2) if x)


# ------------------------------------------------------------------------------- CLI
def define_flags():
  """The CLI flags (defined only when run as a script, so importing this module from
  experiments.reproduce or the tests defines no flags)."""
  global OUT, PRESET, DATA
  OUT = flags.DEFINE_string("out", "out/saturation", "output directory")
  PRESET = flags.DEFINE_enum("preset", "cpu", list(PRESETS), "quick | cpu | tpu")
  DATA = flags.DEFINE_string("data", "", "a directory of .txt files (default "
                             f"{DEFAULT_DATA}), or a TFDS name for the tpu preset")


def main(argv):
  del argv
  out = Path(OUT.value)
  run(out, PRESET.value, DATA.value or None)
  print(json.dumps({"out": str(out), "runs": str(out / "saturation_runs.csv"),
                    "fit": str(out / "saturation_fit.csv")}))


if __name__ == "__main__":
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  define_flags()
  common.run(main)
