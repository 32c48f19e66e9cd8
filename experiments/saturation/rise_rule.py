"""The decision rule of the planted arms' width order (Godey et al. 2024, G1, G3, G4), fixed in
code before the runs it reads: ``RiseRule`` holds its constants, ``decide`` maps the arms' rows
of ``planted_arms.csv`` to a verdict with its reason, ``rule_text`` states it (the report's).
An arm rises when its rise R exceeds its null level (``rise.null_level``); a cell (one width d
and λ, its seeds) rises when more than half of its seeds rise."""

from __future__ import annotations

import dataclasses
import math

from sbjax.studies.stats import spearman_test


@dataclasses.dataclass(frozen=True)
class RiseRule:
  null_quantile: float = 0.95  # an arm rises when R > this quantile of its null
  n_perm: int = 2000  # null curves per arm
  block: int = 5  # checkpoints per moving mean and permuted block (cpu-e1: 41 after 30%, 9
  # blocks; 1,250 steps, 9% of training: a rise must last longer to be told from noise)
  alpha: float = 0.05  # the order: two-sided permutation p of Spearman(d, R)
  min_widths: int = 3  # the order needs at least this many widths
  order_perms: int = 50_000  # pairings for that p (exact for n ≤ 8)
  kl_jump: float = 1.0  # coincide: centred KL, peak − start of the rise, in nats


def _cells(arms: list[dict]) -> dict:
  """{(d, λ): [above-null flags of its seeds]}."""
  out: dict = {}
  for a in arms:
    out.setdefault((int(a["d"]), float(a["weight_decay"])), []).append(bool(a["rise_above_null"]))
  return out


def decide(arms: list[dict], rule: RiseRule, ref_weight_decay: float) -> dict:
  """The verdict (``rule_text``) from rows with d, weight_decay, rise, rise_above_null and
  kl_centred_jump (one language, one dtype)."""
  ref = [a for a in arms if float(a["weight_decay"]) == ref_weight_decay]
  cells = _cells(arms)
  rises = {k: sum(v) > len(v) / 2 for k, v in cells.items()}
  widths = sorted({int(a["d"]) for a in ref})
  rho, p = (spearman_test([a["d"] for a in ref], [a["rise"] for a in ref], rule.order_perms)
            if len(widths) >= rule.min_widths else (math.nan, math.nan))
  ordered = math.isfinite(p) and p <= rule.alpha
  falls, grows = ordered and rho < 0, ordered and rho > 0
  rising = [a for a in ref if a["rise_above_null"]]
  coincide = bool(rising) and all(a["kl_centred_jump"] >= rule.kl_jump for a in rising)
  both = [d for d in widths if any(k[0] == d and k[1] < ref_weight_decay for k in cells)]
  needs_gamma = bool(both) and all(
      rises[d, ref_weight_decay] and not any(f for k, v in cells.items()
                                             if k[0] == d and k[1] < ref_weight_decay for f in v)
      for d in both)
  n_up = sum(bool(a["rise_above_null"]) for a in arms)
  order = (f"Spearman ρ(d, R) = {rho:+.3f} (n = {len(ref)} arms, {len(widths)} widths, "
           f"permutation p = {p:.4f})" if math.isfinite(rho) else
           f"no order ({len(widths)} width(s) at λ {ref_weight_decay:g}, the rule needs "
           f"{rule.min_widths})" if len(widths) < rule.min_widths else
           f"no order (ρ undefined over n = {len(ref)} arms: the rises are all equal)")
  facts = (f"{n_up} of {len(arms)} arms rise above their null level; {order}; "
           f"{len(rising)} rising arm(s) at λ {ref_weight_decay:g}, coincide with a centred-KL "
           f"jump ≥ {rule.kl_jump:g}: {'yes' if coincide else 'no'}; needs Γ of λ "
           f"{ref_weight_decay:g} (widths {both or 'none'}): {'yes' if needs_gamma else 'no'}")
  support, optimiser = falls and coincide, grows or needs_gamma
  verdict = ("refutes" if n_up == 0 else "undecided" if support == optimiser
             else "supports" if support else "optimiser")
  return {"verdict": verdict, "reason": facts, "n_above": n_up, "n_arms": len(arms),
          "rho": rho, "p": p, "n": len(ref), "widths": widths, "falls": falls, "grows": grows,
          "coincide": coincide, "needs_gamma": needs_gamma}


def rule_text(rule: RiseRule, after: float, ref_weight_decay: float) -> str:
  """The rule in one paragraph, with its constants."""
  r, lam = rule, f"{ref_weight_decay:g}"
  return (f"Rule (fixed before the runs): an arm rises when its rise R exceeds the "
          f"{r.null_quantile:.0%} quantile of its null ({r.n_perm} curves: the non-increasing "
          f"fit after {after:.0%} of training plus the noise around a moving mean over "
          f"{r.block} checkpoints, permuted in blocks of {r.block}; a rise shorter than a block "
          f"is not told from noise); a cell (d, λ) rises when more than half of its seeds do. "
          f"Over the arms at λ {lam}, the rises fall (grow) with width when Spearman ρ(d, R) "
          f"< 0 (> 0) with a two-sided permutation p ≤ {r.alpha:g} over ≥ {r.min_widths} "
          f"widths; they coincide with a spectrum jump when every rising arm's centred "
          f"KL(σ‖u) gains ≥ {r.kl_jump:g} nats from the rise's start to its peak; the rise "
          f"needs the Γ of λ {lam} when, at every width with arms at both λ, the λ {lam} cell "
          f"rises and no arm at the lower λ does. Verdict: refutes (no arm rises: the "
          f"refutation extends to this language), supports (they fall with width and "
          f"coincide: Godey's mechanism), optimiser (they grow with width or need that Γ: "
          f"the optimiser's rise, not the bottleneck's), undecided (neither or both).")
