"""The reading of the planted arms: which of Godey et al.'s claims the data support, which they
do not reproduce on this language (the claims concern Pythia on the Pile, so a null here is
not a contradiction of the paper), and what the arms (width × Γ × precision) imply about
cause. Every sentence is built from planted_arms.csv and planted_checkpoints.csv rows;
nothing is hard-coded.

Per arm, from its checkpoints (T = training steps, ``after`` = the preset's 0.3):

* ``late_fall``: E[loss] at the first checkpoint ≥ 0.7·T minus the final E[loss] (> 0: the
  loss is still falling over the last 30%, the opposite of saturation);
* ``kl_rise_<raw|centred>``: the rise statistic (``sbjax.studies.rise.rise_statistic``) of the
  head's KL(σ‖u) after ``after``·T: the largest increase over its running minimum;
* ``max_anisotropy``: the largest last-layer anisotropy after ``after``·T.
"""

from __future__ import annotations

import numpy as np

from ..shared import fmt
from sbjax.studies import rise as rise_lib

SMALL_D = 16  # Godey et al.'s saturating models have small heads; here d ≤ 16 (a preset's
# knobs may say otherwise: ``small_d``, e.g. 32 for the device preset's widths 32, 128, 512)
# the claims concern Pythia on the Pile: a planted language that does not show them does not
# contradict the paper, it does not reproduce it
NOT_REPRODUCED = "Not reproduced on this language (the paper's claims concern Pythia on the Pile)"


def arm_trajectory(arm: dict, ck: list[dict], after: float) -> dict:
  """late_fall, kl_rise_raw, kl_rise_centred, max_anisotropy of one arm (module doc)."""
  steps = np.array([r["step"] for r in ck])
  total = int(arm["steps"])
  loss = np.array([r["expected_loss"] for r in ck], float)
  i70 = int(np.nonzero(steps >= 0.7 * total)[0][0])
  out = {"late_fall": float(loss[i70] - loss[-1]),
         "max_anisotropy": float(np.max([r["anisotropy_last"] for r in ck if
                                         r["step"] >= after * total]))}
  for kind in ("raw", "centred"):
    kl = np.array([r[f"kl_{kind}"] for r in ck], float)
    out[f"kl_rise_{kind}"] = float(rise_lib.rise_statistic(steps, kl, total, after))
  return out


def ref_dtype(arms: list[dict]) -> str:
  """The compute dtype the claims are read at: float32 when any arm has it (a reduced-precision
  arm is then a contrast), else the arms' most common dtype (an all-bfloat16 preset)."""
  dts = [a.get("dtype") or "float32" for a in arms]
  return "float32" if "float32" in dts or not dts else max(set(dts), key=dts.count)


def _names(arms) -> str:
  return ", ".join(a["arm"] for a in arms) or "none"


def _claims(arms: list[dict], tr: dict, k: dict) -> tuple[list[str], list[str], list[str]]:
  """(supported, not reproduced on this language, untested) claim sentences."""
  ref = ref_dtype(arms)
  fp32 = [a for a in arms if (a.get("dtype") or "float32") == ref]
  small_d = int(k.get("small_d", SMALL_D))
  small = [a for a in fp32 if a["d"] <= small_d]
  big = [a for a in fp32 if a["d"] > small_d]
  yes = lambda xs: [a for a in xs if a["rise_verdict"] == "yes"]  # noqa: E731
  no = lambda xs: [a for a in xs if a["rise_verdict"] == "no"]  # noqa: E731
  sup, con, unt = [], [], []
  falls = [tr[a["arm"]]["late_fall"] for a in arms]
  c1 = "small models saturate (their loss rises late in training)"
  if small and len(yes(small)) == len(small):
    sup.append(f"{c1}: every arm with d ≤ {small_d} rises ({_names(small)})")
  elif small and len(no(small)) == len(small):
    con.append(f"{c1}: no arm with d ≤ {small_d} rises (every rise CI is below "
               f"{k['threshold']} nats), and the expected loss of every arm still falls by "
               f"{fmt(min(falls), 3)}–{fmt(max(falls), 3)} nats over the last 30% of training")
  else:
    verdicts = ", ".join(f"{a['arm']} {a['rise_verdict']}" for a in small)
    unt.append(f"{c1}: the small arms disagree or are inconclusive ({verdicts})")
  kl_max = max(max(tr[a["arm"]]["kl_rise_raw"], tr[a["arm"]]["kl_rise_centred"]) for a in arms)
  an_max = max(tr[a["arm"]]["max_anisotropy"] for a in arms)
  c2 = "saturation comes with a head-spectrum collapse (KL(σ‖u) jumps)"
  if yes(arms) and all(a["coincidence"] == "yes" for a in yes(arms)):
    sup.append(f"{c2} and an anisotropic last layer: every rising arm shows both within ±1 "
               "checkpoint")
  elif kl_max < k["kl_jump"]:
    con.append(f"{c2}: no arm's KL (raw or centred) rises by more than {fmt(kl_max, 3)} nats "
               f"after {k['after']:.0%} of training, against a jump of ≥ {k['kl_jump']} nat")
  else:
    unt.append(f"{c2}: KL rises by up to {fmt(kl_max, 3)} nats, but not with a loss rise in "
               "every arm")
  c3 = "the last layer of a saturating model becomes anisotropic"
  if an_max < k["anisotropy_level"]:
    con.append(f"{c3}: the largest last-layer anisotropy after {k['after']:.0%} of training is "
               f"{fmt(an_max, 3)}, against ≥ {k['anisotropy_level']}")
  elif not yes(arms):
    unt.append(f"{c3}: anisotropy reaches {fmt(an_max, 3)} but no arm saturates")
  c4 = "larger models do not saturate"
  if big and not yes(big):
    (sup if yes(small) else unt).append(
        f"{c4}: no arm with d > {small_d} rises" + ("" if yes(small) else
                                                    " (but neither does any small one, so "
                                                    "this does not separate them)"))
  elif big:
    con.append(f"{c4}: {_names(yes(big))} rise(s)")
  order = sorted(fp32, key=lambda a: a["floor"])
  gaps = [a["gap_to_floor"] for a in arms]
  spread = max(a["floor"] for a in arms) - min(a["floor"] for a in arms)
  c5 = "a low-rank head costs loss (the softmax bottleneck sets the level)"
  if len({a["floor"] for a in fp32}) < 2:
    unt.append(f"{c5}: the arms share one width")
  elif all(x["final_expected_loss"] <= y["final_expected_loss"] + 1e-9 or x["floor"] == y["floor"]
         for x, y in zip(order, order[1:])) and max(gaps) < spread:
    sup.append(f"{c5}: the final losses are ordered by floor(d), and every arm ends "
               f"{fmt(min(gaps), 3)}–{fmt(max(gaps), 3)} nats above its own floor while the "
               f"floors span {fmt(spread, 3)} nats")
  else:
    con.append(f"{c5}: the final losses are not ordered by floor(d), or the gaps to the "
               f"floor ({fmt(min(gaps), 3)}–{fmt(max(gaps), 3)}) exceed the floors' spread")
  return sup, con, unt


def _pairs(arms: list[dict]) -> list[str]:
  """The arms' contrasts: Γ at fixed d, width at fixed Γ, precision at fixed (d, Γ)."""
  out = []
  ref = ref_dtype(arms)
  by = {(int(a["d"]), a["weight_decay"], a.get("dtype") or "float32"): a for a in arms}

  def diff(a, b, what):
    return (f"{what} ({a['arm']} vs {b['arm']}): rise {a['rise_verdict']} vs "
            f"{b['rise_verdict']} ({fmt(a['rise'], 3)} vs {fmt(b['rise'], 3)} nats), final "
            f"E[loss] {fmt(a['final_expected_loss'], 4)} vs {fmt(b['final_expected_loss'], 4)}")
  lams = sorted({a["weight_decay"] for a in arms}, reverse=True)
  ds = sorted({int(a["d"]) for a in arms})
  for d in ds:
    if len(lams) > 1 and (d, lams[0], ref) in by and (d, lams[-1], ref) in by:
      hi, lo = by[(d, lams[0], ref)], by[(d, lams[-1], ref)]
      out.append(diff(hi, lo, f"Γ {fmt(hi['gamma_total'], 3)} vs {fmt(lo['gamma_total'], 3)} "
                               f"at d = {d}"))
  for lam in lams:
    if (ds[0], lam, ref) in by and (ds[-1], lam, ref) in by and ds[0] != ds[-1]:
      a, b = by[(ds[0], lam, ref)], by[(ds[-1], lam, ref)]
      out.append(diff(a, b, f"width {ds[0]} vs {ds[-1]} at Γ {fmt(a['gamma_total'], 3)}"))
  for a in arms:
    twin = by.get((int(a["d"]), a["weight_decay"], ref))
    if (a.get("dtype") or "float32") != ref and twin is not None:
      out.append(diff(a, twin, f"{a['dtype']} vs {ref} compute"))
  return out


CAUSE = {
    "width": "the rise follows the width, not Γ: the head's rank is the cause on this language",
    "gamma": "the rise follows Γ = λΣη, not the width: the optimisation (weight decay), not "
             "the head's rank, is the cause on this language",
    "neither": "neither Γ (at fixed width) nor width (at fixed Γ) produces a late rise: on "
               "this language the head's rank sets the level of the loss through floor(d), "
               "not its trajectory, and Γ up to {gmax} (Pythia-14m's whole run: 7.9) does not "
               "cause saturation by itself",
    "both": "width and Γ change together in the rising arms, so these arms cannot tell them "
            "apart",
    "mixed": "the rises follow neither width nor Γ alone",
    "inconclusive": "at least one rise CI straddles the threshold, so no cause is assigned",
}


def reading(arms: list[dict], ck_by_arm: dict, knobs: dict, account: str) -> str:
  """The report's reading paragraph (module doc)."""
  tr = {a["arm"]: arm_trajectory(a, ck_by_arm[a["arm"]], knobs["after"]) for a in arms}
  sup, con, unt = _claims(arms, tr, knobs)
  parts = ["**Reading.** Godey et al. (2024) report that small language models saturate late "
           "in training: the loss rises, the head's singular-value distribution collapses and "
           "the last layer turns anisotropic, while larger models do not saturate."]
  parts.append("Supported here: " + ("; ".join(sup) if sup else "none of these claims") + ".")
  parts.append(f"{NOT_REPRODUCED}: " + ("; ".join(con) if con else "none") + ".")
  if unt:
    parts.append("Not decided by these arms: " + "; ".join(unt) + ".")
  pairs = _pairs(arms)
  if pairs:
    parts.append("The arms: " + "; ".join(pairs) + ".")
  gmax = fmt(max(a["gamma_total"] for a in arms), 3)
  parts.append(f"Cause: {CAUSE[account].format(gmax=gmax)}." if pairs else
               "Cause: these arms hold no width or Γ contrast, so they say nothing about "
               "cause.")
  return " ".join(parts)
