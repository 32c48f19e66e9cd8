"""The reading of the scaling fit (Godey et al. 2024, Fig. 1b: the small models lie above the
scaling law of the larger ones), generated from the CSV rows of ``measure`` only.

The law L = A / N^alpha + E is fitted on the final eval losses of the widths >= fit_min_width,
once with N counted without the head (non-embedding parameters, ``n_nonembedding``, the fit
``final``) and once with the head's parameters (``n_with_head``, the fit ``final_with_head``).
For each count, the widths below the fitted range are judged by the 95% CI of their gap
100 (L - L_fit(N)) / L_fit(N) (``gap_<fit>_ci_lo``/``hi``):

  supported  every small width's CI lies above 0 and its gap exceeds the misfit,
  refuted    every small width's CI lies below 0 and its gap is below -misfit,
  undecided  otherwise (a CI spans 0, a gap within the misfit, or the small widths
             disagree), or no fit / no CI,

where misfit = the largest |gap| of the widths in the fit: the law's own residual on the points
it was fitted to. The CI holds evaluation noise only; with one seed per width the fitted
widths' scatter about the law is the measure of the rest (seed, recipe), so a gap inside it is
not told from it.

The claim is supported (refuted) when both counts support (refute) it; when the counts
disagree it is undecided, and the paragraph says it depends on how N is counted. The CI is a
paired bootstrap over the fixed validation windows (the law refitted each draw): evaluation
noise only, not seed variance (one seed per width); the scope sentence says so.
"""

from __future__ import annotations

import math

CLAIM = "the small widths lie above the scaling law fitted on the larger ones (Fig. 1b)"
# (fit_on, N column, how N is counted)
COUNTS = (("final", "n_nonembedding", "N without the head (non-embedding parameters)"),
          ("final_with_head", "n_with_head", "N with the head's parameters"))


def gap_verdict(lo: list[float], hi: list[float], gaps: list[float] | None = None,
                misfit: float = 0.0) -> str:
  """'supported' when every CI lies above 0 (and every gap above ``misfit``), 'refuted' when
  every CI lies below 0 (and every gap below -``misfit``), else 'undecided' (also with no CI
  or a NaN bound)."""
  gaps = list(lo) if gaps is None else list(gaps)
  if not lo or not all(math.isfinite(x) for x in [*lo, *hi, *gaps, misfit]):
    return "undecided"
  if min(lo) > 0 and min(gaps) > misfit:
    return "supported"
  return "refuted" if max(hi) < 0 and max(gaps) < -misfit else "undecided"


def count_reading(rows: list[dict], fit: dict | None, fit_on: str, how: str) -> tuple[str, str]:
  """(verdict, sentence) of one N count: the fit and each small width's gap with its CI."""
  small = [r for r in rows if not r["in_fit"]]
  if not small:
    return "undecided", (f"With {how}: every width is in the fit, so no width lies below the "
                         "fitted range.")
  if fit is None or not math.isfinite(fit["alpha"]):
    n = int(fit["n_points"]) if fit is not None else 0
    return "undecided", (f"With {how}: no fit ({n} widths in the fit; the law has three "
                         "parameters and needs at least 3), so no gap is measured.")
  lo = [r.get(f"gap_{fit_on}_ci_lo", math.nan) for r in small]
  hi = [r.get(f"gap_{fit_on}_ci_hi", math.nan) for r in small]
  fitted = [r for r in rows if r["in_fit"]]
  worst = max(fitted, key=lambda r: abs(r[f"gap_{fit_on}_pct"]))
  misfit = abs(worst[f"gap_{fit_on}_pct"])
  v = gap_verdict(lo, hi, [r[f"gap_{fit_on}_pct"] for r in small], misfit)
  gaps = ", ".join(f"d={int(r['width'])} {r[f'gap_{fit_on}_pct']:+.2f}% [{a:+.2f}, {b:+.2f}]"
                   for r, a, b in zip(small, lo, hi))
  n = int(fit["n_points"])
  text = (f"With {how}, the law fitted on widths {fit['widths']} ({n} points, {n - 3} residual "
          f"degrees of freedom) is L = {fit['A']:.4g} / N^{fit['alpha']:.4f} + {fit['E']:.4f} "
          f"(rmse {fit['rmse']:.2g} nats); the gaps of the smaller widths, with 95% CIs, are "
          f"{gaps}, against the law's largest residual on the fitted widths, "
          f"{misfit:.2f}% (d={int(worst['width'])}): {v}.")
  return v, text


def overall(verdicts: dict[str, str]) -> str:
  """The claim's verdict from the verdicts of the two counts."""
  vs = set(verdicts.values())
  if len(vs) == 1:
    return vs.pop()
  return ("undecided: it depends on how N is counted (" +
          ", ".join(f"{k}: {v}" for k, v in verdicts.items()) + ")")


def scope(rows: list[dict], meta: dict) -> str:
  """What the verdict covers: the models, data, recipe and what the CI resamples."""
  widths = ", ".join(str(int(r["width"])) for r in rows)
  plural = "s" if len(rows) > 1 else ""
  text = (f"Scope: {len(rows)} width{plural} (d = {widths}) of {int(rows[0]['n_layers'])}-layer "
          "models, "
          f"V = {int(rows[0]['vocab_size'])}, {int(rows[0]['steps'])} steps")
  o, k, d = meta.get("overrides", {}), meta.get("knobs", {}), meta.get("data", {})
  if o and k and d:
    tokens = o["train.steps"] * o["train.batch_size"] * o["train.seq_len"]
    text += (f" at lr {o['train.lr']:g} (batch {o['train.batch_size']} × "
             f"{o['train.seq_len']} tokens: {tokens:,} tokens per run, {d['epochs']:.2f} "
             f"epochs of {d['train_tokens']:,} training tokens), one seed per width; the CI "
             f"resamples the {k['eval_sequences']} fixed validation windows ({k['n_boot']} "
             "draws, the law refitted each draw), so it covers evaluation noise, not seed "
             "variance")
  else:
    text += ", one seed per width; the CI covers evaluation noise, not seed variance"
  return text + (". The paper's gap is for Pythia models trained on the Pile for ~300B tokens; "
                 "a verdict here speaks for this scale only.")


def scaling_paragraph(rows: list[dict], fits: dict[str, dict], meta: dict) -> str:
  """The generated paragraph: one sentence per N count, the verdict, the scope."""
  verdicts, sentences = {}, []
  for fit_on, _, how in COUNTS:
    v, s = count_reading(rows, fits.get(fit_on), fit_on, how)
    verdicts["without the head" if fit_on == "final" else "with the head"] = v
    sentences.append(s)
  head = f"**Scaling fit (Godey et al. Fig. 1b).** Claim: {CLAIM}."
  verdict = f"Verdict: {overall(verdicts)}."
  return " ".join([head, *sentences, verdict, scope(rows, meta)])
