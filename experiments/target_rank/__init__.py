r"""The rank of the target (Godey et al. 2024, E6): W-error of empirical next-token matrices.

  python -m experiments.target_rank --preset=cpu --out=out/target_rank
  python -m experiments.target_rank --preset=quick --out=/tmp/tr --data=DIR_OF_TXT

For each vocabulary size V (cpu: 512, 1024, 2048, 4096) a sentencepiece tokenizer is
trained on the corpus (default ``../shared/data/shakespeare``) by the text pipeline
(``sbjax.data.make_dataset``; both splits are used, as two streams). For each context
length n = 1..4 the C x V next-token count matrix of the contexts seen >= min_count times
is built (``sbjax.studies.ngram``, sparse), and for each variant

    raw            P[c, v] = N[c, v] / n_c                    (the paper's matrix)
    addk           (N[c, v] + k) / (n_c + k V)                 (add-k smoothed probabilities)
    logp           log((N[c, v] + k) / (n_c + k V))            (smoothed log-probabilities)
    logp_centered  logp minus its row mean                     (logits up to the row constant
                                                                softmax ignores)

the curve W-error(d) = sqrt(sum_{i>d} sigma_i^2) / ||M||_F for d = 1, 2, 4, ... <= min(C, V)
(``sbjax.studies.lowrank_svd``). The smoothed matrices are dense, so they are never formed:
each is held as sparse + rank one, M = S + a 1^T (logp: S = log1p(N/k) on the observed
entries, a_c = log(k / (n_c + kV)); no bound on C is needed), with ||M||_F exact from the
parts. Spectra come from the exact Gram matrix of the smaller side when min(C, V) <=
``gram_max_dim`` and otherwise from randomized subspace iteration (top max(d) values).

Outputs in OUT: ``target_rank.csv`` (variant, n, V, d, w_error, C, nnz, method, min_count,
k), ``target_rank_contexts.csv`` (one row per (V, n): contexts seen / kept, pairs, nnz),
``fig_target_rank_<variant>.png`` (the Fig. 7 analogue: one panel per V, one curve per n),
``target_rank_meta.json``, ``data/`` (tokenizers and token caches) and ``parts/`` (one
finished (V, n) per file, skipped on a rerun). ``report_section(out, rel)`` gives the
markdown section.
"""

from __future__ import annotations

import dataclasses
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

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = "../shared/data/shakespeare"  # relative to the repository root
CSV = "target_rank.csv"
CONTEXTS_CSV = "target_rank_contexts.csv"
FIELDS = ("variant", "n", "V", "d", "w_error", "C", "nnz", "method", "min_count", "k")


@dataclasses.dataclass(frozen=True)
class Preset:
  vocab_sizes: tuple
  ns: tuple = (1, 2, 3, 4)
  min_count: int = 10
  k: float = 0.1  # add-k smoothing constant
  max_d: int = 4096  # dims are 1, 2, 4, ... up to min(C, V, max_d)
  d_ref: int = 64  # the d of the report's table
  variants: tuple = ("raw", "addk", "logp", "logp_centered")
  gram_max_dim: int = 4096
  oversample: int = 20
  n_iter: int = 6
  source: str = "text"  # text (a directory) | tfds
  tfds_name: str = ""
  max_docs: int = 0


PRESETS = {
    "quick": Preset(vocab_sizes=(64, 128), ns=(1, 2, 3), min_count=3, max_d=128, d_ref=16),
    "cpu": Preset(vocab_sizes=(512, 1024, 2048, 4096)),
    # the paper's scale: GPT-2/Pythia-sized vocabularies on a large corpus; spectra of
    # min(C, V) > gram_max_dim come from randomized SVD (top max_d values)
    "tpu": Preset(vocab_sizes=(8192, 16384, 32768, 50304), min_count=20, max_d=2048, d_ref=256,
                  source="tfds", tfds_name="lm1b", max_docs=2_000_000),
}


def get_preset(name: str) -> Preset:
  if name not in PRESETS:
    raise ValueError(f"unknown target_rank preset {name!r}; known: {', '.join(PRESETS)}")
  return PRESETS[name]


def data_config(p: Preset, vocab: int, out: Path, data: str | None):
  """The DataConfig of one vocabulary size (validated)."""
  from sbjax.config import DataConfig  # noqa: PLC0415

  if p.source == "tfds":
    return DataConfig(source="tfds", tfds_name=data or p.tfds_name, vocab_size=vocab,
                      max_docs=p.max_docs)
  path = Path(data or DEFAULT_DATA)
  path = path if path.is_absolute() or path.exists() else REPO / path
  if not path.is_dir():
    raise FileNotFoundError(f"corpus directory {data or DEFAULT_DATA} not found; pass "
                            "--data=DIR (a directory of .txt files)")
  return DataConfig(source="text", path=str(path), vocab_size=vocab,
                    tfds_data_dir=str(out / "data" / "tfds"))


def dims_for(p: Preset, kmax: int) -> list[int]:
  top = min(kmax, p.max_d)
  dims = [1 << i for i in range(0, 31) if (1 << i) <= top]
  return dims + ([top] if top not in dims else [])


def _key(p: Preset, vocab: int, n: int, corpus: str) -> str:
  fields = {k: v for k, v in dataclasses.asdict(p).items() if k not in ("d_ref", "vocab_sizes", "ns")}
  return hashlib.blake2b(json.dumps([fields, vocab, n, corpus], sort_keys=True).encode(),
                         digest_size=6).hexdigest()


def curves(tokens, vocab: int, n: int, p: Preset) -> tuple[list[dict], dict]:
  """The CSV rows of one (V, n): every variant's W-error curve; and the context info."""
  from sbjax.studies import lowrank_svd, ngram  # noqa: PLC0415

  t0 = time.perf_counter()
  m = ngram.context_counts(tokens, n, p.min_count, vocab)
  info = {"V": vocab, **m.info(), "seconds_counts": round(time.perf_counter() - t0, 2)}
  rows = []
  if m.n_rows == 0:
    logging.warning("target_rank: V=%d n=%d: no context seen >= %d times", vocab, n, p.min_count)
    return rows, info
  kmax = min(m.n_rows, vocab)
  dims = dims_for(p, kmax)
  for var in p.variants:
    t1 = time.perf_counter()
    op = lowrank_svd.variant_matrix(m.counts, var, p.k)
    c = lowrank_svd.w_error_curve(op, dims, gram_max_dim=p.gram_max_dim,
                                  oversample=p.oversample, n_iter=p.n_iter)
    for d, w in zip(c.dims, c.w_error):
      rows.append({"variant": var, "n": n, "V": vocab, "d": int(d), "w_error": float(w),
                   "C": m.n_rows, "nnz": int(m.counts.nnz), "method": c.method,
                   "min_count": p.min_count, "k": p.k})
    info[f"seconds_{var}"] = round(time.perf_counter() - t1, 2)
  return rows, info


def _write_rows(path: Path, rows: list[dict], fields) -> None:
  import csv  # noqa: PLC0415
  import io  # noqa: PLC0415

  from sbjax.analysis.table import atomic_write_text  # noqa: PLC0415

  buf = io.StringIO()
  w = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore")
  w.writeheader()
  for r in rows:
    w.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in r.items()})
  atomic_write_text(path, buf.getvalue())


def _read_rows(path: Path) -> list[dict]:
  import csv  # noqa: PLC0415

  out = []
  with open(path, newline="") as f:
    for r in csv.DictReader(f):
      row = {}
      for k, v in r.items():
        try:
          row[k] = int(v)
        except ValueError:
          try:
            row[k] = float(v)
          except ValueError:
            row[k] = v
      out.append(row)
  return out


def run(out: Path, preset: str, data: str | None = None, verbose: bool = True) -> None:
  """Every (V, n) of the preset (finished ones in OUT/parts are skipped); see the doc."""
  from sbjax.data import make_dataset  # noqa: PLC0415

  p = get_preset(preset)
  out = Path(out)
  (out / "parts").mkdir(parents=True, exist_ok=True)
  t0 = time.perf_counter()
  rows, infos, data_info = [], [], {}
  for vocab in p.vocab_sizes:
    dc = data_config(p, vocab, out, data)
    t1 = time.perf_counter()
    ds = make_dataset(dc, seq_len=16, global_batch_size=1, seed=0,
                      workdir=str(out / "data" / f"V{vocab}"), process_index=0, process_count=1)
    if ds.vocab_size != vocab:
      raise ValueError(f"the tokenizer for V={vocab} has {ds.vocab_size} pieces")
    streams = [np.asarray(ds.train_tokens), np.asarray(ds.val_tokens)]
    data_info[vocab] = {"tokens": int(sum(s.size for s in streams)),
                        "seconds_tokenizer": round(time.perf_counter() - t1, 1)}
    corpus = dc.path or dc.tfds_name
    for n in p.ns:
      part = out / "parts" / f"V{vocab}_n{n}_{_key(p, vocab, n, str(corpus))}.json"
      if part.exists():
        rec = json.loads(part.read_text())
      else:
        if verbose:
          print(f"[target_rank] V={vocab} n={n}", file=sys.stderr)
        r, info = curves(streams, vocab, n, p)
        rec = {"rows": r, "info": info}
        tmp = part.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec))
        tmp.replace(part)
      rows += rec["rows"]
      infos.append(rec["info"])
  _write_rows(out / CSV, rows, FIELDS)
  _write_rows(out / CONTEXTS_CSV, infos,
              ("V", "n", "min_count", "n_pairs", "n_contexts_seen", "n_contexts_kept",
               "kept_pairs", "nnz", "vocab_size", "seconds_counts",
               *[f"seconds_{v}" for v in p.variants]))
  meta = {"preset": preset, "preset_fields": dataclasses.asdict(p),
          "corpus": str(data or (p.tfds_name if p.source == "tfds" else DEFAULT_DATA)),
          "data": data_info, "seconds": round(time.perf_counter() - t0, 1),
          "smoothed_matrices": "held as sparse + rank one (S + a 1^T), never densified; "
                               "||M||_F exact from the parts"}
  (out / "target_rank_meta.json").write_text(json.dumps(meta, indent=1, default=str))
  draw(out)


# ------------------------------------------------------------------------------- figures
def draw(out: Path) -> list[Path]:
  import matplotlib  # noqa: PLC0415

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  rows = _read_rows(Path(out) / CSV)
  paths = []
  for var in sorted({r["variant"] for r in rows}, key=_variant_order):
    sub = [r for r in rows if r["variant"] == var]
    vs = sorted({r["V"] for r in sub})
    fig, axes = plt.subplots(1, len(vs), figsize=(4.2 * len(vs), 3.6), squeeze=False,
                             sharey=True)
    for ax, v in zip(axes[0], vs):
      for n in sorted({r["n"] for r in sub if r["V"] == v}):
        cur = sorted((r for r in sub if r["V"] == v and r["n"] == n), key=lambda r: r["d"])
        ax.plot([r["d"] for r in cur], [r["w_error"] for r in cur], "o-", ms=3,
                label=f"n={n} (C={cur[0]['C']})")
      ax.set_xscale("log", base=2)
      ax.set_xlabel("d")
      ax.set_title(f"V={v}", fontsize=10)
      ax.grid(alpha=0.3)
      ax.legend(fontsize=7)
    axes[0][0].set_ylabel("W-error(d)")
    fig.suptitle(f"W-error of the {var} next-token matrix (Godey Fig. 7 analogue)", fontsize=11)
    fig.tight_layout()
    path = Path(out) / f"fig_target_rank_{var}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)
  return paths


def _variant_order(v: str) -> int:
  order = ("raw", "addk", "logp", "logp_centered")
  return order.index(v) if v in order else len(order)


# ------------------------------------------------------------------------------- report
def findings(rows: list[dict]) -> dict:
  """Monotonicity of every curve and the comparison of each variant with raw, per point."""
  curves_ = {}
  for r in rows:
    curves_.setdefault((r["variant"], r["V"], r["n"]), []).append(r)
  n_curves = len(curves_)
  not_decreasing = []
  for key, cur in curves_.items():
    w = np.array([r["w_error"] for r in sorted(cur, key=lambda r: r["d"])])
    if np.any(np.diff(w) > 1e-12):
      not_decreasing.append(key)
  raw = {(r["V"], r["n"], r["d"]): r["w_error"] for r in rows if r["variant"] == "raw"}
  comp = {}
  for var in sorted({r["variant"] for r in rows} - {"raw"}, key=_variant_order):
    pts = [(r["w_error"], raw[(r["V"], r["n"], r["d"])]) for r in rows
           if r["variant"] == var and (r["V"], r["n"], r["d"]) in raw and r["d"] < r["C"]
           and r["d"] < r["V"]]
    lower = sum(1 for a, b in pts if a < b)
    comp[var] = {"points": len(pts), "lower_than_raw": lower,
                 "mean_diff": float(np.mean([a - b for a, b in pts])) if pts else math.nan}
  return {"n_curves": n_curves, "not_decreasing": not_decreasing, "vs_raw": comp}


def p_max_d(rows, vocab, n) -> int:
  return max(r["d"] for r in rows if r["variant"] == "raw" and r["V"] == vocab and r["n"] == n)


def _cmp_word(cm: dict) -> str:
  if cm["lower_than_raw"] == cm["points"]:
    return "lower than raw at every d"
  if cm["lower_than_raw"] == 0:
    return "higher than raw at every d"
  return f"lower than raw at {cm['lower_than_raw']} of {cm['points']} points"


def _log_verdict(vs_raw: dict) -> str:
  lg, lgc = vs_raw.get("logp", {}), vs_raw.get("logp_centered", {})
  if not lg.get("points"):
    return "the smoothed log variant was not computed"
  txt = "the smoothed log-probability matrix is " + _cmp_word(lg)
  if lgc.get("points"):
    txt += ("; much of that comes from its row-constant part log(k/(n_c + kV)), which softmax "
            "ignores: row-centred (logp_centered) it is " + _cmp_word(lgc))
  return txt


def report_section(out: Path, rel: str) -> str:
  out = Path(out)
  rows = _read_rows(out / CSV)
  ctx = _read_rows(out / CONTEXTS_CSV)
  meta = json.loads((out / "target_rank_meta.json").read_text()) if (
      out / "target_rank_meta.json").exists() else {}
  pf = meta.get("preset_fields", {})
  d_ref = int(pf.get("d_ref", 64))
  variants = sorted({r["variant"] for r in rows}, key=_variant_order)
  lines = ["## target_rank (Godey et al. 2024, E6)", ""]
  if meta:
    lines += [f"Preset `{meta['preset']}`: corpus `{meta['corpus']}`, V in "
              f"{sorted(int(v) for v in meta['data'])}, contexts of the last n tokens seen >= "
              f"{pf.get('min_count')} times, add-k smoothing k={pf.get('k')}; "
              f"{meta['seconds'] / 60:.1f} min. The smoothed matrices are held as sparse + rank "
              "one and never densified.", ""]
  for var in variants:
    lines += [f"![W-error of the {var} matrix]({rel}/fig_target_rank_{var}.png)", ""]
  look = {(r["variant"], r["V"], r["n"], r["d"]): r["w_error"] for r in rows}
  lines += [f"W-error at d = {d_ref} (– where d >= min(C, V)):", "",
            "| V | n | C kept (of seen) | " + " | ".join(variants) + " |",
            "|---|---|---|" + "---|" * len(variants)]
  for c in sorted(ctx, key=lambda r: (r["V"], r["n"])):
    cells = []
    for var in variants:
      w = look.get((var, c["V"], c["n"], d_ref))
      cells.append("–" if w is None or d_ref >= min(c["n_contexts_kept"], c["V"]) else f"{w:.4f}")
    lines.append(f"| {c['V']} | {c['n']} | {c['n_contexts_kept']} ({c['n_contexts_seen']}) | "
                 + " | ".join(cells) + " |")
  f = findings(rows)
  paper = ("Godey et al. (2024, Fig. 7) found that the empirical next-token distribution "
           "matrices of n-gram contexts are high-rank: their W-error falls slowly with d, so a "
           "head of small dimension cannot represent the target exactly.")
  mono = ("W-error is non-increasing in d on every one of the "
          f"{f['n_curves']} curves" if not f["not_decreasing"] else
          f"W-error is NOT monotone on {len(f['not_decreasing'])} of {f['n_curves']} curves "
          f"({f['not_decreasing'][:3]})")
  comps = []
  for var, cm in f["vs_raw"].items():
    if cm["points"]:
      comps.append(f"{var} is below raw at {cm['lower_than_raw']} of {cm['points']} points "
                   f"(mean difference {cm['mean_diff']:+.4f})")
  lv = _log_verdict(f["vs_raw"])
  vmax = max(r["V"] for r in rows)
  raw_ref = {r["n"]: r["w_error"] for r in rows if r["variant"] == "raw" and r["V"] == vmax
             and r["d"] == d_ref and d_ref < min(r["C"], r["V"])}
  d06 = {}
  for r in sorted((r for r in rows if r["variant"] == "raw" and r["V"] == vmax),
                  key=lambda r: r["d"]):
    if r["w_error"] <= 0.6 and r["n"] not in d06:
      d06[r["n"]] = r["d"]
  rank_txt = ""
  if raw_ref:
    lo, hi = min(raw_ref.values()), max(raw_ref.values())
    rank_txt = (f" For the raw matrix at V={vmax}, W-error at d={d_ref} is {lo:.3f}–{hi:.3f} "
                f"over n = {sorted(raw_ref)}; it first reaches <= 0.6 at d = "
                + ", ".join(f"{d06[n]} (n={n})" if n in d06 else f"> {p_max_d(rows, vmax, n)} "
                            f"(n={n})" for n in sorted(raw_ref)) + ".")
    agree = ("The target is high-rank here too (W-error >= 0.2 at d = "
             f"{d_ref} for every n at V={vmax}), which agrees with the paper." if lo >= 0.2 else
             f"At V={vmax} the raw target is close to rank {d_ref} for some n (W-error "
             f"{lo:.3f} < 0.2), unlike the paper's high-rank finding: the corpus is small.")
  else:
    agree = f"No curve at V={vmax} reaches d={d_ref}, so the rank is not compared."
  if f["not_decreasing"]:
    agree += (" Some curves are not monotone: check the randomized SVD settings (more "
              "oversampling / power iterations).")
  lines += ["", f"{paper} Here: {mono}.{rank_txt} Against raw, per (V, n, d < min(C, V)): "
            + "; ".join(comps) + f". So {lv}. {agree}", ""]
  return "\n".join(lines)


# ------------------------------------------------------------------------------- CLI
def define_flags():
  """The CLI flags (defined only when run as a script; importing defines none)."""
  global OUT, PRESET, DATA
  OUT = flags.DEFINE_string("out", "out/target_rank", "output directory")
  PRESET = flags.DEFINE_enum("preset", "cpu", list(PRESETS), "quick | cpu | tpu")
  DATA = flags.DEFINE_string("data", "", "a directory of .txt files (default "
                             f"{DEFAULT_DATA}), or a TFDS name for the tpu preset")


def main(argv):
  del argv
  out = Path(OUT.value)
  run(out, PRESET.value, DATA.value or None)
  print(json.dumps({"out": str(out), "csv": str(out / CSV)}))


if __name__ == "__main__":
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  define_flags()
  common.run(main)
