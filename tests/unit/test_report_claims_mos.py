"""The generated MoS paragraphs (issue 33 item 5) against their CSV rows, both ways: the
planted cells (experiments.planted.mos_cells_report: each arm's lr chosen on the selection
stream, the Welch verdicts at matched parameters and matched FLOPs) and the text arm
(experiments.mos_text.report), from constructed rows (no training). A paragraph that ignored
its numbers would fail one of the directions."""

import numpy as np
import pytest
from scipy import stats

from experiments.mos_text import report as text_report
from experiments.planted import mos_cells_report
from experiments.planted.mix_stats import arms
from experiments.planted.mos_cells import cell_summary

H = 2.0
LRS = (0.03, 0.1, 0.3)
SEEDS = range(5)
META = {"settings": {"mix_seeds": list(SEEDS), "mix_lrs": list(LRS), "select_batches": 8,
                     "measure_batches": 8, "n_layers": 1, "seq_len": 32,
                     "mix": {"train.steps": 200, "train.batch_size": 8}},
        "languages": {"mos": {"kind": "planted_mos", "vocab": 256, "rank": 4, "n_mix": 8,
                              "entropy_nats": H}}}
RUNS = {"mos": ("mos", 0, 16, 2912, 44032), "lowrank": ("lowrank", 11, 0, 2992, 5984),
        "mos-flops": ("mos", 0, 2, 364, 5504)}


def cell_rows(gap, obj="sampled", sel_shift=None):
  """Rows of one cell: gap(run, lr, seed) on the reported stream; the selection stream's gap
  is the reported one plus sel_shift(run, lr) (default 0)."""
  rows = []
  for run, (head, rank, n_mix, params, flops) in RUNS.items():
    for lr in LRS:
      for s in SEEDS:
        g = gap(run, lr, s)
        sg = g + (sel_shift(run, lr) if sel_shift else 0.0)
        rows.append({"label": f"mos-{obj}-{run}-lr{lr:g}-s{s}", "arm": f"mos-{obj}-{run}",
                     "seed": s, "lr": lr, "head": head, "d_model": 16, "rank": rank,
                     "n_mix": n_mix, "head_params": params, "eval_loss": H + g + 0.1,
                     "eval_acc": 0.3, "expected_loss": H + g,
                     "floor": H + 0.04 if head == "lowrank" else float("nan"), "H": H,
                     "gap": g, "floor_gap": 0.04 if head == "lowrank" else float("nan"),
                     "lang": "mos", "objective": obj, "run": run, "head_flops": flops,
                     "sel_eval_loss": H + sg + 0.1, "sel_expected_loss": H + sg, "sel_gap": sg})
  return rows


def noise(s):
  return 0.002 * (s - 2)


def test_lr_is_chosen_on_the_selection_stream():
  # reported stream: lr 0.3 best for every arm; selection stream: lr 0.03 best
  rows = cell_rows(lambda run, lr, s: 0.1 - 0.1 * lr + noise(s),
                   sel_shift=lambda run, lr: 0.2 * lr)
  a = {x["arm"]: x for x in arms(rows)}
  assert {x["lr"] for x in a.values()} == {0.03}
  assert all(x["selected_on"] == "selection" for x in a.values())
  mos = a["mos-sampled-mos"]
  assert mos["mean"] == pytest.approx(np.mean([0.1 - 0.003 + noise(s) for s in SEEDS]))
  table = "\n".join(mos_cells_report.table(rows))
  assert "| mos | sampled | mos | mos | 2912 | 44032 | 0.03 |" in table
  # 0.03 is an end of the grid, and the lowrank head ends far above its floor gap (0.04)
  text = "\n".join(mos_cells_report.paragraph(rows, META))
  assert "Chosen lr at an end of the grid: mos (0.03), lowrank (0.03), mos-flops (0.03)" in text
  assert "stop short of the heads' limits" in text


@pytest.mark.parametrize("mos_gap,want", [(0.01, "supported"), (0.08, "refuted"),
                                          (0.0405, "undecided")])
def test_planted_paragraph_both_ways(mos_gap, want):
  spread = {"supported": 0.001, "refuted": 0.001, "undecided": 0.01}[want]
  base = {"mos": mos_gap, "lowrank": 0.04, "mos-flops": 0.04}

  def gap(run, lr, s):
    return base[run] + (0.0 if lr == 0.1 else 0.02) + spread * (s - 2)
  rows = cell_rows(gap)
  s = cell_summary(rows)
  g = {run: [base[run] + spread * (x - 2) for x in SEEDS] for run in base}
  lo, hi = stats.ttest_ind(g["lowrank"], g["mos"], equal_var=False).confidence_interval(0.95)
  assert s["params"]["verdict"] == want
  assert (s["params"]["lo"], s["params"]["hi"]) == pytest.approx((lo, hi), abs=1e-12)
  text = "\n".join(mos_cells_report.paragraph(rows, META))
  assert f"**{want}**" in text and f"[{lo:.4f}, {hi:.4f}]" in text
  assert f"− H = {np.mean(g['mos']):.4f} against lowrank r = 11" in text
  assert "With sampled targets" in text and "rank ≈ V − 1" in text
  assert "200 steps at batch 8 × 32" in text and "lrs 0.03, 0.1, 0.3" in text
  # every arm is best at lr 0.1, inside the grid; the lowrank head ends at its floor gap
  assert "end of the grid" not in text and "reach that head's limit" in text
  # mos-flops equals lowrank on average: its comparison is undecided whatever MoS does
  assert s["flops"]["verdict"] == "undecided"


def text_rows(losses):
  spec = {"dense": ("dense", 0, 0, 32768, 65536), "mos": ("mos", 0, 2, 17506, 67712),
          "lowrank": ("lowrank", 17, 0, 17952, 35904)}
  return [{"arm": a, "head": spec[a][0], "seed": s, "lr": 0.01, "d_model": 32, "vocab": 1024,
           "rank": spec[a][1], "n_mix": spec[a][2], "head_params": spec[a][3],
           "head_flops": spec[a][4], "n_params": 0, "steps": 200, "eval_loss": v,
           "eval_acc": 0.2, "seconds": 1.0}
          for a, vs in losses.items() for s, v in enumerate(vs)]


@pytest.mark.parametrize("mos,want", [((4.0, 4.01, 3.99), "supported"),
                                      ((4.6, 4.61, 4.59), "refuted"),
                                      ((4.2, 4.5, 4.3), "undecided")])
def test_text_paragraph_both_ways(mos, want):
  low = (4.3, 4.31, 4.29)
  rows = text_rows({"dense": (4.25, 4.26, 4.24), "mos": mos, "lowrank": low})
  meta = {"corpus": "x/shakespeare", "data": {"vocab_size": 1024}, "seeds": [0, 1, 2],
          "settings": {"steps": 200, "batch": 8, "seq_len": 64, "lr": 0.01, "n_layers": 2,
                       "eval_batches": 16}}
  text = text_report.paragraph(rows, meta)
  lo, hi = stats.ttest_ind(low, mos, equal_var=False).confidence_interval(0.95)
  assert text_report.comparisons(rows)["params"]["verdict"] == want
  assert "(r = 17)" in text and f"[{lo:.4f}, {hi:.4f}]" in text
  first = text.split("the dense head")[0]
  assert f"**{want}**" in first
  assert f"{np.mean(mos):.4f} nats/token" in text and "200 steps at batch 8 × 64" in text
  assert "the same 16 validation batches" in text
