"""The replicates of the planted arms (issue 33): the same arm (language, d, λ, dtype) trained
from several seeds (train.seed = train.data_seed = the seed: another init and another order of
the same fresh train tokens; the language and its validation windows stay fixed). Read only
from planted_arms.csv rows (``seed``, ``vocab``, ``zipf`` columns; rows without them are seed 0
of the preset's language).

Per arm group g with seeds s = 1..n and rises r_s (each with its paired-bootstrap CI over the
validation windows and its pre-registered verdict: "yes" when the CI's lower end is ≥ the
threshold, "no" when its upper end is below it, else "inconclusive"):

* ``n_rise`` = #{s : verdict_s = "yes"}; the claim "this arm rises late" is **supported** when
  every seed rises, **refuted** when no seed rises and every verdict is "no", else
  **undecided**;
* the seed spread: mean r̄ = Σ r_s / n, SD = sqrt(Σ (r_s − r̄)² / (n − 1)) and the t interval
  r̄ ± t_{0.975, n−1} · SD / √n (n ≥ 2): the variance between trained runs, which no single
  run's bootstrap CI contains;
* ``half`` = the mean over seeds of (ci_hi − ci_lo) / 2: the evaluation noise of one run.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from ..shared import fmt


def _key(a: dict, lang: dict) -> tuple:
  """(vocab, zipf, d, λ, dtype) of an arm; a row without vocab/zipf is the preset's language."""
  return (int(a.get("vocab") or lang["vocab"]), float(a.get("zipf") or lang.get("zipf", 1.0)),
          int(a["d"]), float(a["weight_decay"]), a.get("dtype") or "float32")


def groups(arms: list[dict], lang: dict) -> dict:
  """{(vocab, zipf, d, λ, dtype): [rows sorted by seed]} in the CSV's order of first seen."""
  out = {}
  for a in arms:
    out.setdefault(_key(a, lang), []).append(a)
  return {k: sorted(v, key=lambda a: int(a.get("seed") or 0)) for k, v in out.items()}


def seed_stats(rows: list[dict]) -> dict:
  """n, n_rise, n_no, n_clear0 (CI lower end > 0), mean, sd, t_lo, t_hi, half, verdict of
  one group's seeds (module doc)."""
  r = np.array([float(a["rise"]) for a in rows])
  v = [a["rise_verdict"] for a in rows]
  n = len(r)
  sd = float(np.std(r, ddof=1)) if n > 1 else float("nan")
  t = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n) if n > 1 else float("nan")
  n_rise, n_no = v.count("yes"), v.count("no")
  verdict = "supported" if n_rise == n else "refuted" if n_no == n else "undecided"
  return {"n": n, "n_rise": n_rise, "n_no": n_no, "rises": " / ".join(fmt(x, 3) for x in r),
          "seeds": "/".join(str(int(a.get("seed") or 0)) for a in rows),
          "n_clear0": sum(float(a["rise_ci_lo"]) > 0 for a in rows), "mean": float(r.mean()),
          "sd": sd, "t_lo": float(r.mean()) - t, "t_hi": float(r.mean()) + t,
          "half": float(np.mean([(float(a["rise_ci_hi"]) - float(a["rise_ci_lo"])) / 2
                                 for a in rows])), "verdict": verdict}


def _label(key: tuple) -> str:
  vocab, zipf, d, lam, dtype = key
  return (f"V {vocab}, Zipf {zipf:g}, d {d}, λ {lam:g}"
          + ("" if dtype == "float32" else f", {dtype}"))


def table(arms: list[dict], lang: dict) -> list[str]:
  """One row per arm and seed: rise [CI], verdict, final E[loss], floor(d) − H, gap to floor."""
  lines = ["| language, arm | seed | Γ_total | rise (nats) [95% CI] | rise? | final E[loss] | "
           "floor(d) − H | gap to floor |", "|" + "---|" * 8]
  for key, rows in groups(arms, lang).items():
    for a in rows:
      lines.append(
          f"| {_label(key)} | {int(a.get('seed') or 0)} | {fmt(a['gamma_total'], 3)} | "
          f"{fmt(a['rise'], 3)} [{fmt(a['rise_ci_lo'], 3)}, {fmt(a['rise_ci_hi'], 3)}] | "
          f"{a['rise_verdict']} | {fmt(a['final_expected_loss'])} | {fmt(a['floor_gap'], 3)} | "
          f"{fmt(a['gap_to_floor'], 3)} |")
  return lines


def _group_sentence(key: tuple, s: dict, threshold: float) -> str:
  head = (f"{_label(key)}: {s['n_rise']} of {s['n']} "
          f"{'seed rises' if s['n'] == 1 else 'seeds rise'} by ≥ {threshold:g} nats")
  if s["n"] == 1:
    one = {"supported": "a rise", "refuted": "no rise"}.get(s["verdict"], "undecided")
    return head + f" ({one} in its one seed, rise {fmt(s['mean'], 3)} nats; not replicated)"
  return (head + f" (rises {s['rises']} nats, seeds {s['seeds']}); mean rise {fmt(s['mean'], 3)} nats, SD across seeds {fmt(s['sd'], 3)}, "
          f"t interval over seeds [{fmt(s['t_lo'], 3)}, {fmt(s['t_hi'], 3)}]; the bootstrap CI "
          f"is ±{fmt(s['half'], 2)} nats on average; {s['n_clear0']} of {s['n']} CIs clear 0; "
          f"the late rise is **{s['verdict']}** for this arm")


def replicates_text(arms: list[dict], lang: dict, threshold: float) -> str:
  """The replicates paragraph: per arm group how many seeds rise, the seed spread against the
  bootstrap CI, the verdict and its scope (module doc)."""
  gs = groups(arms, lang)
  st = {k: seed_stats(v) for k, v in gs.items()}
  parts = [f"**Replicates.** Rise rule (pre-registered): an arm rises when the lower end of "
           f"its rise CI is ≥ {threshold:g} nats. " + "; ".join(
               _group_sentence(k, st[k], threshold) for k in gs) + "."]
  multi = [k for k in gs if st[k]["n"] > 1]
  if multi:
    verdicts = {st[k]["verdict"] for k in multi}
    scope = ", ".join(f"d {k[2]} (V {k[0]}, Zipf {k[1]:g}, Γ {fmt(gs[k][0]['gamma_total'], 2)})"
                      for k in multi)
    word = verdicts.pop() if len(verdicts) == 1 else "mixed across widths"
    parts.append(f"Verdict on the late rise over the replicated arms: **{word}**, in this "
                 f"scope only: this planted language, {scope}, "
                 f"{'/'.join(str(st[k]['n']) for k in multi)} seeds.")
  parts.append("The bootstrap CI of a rise resamples the validation windows of one trained "
               "run: it covers evaluation noise only. The spread across seeds (init and data "
               "order) is the other variance, and only the replicates measure it.")
  return " ".join(parts)
