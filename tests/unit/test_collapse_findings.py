"""The collapse report's plain-language findings (experiments/collapse/findings.py) follow the
numbers of the tables: synthetic rows, no training (issue 19: say whether the corrected norm
CoV still correlates, and what the data support and contradict)."""

from experiments.collapse import findings as F


def _an(m, metric, r2, sign, verdict, n=12):
  return {"min_count": m, "metric": metric, "r2": r2, "sign": sign, "verdict": verdict,
          "n_runs": n}


def test_norm_cov_sentence_follows_r2_and_seed_p():
  an = [_an(1, "nc2_norm_cov", 0.9, "+", "disagrees"),
        _an(1, "nc2_norm_cov_corrected", 0.8, "+", "disagrees"),
        _an(20, "nc2_norm_cov", 0.7, "+", "disagrees"),
        _an(20, "nc2_norm_cov_corrected", 0.1, "-", "agrees (no relation)")]
  seeds = [{"min_count": 1, "metric": "nc2_norm_cov_corrected", "p_perm": 0.0123, "n": 16,
            "pearson_r": 0.6}]
  s = F.norm_cov_sentence(an, seeds)
  assert s.startswith("The bias-corrected norm CoV correlates strongly at some min_count only")
  assert "min_count 1: raw R² 0.90 (+), corrected R² 0.80 (+, strong), seed group p = 0.012" in s
  assert "min_count 20: raw R² 0.70 (+), corrected R² 0.10 (-, negligible)" in s
  weak = [dict(r, r2=0.2) for r in an]
  assert F.norm_cov_sentence(weak, []).startswith("The bias-corrected norm CoV no longer")
  strong = [dict(r, r2=0.95) for r in an]
  assert F.norm_cov_sentence(strong, []).startswith("The bias-corrected norm CoV still")


def test_anchor_counting_and_seed_sentences():
  an = [_an(1, "nc4_agreement", 0.7, "-", "agrees"),
        _an(1, "unc3_cos_cov", 0.6, "-", "disagrees (opposite sign)"),
        _an(1, "nc3_cos_mean", 0.9, "-", "no reference value")]
  s = F.anchor_sentence(an, 1)
  assert s == ("At min_count 1 (12 runs, one point per run) against the authors: agrees: "
               "nc4_agreement (R² 0.70, sign -); disagrees: unc3_cos_cov (R² 0.60, sign -).")
  r2 = [{"min_count": 1, "points": "last", "metric": "a", "pearson_r": 0.5},
        {"min_count": 1, "points": "all", "metric": "a", "pearson_r": -0.3},
        {"min_count": 1, "points": "last", "metric": "b", "pearson_r": 0.5},
        {"min_count": 1, "points": "all", "metric": "b", "pearson_r": 0.2}]
  assert F.counting_sentence(r2) == ("Counting every snapshot as a model flips the sign of r for "
                                     "a at min_count 1 (r +0.50 per run, -0.30 over snapshots).")
  assert "changes no sign" in F.counting_sentence(r2[2:])
  assert "changes no sign" in F.counting_sentence(r2, ("b",))
  # the per-shape seed test (r ≠ 0 by the Fisher interval): tests/unit/test_collapse_seed_shapes.py
  seeds = [{"min_count": 1, "metric": "a", "p_perm": 0.01, "pearson_r": 0.7, "n": 16,
            "ci_lo": 0.3, "ci_hi": 0.89},
           {"min_count": 1, "metric": "b", "p_perm": 0.2, "pearson_r": 0.3, "n": 16,
            "ci_lo": -0.2, "ci_hi": 0.68},
           {"min_count": 20, "metric": "a", "p_perm": 0.07, "pearson_r": 0.4, "n": 16,
            "ci_lo": -0.1, "ci_hi": 0.75}]
  assert F.seed_sentence(seeds, ("a", "b")) == (
      "Among 16 data-order seeds of each of 1 shape(s) (only the seed differs), is each "
      "metric's correlation with the loss different from 0 (95% Fisher-z interval of r; the "
      "permutation p beside)? one shape (16 seeds): min_count 1: r ≠ 0 for a (r +0.70 [+0.30, "
      "+0.89], p 0.010); not distinguishable from 0: b (r +0.30 [-0.20, +0.68], p 0.200); "
      "min_count 20: r ≠ 0 for none; not distinguishable from 0: a (r +0.40 [-0.10, +0.75], "
      "p 0.070). 1 of 3 intervals exclude 0, against about 0.1 expected by chance alone at 95% "
      "if no metric followed the loss among seeds (a rough count: the tests are not "
      "independent, e.g. a metric's raw and guarded or corrected forms).")


def test_ceiling_sentence_classifies_each_metric():
  ceil = [{"a": 1.0, "b": 0.5, "c": 2.0}, {"a": 1.2, "b": 0.5, "c": 2.0}]
  trained = [{"step": 10, "gap": 1.0, "a": 3.0, "b": 1.0, "c": 0.0},
             {"step": 10, "gap": 1.2, "a": 3.2, "b": 0.8, "c": 0.0},
             {"step": 99, "gap": 0.1, "a": 1.3, "b": 0.2, "c": 0.5},
             {"step": 99, "gap": 0.1, "a": 1.1, "b": 0.2, "c": 0.3}]
  s = F.ceiling_sentence(ceil, trained, ("a", "b", "c"))
  assert s.startswith("As the gap to H falls 1.1 → 0.1 nats (steps 10 → 99, mean over runs)")
  assert "approach the optimum: a (3.1 → 1.2; optimum 1–1.2)" in s
  assert "go past the optimum: b (0.9 → 0.2; optimum 0.5–0.5)" in s
  assert "stay far from the optimum: c (0 → 0.4; optimum 2–2)" in s
