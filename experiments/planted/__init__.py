r"""Experiment 5, ``planted``: the exact rank floor and the knee on a planted-rank language.

  python -m experiments.planted --preset=cpu --out=out/planted

Part 1 (the knee). The planted language (V=256, planted rank k=8, a bigram chain) has
logits ``alpha U Vᵀ/√k + 1 bᵀ`` of rank k + 1 and exact entropy H. For every head rank r a
model with a bias-free rank-r head (``lowrank``) is trained, and its loss is compared with the
exact floor (``sbjax.studies.floor``)

    floor(r) = min_{rank L ≤ r} Σ_c π_c CE(P(·|c), softmax(L_c)),   floor(r) = H for r ≥ k + 1.

The trained loss is measured on the validation stream in two ways: ``eval_loss``, the usual
mean of −log q_t(x_{t+1}), and ``expected_loss``, its Rao-Blackwellised form
Σ_t Σ_w P(w|c_t)(−log q_t(w)) / n (same expectation, the sampling noise of the target token
removed; ``expected_loss − H`` is the mean KL(P(·|c_t) ‖ q_t) over validation positions). The
knee is the smallest r with ``expected_loss − H ≤ tol`` (0.05 nats). Checks (reported):
knee = k + 1 ± 1; every r ≥ k + 1 within tol of H; every r ≤ k/2 above H by at least
floor(r) − H − 0.02.

Part 2 (high rank). A mixture of M softmaxes of planted rank k each (``PlantedMixture``) has a
high-rank log-probability matrix. ``mos`` heads (M components) are compared with ``lowrank``
heads whose head parameter count is matched (``sbjax.heads.head_param_count``), plus the
lowrank floor at that rank. The mos runs use their own ``model.init_std`` (``mos_init_std``;
see the Preset). At matched head parameters the lowrank rank r is about the mos width d, so
r ≥ M k + 1 spans every component and only the log-sum-exp nonlinearity is out of its reach:
the floor gap at r is small (0.03 nats for the cpu mixture, at most ~0.08 over mixtures a d=16
mos head can represent), and whether mos beats lowrank is reported, not assumed.

Outputs in OUT: ``planted.csv`` (rank, eval_loss, eval_acc, expected_loss, floor, H, gap,
floor_gap), ``planted_floor.csv`` (the floor fit with its convergence record),
``planted_mix.csv``, ``planted_meta.json``, ``fig_planted_knee.png``, ``fig_planted_mix.png``,
``runs/`` (workdirs; finished runs are skipped on a rerun).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import math
import sys
import time
from pathlib import Path

import numpy as np

from experiments import common

FIG_KNEE = "fig_planted_knee.png"
FIG_MIX = "fig_planted_mix.png"
CSV_KNEE = "planted.csv"
CSV_FLOOR = "planted_floor.csv"
CSV_MIX = "planted_mix.csv"
META = "planted_meta.json"


@dataclasses.dataclass(frozen=True)
class Preset:
  ranks: tuple  # head ranks of part 1
  vocab: int = 256
  k: int = 8
  alpha: float = 4.0
  d_model: int = 64
  n_layers: int = 1
  n_heads: int = 4
  steps: int = 1500
  batch: int = 32
  seq_len: int = 64
  lr: float = 1e-2
  warmup: int = 50
  train_tokens: int = 2_000_000
  val_tokens: int = 131_072
  measure_batches: int = 32  # validation batches of the final measurement
  tol: float = 0.05  # knee tolerance (nats)
  margin: float = 0.02  # r <= k/2: loss - H >= floor gap - margin
  floor_gtol: float = 1e-6
  floor_max_iter: int = 3000
  # part 2: (label, head, d_model, n_mix); lowrank ranks are matched to the first mos run
  mix_m: int = 4
  mix_k: int = 2
  mix_runs: tuple = (("mos", "mos", 16, 4), ("lowrank", "lowrank", 64, 0),
                     ("lowrank-d16", "lowrank", 16, 16))
  mix_steps: int = 1500
  # model.init_std of the mos runs (the lowrank runs keep the knee part's 0.02). At 0.02 a
  # d=16 MoS head starts with its M tanh projections (pre-activations ~0.02·√d) and shared W
  # nearly identical, so the prior collapses onto one component and the tanh saturates: the
  # cpu run ended 0.50 nats above H; at 0.2 (≈ GPT-2's 0.02·√(768/d)) it ends 0.10 above H.
  mos_init_std: float = 0.2


PRESETS = {
    # tests and `reproduce --quick`: 7 ranks, 600 steps each, no mixture runs beyond two
    "quick": Preset(ranks=(1, 2, 4, 8, 9, 16, 64), steps=600, measure_batches=16,
                    mix_runs=(("mos", "mos", 16, 4), ("lowrank", "lowrank", 64, 0)),
                    mix_steps=600),
    # <= 20 min on 2 CPU cores
    "cpu": Preset(ranks=(1, 2, 3, 4, 6, 8, 9, 10, 16, 32, 64), steps=1000, mix_steps=1000),
    # the paper's scale in spirit: a larger vocabulary and planted rank, a 2-layer d=256 model
    "tpu": Preset(ranks=(1, 2, 4, 8, 16, 24, 30, 32, 33, 34, 36, 40, 48, 64, 128, 256),
                  vocab=1024, k=32, d_model=256, n_layers=2, n_heads=4, steps=20_000, batch=256,
                  seq_len=128, lr=3e-3, warmup=500, train_tokens=200_000_000,
                  val_tokens=1_048_576, measure_batches=32, mix_m=8, mix_k=16,
                  mix_runs=(("mos", "mos", 256, 8), ("lowrank", "lowrank", 512, 0),
                            ("dense", "lowrank", 512, 512)),
                  mix_steps=20_000, mos_init_std=0.02),
}


def get_preset(name) -> Preset:
  if isinstance(name, Preset):
    return name
  if name not in PRESETS:
    raise ValueError(f"unknown planted preset {name!r}; known: {', '.join(PRESETS)}")
  return PRESETS[name]


# ------------------------------------------------------------------------------ configs


def _base(p: Preset, mixture: bool):
  from sbjax import presets  # noqa: PLC0415

  d = presets.get_preset("planted-mix" if mixture else "planted-knee")
  d["model"].update(d_model=p.d_model, n_layers=p.n_layers, n_heads=p.n_heads,
                    max_len=max(p.seq_len, 64))
  d["data"].update(planted_vocab=p.vocab, planted_rank=p.mix_k if mixture else p.k,
                   planted_alpha=p.alpha, planted_train_tokens=p.train_tokens,
                   planted_val_tokens=p.val_tokens)
  if mixture:
    d["data"]["planted_mix"] = p.mix_m
  steps = p.mix_steps if mixture else p.steps
  d["train"].update(steps=steps, batch_size=p.batch, seq_len=p.seq_len, lr=p.lr,
                    warmup_steps=p.warmup, eval_every=steps, ckpt_every=steps,
                    log_every=max(1, steps // 10))
  return d


def knee_configs(p: Preset) -> list:
  """(rank, Config) of part 1, validated."""
  from sbjax.config import Config  # noqa: PLC0415

  out = []
  for r in p.ranks:
    d = _base(p, False)
    d["model"].update(head="lowrank", head_rank=int(r), vocab_size=p.vocab)
    d["name"] = f"planted-r{r}"
    out.append((int(r), Config.from_dict(d)))
  return out


def _n_heads(d_model: int, want: int) -> int:
  """The largest head count <= want that divides d_model with an even rotary width."""
  for h in range(min(want, d_model), 0, -1):
    if d_model % h == 0 and int(d_model // h * 0.25) % 2 == 0:
      return h
  return 1


def matched_rank(head_params: int, vocab: int, d_model: int) -> int:
  """The lowrank rank r whose head (V r + r d parameters) is closest to ``head_params``."""
  return int(min(d_model, max(1, round(head_params / (vocab + d_model)))))


def mix_configs(p: Preset) -> list:
  """(label, Config) of part 2, validated; a lowrank run with n_mix=0 gets the rank whose head
  parameter count matches the first mos run."""
  from sbjax.config import Config  # noqa: PLC0415
  from sbjax.heads import head_param_count  # noqa: PLC0415

  out, mos_params = [], None
  for label, head, d_model, n in p.mix_runs:
    d = _base(p, True)
    d["model"].update(head=head, d_model=int(d_model), vocab_size=p.vocab,
                      n_heads=_n_heads(int(d_model), p.n_heads))
    if head == "mos":
      d["model"].update(n_mix=int(n), init_std=float(p.mos_init_std))
    else:
      if n == 0:
        if mos_params is None:
          raise ValueError("planted preset: a matched lowrank run needs a mos run before it")
        n = matched_rank(mos_params, p.vocab, int(d_model))
      d["model"]["head_rank"] = int(n)
    d["name"] = f"planted-mix-{label}"
    cfg = Config.from_dict(d)
    if head == "mos" and mos_params is None:
      mos_params = head_param_count(cfg.model)
    out.append((label, cfg))
  return out


def validate(p) -> None:
  """Builds every config of a preset (raises ValueError on a bad one) without running."""
  p = get_preset(p)
  knee_configs(p)
  mix_configs(p)
  if not p.ranks or min(p.ranks) < 1 or max(p.ranks) > p.d_model:
    raise ValueError(f"planted preset: ranks must be in 1..d_model={p.d_model}, got {p.ranks}")


# ------------------------------------------------------------------------------ measuring


def context_index(tokens: np.ndarray, n: int, vocab: int) -> np.ndarray:
  """Context index of every position t >= n-1 of windows [B, T] (the last n tokens up to t);
  -1 where fewer than n tokens are visible."""
  tokens = np.asarray(tokens, np.int64)
  B, T = tokens.shape
  c = np.full((B, T), -1, np.int64)
  acc = np.zeros((B, T - n + 1), np.int64)
  for i in range(n):
    acc = acc * vocab + tokens[:, i:T - n + 1 + i]
  c[:, n - 1:] = acc
  return c


def measure(cfg, params, lang, batches) -> dict:
  """eval_loss, eval_acc (sampled targets) and expected_loss (Rao-Blackwellised) on batches
  [B, T+1]: expected_loss = mean over positions of Σ_w P(w|c_t) (−log q_t(w))."""
  import jax  # noqa: PLC0415

  from sbjax.model import Model  # noqa: PLC0415

  model = Model(cfg.model)
  logp_fn = jax.jit(lambda p, x: jax.nn.log_softmax(model.apply(p, x), axis=-1))
  nll, acc, rb, n_rb = [], [], 0.0, 0
  for b in batches:
    x, y = b[:, :-1], b[:, 1:]
    lq = np.asarray(logp_fn(params, x), np.float64)
    nll.append(-np.take_along_axis(lq, y[..., None], -1)[..., 0])
    acc.append(lq.argmax(-1) == y)
    s, n = expected_nll_sum(lq, x, lang)
    rb, n_rb = rb + s, n_rb + n
  return {"eval_loss": float(np.mean(nll)), "eval_acc": float(np.mean(acc)),
          "expected_loss": rb / n_rb}


def expected_nll_sum(logq: np.ndarray, x: np.ndarray, lang) -> tuple[float, int]:
  """(Σ_t Σ_w P(w|c_t)(−log q_t(w)), number of positions) over positions with a full context;
  ``logq`` [B, T, V] are the model's log-probs after inputs ``x`` [B, T]."""
  c = context_index(x, lang.context, lang.vocab)
  ok = c >= 0
  return float(-(lang.probs[c[ok]] * logq[ok]).sum()), int(ok.sum())


def _train_and_measure(cfg, wd: Path, ds, p: Preset, verbose: bool) -> dict:
  """Trains (or resumes) one run and measures it; cached in wd/result.json."""
  from sbjax import checkpoint as ckpt  # noqa: PLC0415
  from sbjax.heads import head_param_count  # noqa: PLC0415
  from sbjax.train import train  # noqa: PLC0415

  res_path = wd / "result.json"
  key = json.dumps(cfg.to_dict(), sort_keys=True) + f"|{p.measure_batches}"
  if res_path.exists():
    res = json.loads(res_path.read_text())
    if res.get("key") == key:
      return res
  t0 = time.perf_counter()
  train(cfg, wd, dataset=ds, quiet=not verbose)
  _, params, _ = ckpt.load_params(wd)
  res = measure(cfg, params, ds.planted, ds.eval_batches(p.measure_batches))
  res.update(key=key, seconds=time.perf_counter() - t0, head_params=head_param_count(cfg.model))
  tmp = res_path.with_suffix(".tmp")
  tmp.write_text(json.dumps(res))
  tmp.replace(res_path)
  return res


def _dataset(cfg):
  from sbjax.data import make_dataset  # noqa: PLC0415

  return make_dataset(cfg.data, seq_len=cfg.train.seq_len, global_batch_size=cfg.train.batch_size,
                      seed=cfg.train.data_seed, workdir=None, process_index=0, process_count=1)


def _write_csv(path: Path, rows: list[dict]) -> None:
  tmp = path.with_suffix(".tmp")
  with open(tmp, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
  tmp.replace(path)


def read_csv(path: Path) -> list[dict]:
  def conv(v):
    try:
      return float(v)
    except ValueError:
      return v
  with open(path) as f:
    return [{k: conv(v) for k, v in r.items()} for r in csv.DictReader(f)]


def _floors(lang, ranks, p: Preset, path: Path) -> dict:
  """floor(r) for ranks (cached in path, keyed by the language and the ranks)."""
  from sbjax.studies.floor import floor_curve  # noqa: PLC0415

  key = json.dumps({"lang": lang.info(), "ranks": sorted(set(ranks)), "gtol": p.floor_gtol})
  meta = path.with_suffix(".json")
  if path.exists() and meta.exists() and meta.read_text() == key:
    return {int(r["rank"]): r for r in read_csv(path)}
  # Convergence is recorded per rank (planted_floor.csv, column converged) and reported.
  res = floor_curve(lang, ranks, gtol=p.floor_gtol, max_iter=p.floor_max_iter, restarts=2,
                    require_converged=False)
  rows = [r.row() for r in res]
  _write_csv(path, rows)
  meta.write_text(key)
  return {int(r["rank"]): r for r in rows}


def run(out: Path, preset, verbose: bool = True) -> None:
  """Runs both parts into ``out`` (finished runs and floors are reused)."""
  p = get_preset(preset)
  validate(p)
  out = Path(out)
  out.mkdir(parents=True, exist_ok=True)
  t0 = time.perf_counter()
  # ---- part 1
  confs = knee_configs(p)
  ds = _dataset(confs[0][1])
  lang = ds.planted
  floors = _floors(lang, [r for r, _ in confs] + [p.vocab], p, out / CSV_FLOOR)
  rows = []
  for r, cfg in confs:
    res = _train_and_measure(cfg, out / "runs" / f"r{r}", ds, p, verbose)
    fl = float(floors[r]["floor"])
    rows.append({"rank": r, "eval_loss": res["eval_loss"], "eval_acc": res["eval_acc"],
                 "expected_loss": res["expected_loss"], "floor": fl, "H": lang.entropy,
                 "gap": res["expected_loss"] - lang.entropy, "floor_gap": fl - lang.entropy})
    _write_csv(out / CSV_KNEE, rows)
  t1 = time.perf_counter()
  # ---- part 2 (skipped when the preset has no mixture runs)
  mconfs = mix_configs(p)
  if not mconfs:
    _write_meta(out, preset, p, lang, None, t1 - t0, 0.0)
    draw(out)
    return
  mds = _dataset(mconfs[0][1])
  mix = mds.planted
  lr_ranks = sorted({c.model.rank for _, c in mconfs if c.model.head == "lowrank"})
  mfloors = _floors(mix, lr_ranks, p, out / "planted_mix_floor.csv") if lr_ranks else {}
  mrows = []
  for label, cfg in mconfs:
    res = _train_and_measure(cfg, out / "runs" / f"mix-{label}", mds, p, verbose)
    lowrank = cfg.model.head == "lowrank"
    fl = float(mfloors[cfg.model.rank]["floor"]) if lowrank else float("nan")
    mrows.append({"label": label, "head": cfg.model.head, "d_model": cfg.model.d_model,
                  "rank": cfg.model.rank if lowrank else 0,
                  "n_mix": cfg.model.n_mix if not lowrank else 0,
                  "head_params": res["head_params"], "eval_loss": res["eval_loss"],
                  "eval_acc": res["eval_acc"], "expected_loss": res["expected_loss"],
                  "floor": fl, "H": mix.entropy, "gap": res["expected_loss"] - mix.entropy,
                  "floor_gap": fl - mix.entropy})
    _write_csv(out / CSV_MIX, mrows)
  _write_meta(out, preset, p, lang, mix, t1 - t0, time.perf_counter() - t1)
  draw(out)


def _write_meta(out: Path, preset, p: Preset, lang, mix, s_knee: float, s_mix: float) -> None:
  meta = {"preset": preset if isinstance(preset, str) else "custom",
          "settings": dataclasses.asdict(p), "language": lang.info(),
          "mixture": mix.info() if mix is not None else None,
          "seconds_knee": s_knee, "seconds_mix": s_mix}
  (out / META).write_text(json.dumps(meta, indent=2))


# ------------------------------------------------------------------------------ summary


def summarize(out: Path) -> dict:
  """The knee and the three checks, computed from planted.csv and planted_meta.json."""
  from sbjax.studies.floor import knee  # noqa: PLC0415

  rows = read_csv(Path(out) / CSV_KNEE)
  meta = json.loads((Path(out) / META).read_text())
  s = meta["settings"]
  k, tol, margin = int(s["k"]), float(s["tol"]), float(s["margin"])
  h = rows[0]["H"]
  ranks = [int(r["rank"]) for r in rows]
  kn = knee(ranks, [r["expected_loss"] for r in rows], h, tol)
  kn_sampled = knee(ranks, [r["eval_loss"] for r in rows], h, tol)
  high = [r for r in rows if r["rank"] >= k + 1]
  low = [r for r in rows if r["rank"] <= k / 2]
  return {
      "k": k, "H": h, "tol": tol, "margin": margin, "knee": kn, "knee_sampled": kn_sampled,
      "knee_ok": kn is not None and abs(kn - (k + 1)) <= 1,
      "high_ok": bool(high) and all(r["gap"] <= tol for r in high),
      "high_max_gap": max((r["gap"] for r in high), default=float("nan")),
      "low_ok": bool(low) and all(r["gap"] >= r["floor_gap"] - margin for r in low),
      "low_min_excess": min((r["gap"] - r["floor_gap"] for r in low), default=float("nan")),
  }


def draw(out: Path) -> None:
  import matplotlib  # noqa: PLC0415
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  out = Path(out)
  rows = read_csv(out / CSV_KNEE)
  s = summarize(out)
  r = [x["rank"] for x in rows]
  fig, ax = plt.subplots(figsize=(5.5, 3.8))
  ax.plot(r, [x["expected_loss"] for x in rows], "o-", label="trained rank-r head")
  ax.plot(r, [x["eval_loss"] for x in rows], "x", color="C0", alpha=0.5,
          label="trained (sampled targets)")
  ax.plot(r, [x["floor"] for x in rows], "s--", color="C3", label="exact floor(r)")
  ax.axhline(s["H"], color="k", ls=":", label=f"H = {s['H']:.3f}")
  ax.axvline(s["k"] + 1, color="gray", ls=":", lw=0.8)
  if s["knee"] is not None:
    ax.axvline(s["knee"], color="C2", lw=1, label=f"knee r = {s['knee']}")
  ax.set_xscale("log", base=2)
  ax.set_yscale("log")
  ax.set_xlabel("head rank r")
  ax.set_ylabel("validation loss (nats)")
  vocab = json.loads((out / META).read_text())["settings"]["vocab"]
  ax.set_title(f"planted V={vocab}, k={s['k']}")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(out / FIG_KNEE, dpi=110)
  plt.close(fig)
  if (out / CSV_MIX).exists():
    m = read_csv(out / CSV_MIX)
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    x = np.arange(len(m))
    ax.bar(x, [v["gap"] for v in m], color=["C1" if v["head"] == "mos" else "C0" for v in m])
    for i, v in enumerate(m):
      if v["head"] == "lowrank" and math.isfinite(v["floor_gap"]):
        ax.plot([i - 0.4, i + 0.4], [v["floor_gap"]] * 2, "r-", lw=2)
    ax.set_xticks(x, [f"{v['label']}\n{int(v['head_params'])} p" for v in m])
    ax.set_ylabel("expected loss − H (nats)")
    ax.set_title("planted mixture: trained gap (bars), lowrank floor (red)")
    fig.tight_layout()
    fig.savefig(out / FIG_MIX, dpi=110)
    plt.close(fig)


def _f(v, spec=".4f") -> str:
  return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def report_section(out: Path, rel: str) -> str:
  out = Path(out)
  rows = read_csv(out / CSV_KNEE)
  s = summarize(out)
  lines = ["## planted: the exact floor and the knee", "",
           f"Planted-rank language, k = {s['k']}, exact entropy H = {_f(s['H'])} nats; "
           "trained loss = the Rao-Blackwellised validation loss (expected_loss).", "",
           f"![loss vs head rank]({rel}/{FIG_KNEE})", "",
           "| rank | eval_loss | eval_acc | expected_loss | floor | H | gap | floor_gap |",
           "|---|---|---|---|---|---|---|---|"]
  for r in rows:
    lines.append("| " + " | ".join([str(int(r["rank"]))] + [_f(r[c]) for c in (
        "eval_loss", "eval_acc", "expected_loss", "floor", "H", "gap", "floor_gap")]) + " |")
  yes = {True: "yes", False: "no"}
  kn = s["knee"]
  fits = [r for name in (CSV_FLOOR, "planted_mix_floor.csv") if (out / name).exists()
          for r in read_csv(out / name)]
  bad = [int(r["rank"]) for r in fits if str(r["converged"]) != "True"]
  fit_txt = (f"The {len(fits)} floor fits (L-BFGS, float64) "
             + ("all converged" if not bad else f"did not all converge (ranks {bad})")
             + f": largest tangent-gradient norm {max(r['grad_norm'] for r in fits):.1e}.")
  lines += ["", f"Knee (smallest r with loss − H ≤ {s['tol']}): **{kn if kn is not None else 'none'}**"
            f" (k + 1 = {s['k'] + 1}; within ±1: {yes[s['knee_ok']]}); with sampled targets: "
            f"{s['knee_sampled'] if s['knee_sampled'] is not None else 'none'}. "
            f"All r ≥ k + 1 within {s['tol']} of H: {yes[s['high_ok']]} (largest gap "
            f"{_f(s['high_max_gap'])}). All r ≤ k/2 above H by at least floor(r) − H − "
            f"{s['margin']}: {yes[s['low_ok']]} (smallest excess over the floor gap "
            f"{_f(s['low_min_excess'])}). {fit_txt}"]
  if (out / CSV_MIX).exists():
    m = read_csv(out / CSV_MIX)
    lines += ["", f"![mixture]({rel}/{FIG_MIX})", "",
              "| label | head | d_model | rank | n_mix | head_params | expected_loss | floor | H | gap |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for v in m:
      lines.append(f"| {v['label']} | {v['head']} | {int(v['d_model'])} | {int(v['rank'])} | "
                   f"{int(v['n_mix'])} | {int(v['head_params'])} | {_f(v['expected_loss'])} | "
                   f"{_f(v['floor'])} | {_f(v['H'])} | {_f(v['gap'])} |")
    mos = [v for v in m if v["head"] == "mos"]
    lows = [v for v in m if v["head"] == "lowrank"]
    if mos and lows:
      mos0 = mos[0]
      matched = [v for v in lows if v["head_params"] <= mos0["head_params"] * 1.05]
      beat = all(mos0["expected_loss"] < v["expected_loss"] for v in matched) if matched else None
      mix_txt = (f"On the mixture (H = {_f(mos0['H'])}), the mos head ({int(mos0['head_params'])} "
                 f"head parameters) reaches gap {_f(mos0['gap'])}; lowrank heads with at most as "
                 "many head parameters reach "
                 + ", ".join(f"{_f(v['gap'])} (r = {int(v['rank'])}, floor gap {_f(v['floor_gap'])})"
                             for v in matched)
                 + f". mos beats them: {yes[beat] if beat is not None else 'n/a'}.")
      lines += ["", mix_txt]
  agree = s["knee_ok"] and s["high_ok"] and s["low_ok"]
  lines += ["", "Godey et al. (2024) find that a head of rank below the data's needs costs loss "
            "(their E5 on real text shows a smooth decrease of loss with head rank); the planted "
            "language makes the needed rank known: the bottleneck must vanish at r = k + 1 (k "
            "planted dimensions plus the bias). sbjax finds the knee at r = "
            f"{kn if kn is not None else 'none'}, and the trained losses "
            + ("follow the exact floor: this agrees with the theory and with the paper's claim "
               "that the head rank, not the model, limits the loss."
               if agree else "do not meet every check above, so this run does not confirm it "
                             "(see the table)."), ""]
  return "\n".join(lines)


# ------------------------------------------------------------------------------ CLI


def define_flags():
  from absl import flags  # noqa: PLC0415

  flags.DEFINE_string("out", "out/planted", "output directory")
  flags.DEFINE_enum("preset", "cpu", list(PRESETS), "quick | cpu | tpu")


def main(argv):
  del argv
  from absl import flags  # noqa: PLC0415

  out = Path(flags.FLAGS.out)
  run(out, flags.FLAGS.preset)
  print(json.dumps({"out": str(out), **summarize(out)}))


if __name__ == "__main__":
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  define_flags()
  common.run(main)
