"""vocab_threshold's accelerator preset (issue 32): it trains on the shipped token files
(per V a folder of train/val uint16 files and the tokenizer, benchmarks/build_device_tokens.py),
not on TFDS or a text corpus; its test-size twin runs end to end here on token files built from
generated text, report included: r* against the rank-d head of protocol (a), characters per
token through the shipped tokenizer, and what the corpus can and cannot show. The protocol-(a)
heads of every rank and head lr are one padded population per V, on the trunk's best
validation checkpoint; the run prints its time estimate and, over its budget, stops with exit
status 75, reports the V that finished (which did not, how to resume, no fit over them) and
resumes when rerun."""

import csv
import importlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments import vocab_threshold as vt
from experiments.vocab_threshold.head_lrs import head_lr_rows
from experiments.vocab_threshold.report import report_section, write_section
from experiments.vocab_threshold.tolerance import stream_chars_per_token
from sbjax.data.tokenizer import Tokenizer
from sbjax.train import read_metrics
from tests._corpus import generated_docs, write_corpus

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import build_device_tokens as bdt  # noqa: E402


def test_gpu_preset_is_the_issues_sweep_on_token_files(tmp_path):
  p = vt.PRESETS["gpu"]
  o, k = p.overrides, p.knobs
  assert o["data.source"] == "tokens" and (o["model.d_model"], o["model.n_layers"]) == (512, 6)
  assert k.vocabs == (1024, 2048, 4096, 8192) and k.plan.protocols == ("a",)
  assert k.plan.ranks == (16, 32, 48, 64, 96, 128, 192, 256, 384, 512)
  assert k.plan.head_lrs == (1e-2, 3e-2)
  assert k.head_population and k.trunk == "best" and k.estimate_at == 200
  assert 0 < k.budget_s <= 480 and o["train.ckpt_every"] == o["train.eval_every"] < 1200
  with pytest.raises(ValueError, match="this preset trains on token files, none given; "
                     "build them on a CPU with benchmarks/build_device_tokens.py"):
    vt.run(tmp_path / "o", "gpu", data="")
  with pytest.raises(FileNotFoundError, match=r"V1024/train.uint16.bin is missing; .*"
                     r"V in 1024, 2048, 4096, 8192\)"):
    vt.run(tmp_path / "o", "gpu", data=str(tmp_path))


def _stopped_then_resumed(capfd, out, data):
  """The twin stopped by its budget once V=96 has finished: the budget's clock (run's ``now``)
  reads 0 s until V=96's row is in vocab_threshold.csv, then 1 s past the budget, so the stop
  comes at V=128's start check on every path (exit status 75). The report of what finished
  is checked on that real output (``_check_partial``); the same command with the real clock
  then resumes after V=96 and finishes."""
  k = vt.PRESETS["gpu-test"].knobs
  past = lambda: k.budget_s + 1.0 if (out / "vocab_threshold.csv").exists() else 0.0  # noqa: E731
  with pytest.raises(SystemExit) as e:
    vt.run(out, "gpu-test", data=data, verbose=False, now=past)
  assert e.value.code == 75
  err = capfd.readouterr().err
  assert "estimate: run V96/full-dense-lr0.003: 6 steps" in err
  assert "estimate: run V96/a-lowrank-pad4: 4 steps" in err
  assert re.search(r"stopped: run V128/full-dense-lr0\.003 needs ~0 s, -1 s of the 3600 s "
                   r"budget are left: stopped before it", err), err
  _check_partial(out)
  vt.run(out, "gpu-test", data=data, verbose=False)
  err = capfd.readouterr().err
  assert "V96/" not in err  # finished: read back, not trained or timed again
  assert "estimate: run V128/full-dense-lr0.003: 6 steps" in err
  assert "estimate: run V128/a-lowrank-pad4: 4 steps" in err


def _check_partial(out):
  """After the stop: the section (as device_science.sh writes it) covers V=96 only, says in
  words that the run stopped at its budget, that V=128 did not run and how to resume, and
  claims no fit over V (one V; no fit.json)."""
  meta = json.loads((out / "vocab_threshold_meta.json").read_text())
  assert meta["vocabs"] == [96, 128] and meta["not_run"] == [128]
  assert meta["stopped"].startswith("run V128/full-dense-lr0.003 needs ~0 s")
  assert not (out / "fit.json").exists()
  md = write_section(out).read_text()
  assert md.startswith("## vocab_threshold\n\n**The run stopped at its time budget (3600 s)**: "
                       "run V128/full-dense-lr0.003 needs")
  assert ("V finished: 96; not run: 128. The table, the figure and the fit below cover the "
          "finished V only") in md
  assert "Rerun the same command with the same --out to resume" in md
  assert "No fit of r* against V: it needs two V or more, and 1 finished." in md
  assert "beta =" not in md and "constant threshold" not in md and "| 96 | 4 |" in md
  assert "| 128 |" not in md and "whether r\\*_lr is flat in V is not known" in md
  assert "the same at every V" not in md and (out / "fig_vocab_threshold.png").exists()


def _check_heads_and_trunk(out, v, k):
  """One population of the 4 padded heads, on the trunk's best validation checkpoint."""
  plan = json.loads((out / f"V{v}" / "plan.json").read_text())
  evals = {r["step"]: r["eval_loss"] for r in read_metrics(out / f"V{v}" / "runs" /
                                                           plan["full_run"]) if "eval_loss" in r}
  best = min((s for s in evals if s in (3, 6)), key=lambda s: (evals[s], s))
  assert plan["trunk"] == "best" and (plan["trunk_step"], plan["trunk_eval_loss"]) == (
      best, evals[best])
  with open(out / f"V{v}" / "head_rank.csv") as f:
    heads = [r for r in csv.DictReader(f) if r["protocol"] == "a"]
  assert sorted(r["run"] for r in heads) == [f"a-lowrank-pad4/member_{j}" for j in range(4)]
  assert {(int(r["rank"]), float(r["lr"])) for r in heads} == {
      (r, lr) for r in k.plan.ranks for lr in k.plan.head_lrs}


def test_twin_end_to_end(tmp_path, capfd):
  corpus = write_corpus(tmp_path / "corpus", generated_docs(3, 10))
  k = vt.PRESETS["gpu-test"].knobs
  bdt.build(corpus, tmp_path / "tok", k.vocabs, log=lambda s: None)
  out = tmp_path / "out"
  _stopped_then_resumed(capfd, out, str(tmp_path / "tok"))
  with open(out / "vocab_threshold.csv") as f:
    table = list(csv.DictReader(f))
  assert [int(t["V"]) for t in table] == list(k.vocabs)
  for t in table:
    v, d = int(t["V"]), int(t["d_model"])
    assert t["reference"] == "a-r=d" and int(t["r_star"]) in k.plan.ranks
    assert d == max(k.plan.ranks)  # the reference head's rank r = d is the largest rank
    tr = np.fromfile(tmp_path / "tok" / f"V{v}" / "train.uint16.bin", np.uint16)
    assert int(t["train_tokens"]) == tr.size
    assert int(t["types_under_50"]) == int((np.bincount(tr, minlength=v) < 50).sum())
    va = np.fromfile(tmp_path / "tok" / f"V{v}" / "val.uint16.bin", np.uint16)
    tok = Tokenizer(tmp_path / "tok" / f"V{v}" / "tokenizer.model")
    assert float(t["chars_per_token"]) == pytest.approx(stream_chars_per_token(tok.decode, va))
    plan = json.loads((out / f"V{v}" / "plan.json").read_text())
    assert plan["vocab_size"] == v
    _check_heads_and_trunk(out, v, k)
  md = report_section(out, "vt")
  assert md.startswith("## vocab_threshold\n\n![rank vs V]") and "| a-r=d |" in md
  assert json.loads((out / "vocab_threshold_meta.json").read_text())["not_run"] == []
  assert "stopped" not in md and "Partial" not in md and "constant threshold" in md
  assert "types seen fewer than 50 times in training" in md and "none at the papers' V" in md
  assert "best validation checkpoint (V = 96: step " in md and "one population of padded" in md
  assert (out / "fig_vocab_threshold.png").exists()
  with open(out / "runs.csv") as f:  # issue 33: both head lrs side by side, per V
    lr_rows = head_lr_rows(list(csv.DictReader(f)), table)
  assert {(r["V"], r["lr"]) for r in lr_rows} == {(v, lr) for v in k.vocabs
                                                   for lr in k.plan.head_lrs}
  assert "at each head lr, side by side" in md
  for r in lr_rows:
    rs = "–" if r["r_star"] is None else str(r["r_star"])
    assert f"| {r['V']} | {r['lr']:g} | " in md and f" | {rs} | " in md
  vt_run = importlib.import_module("experiments.vocab_threshold.run")
  assert vt_run.uses_tokens("gpu-test") and not vt_run.uses_tokens("test")
