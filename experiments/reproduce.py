r"""The main job: a head-rank sweep on the planted-rank language, with a report.

  python -m experiments.reproduce --out=out --quick

Trains one model per head rank r on the planted language (V=256, planted rank k=8),
whose exact entropy H is known, and writes OUT/report.md, OUT/head_rank.csv and
OUT/loss_vs_rank.png (validation loss vs r, with H). Numbers in the report are read
from the CSV. Without --quick the runs are longer and the rank grid denser.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import sys
from pathlib import Path

from absl import flags

from experiments import common
from sbjax import presets

OUT = flags.DEFINE_string("out", "out", "output directory")
QUICK = flags.DEFINE_bool("quick", True, "the short CPU version (<= 10 min on 2 cores)")


def _runs(quick: bool):
  base = presets.build(presets.load("planted"))
  ranks = [1, 2, 4, 8, 9, 16, 64] if quick else [1, 2, 3, 4, 6, 8, 9, 10, 12, 16, 32, 64]
  steps = 400 if quick else 2000
  for r in ranks:
    model = dataclasses.replace(base.model, head="lowrank", head_rank=r)
    train = dataclasses.replace(base.train, steps=steps, eval_every=steps, ckpt_every=steps,
                                ckpt_log_spaced=False, log_every=50)
    yield r, base.replace(model=model, train=train, name=f"planted-r{r}")


def main(argv):
  del argv
  from sbjax.data import make_dataset
  from sbjax.train import train

  out = Path(OUT.value)
  out.mkdir(parents=True, exist_ok=True)
  rows = []
  for r, cfg in _runs(QUICK.value):
    ds = make_dataset(cfg.data, seq_len=cfg.train.seq_len, global_batch_size=cfg.train.batch_size,
                      seed=cfg.train.data_seed, workdir=None)
    s = train(cfg, out / "runs" / f"r{r}", dataset=ds)
    rows.append({"rank": r, "eval_loss": s["eval_loss"], "eval_acc": s["eval_acc"],
                 "entropy": ds.planted.entropy, "planted_rank": cfg.data.planted_rank})
    with open(out / "head_rank.csv", "w", newline="") as f:
      w = csv.DictWriter(f, fieldnames=list(rows[0]))
      w.writeheader()
      w.writerows(rows)
  write_report(out)


def write_report(out: Path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  with open(out / "head_rank.csv") as f:
    rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
  h, k = rows[0]["entropy"], int(rows[0]["planted_rank"])
  fig, ax = plt.subplots(figsize=(5, 3.5))
  ax.plot([r["rank"] for r in rows], [r["eval_loss"] for r in rows], "o-", label="trained, rank-r head")
  ax.axhline(h, color="k", ls="--", label=f"planted entropy H={h:.3f}")
  ax.axvline(k + 1, color="gray", ls=":", label=f"k+1={k + 1}")
  ax.set_xscale("log", base=2)
  ax.set_xlabel("head rank r")
  ax.set_ylabel("validation loss (nats)")
  ax.legend()
  fig.tight_layout()
  fig.savefig(out / "loss_vs_rank.png", dpi=120)
  lines = ["# sbjax report: head rank on the planted-rank language", "",
           f"Planted rank k={k}; exact per-token entropy H={h:.4f} nats.", "",
           "![loss vs head rank](loss_vs_rank.png)", "",
           "| head rank r | val loss | val acc | loss - H |", "|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {int(r['rank'])} | {r['eval_loss']:.4f} | {r['eval_acc']:.4f} | "
                 f"{r['eval_loss'] - h:.4f} |")
  within = [int(r["rank"]) for r in rows if r["eval_loss"] - h < 0.05]
  knee = min(within) if within else None
  knee_txt = (str(knee) if knee is not None else
              "none (these runs are not trained to convergence; the gap at full rank is "
              f"{rows[-1]['eval_loss'] - h:.3f} nats)")
  lines += ["", f"Smallest rank within 0.05 nats of H: {knee_txt}. The theory predicts k+1={k + 1}: "
            "the planted logits have rank k plus one dimension for the Zipfian bias.",
            "Godey et al. (2024) report a smooth loss decrease in log r on real text; here the "
            "answer is known, so the knee can be checked exactly."]
  (out / "report.md").write_text("\n".join(lines) + "\n")
  print(json.dumps({"report": str(out / "report.md"), "knee": knee, "entropy": h}))


if __name__ == "__main__":
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  common.run(main)
