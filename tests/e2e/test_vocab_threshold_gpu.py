"""vocab_threshold's accelerator preset (issue 32): it trains on the shipped token files
(per V a folder of train/val uint16 files and the tokenizer, benchmarks/build_device_tokens.py),
not on TFDS or a text corpus; its test-size twin runs end to end here on token files built from
generated text, report included: r* against the rank-d head of protocol (a), characters per
token through the shipped tokenizer, and what the corpus can and cannot show. The protocol-(a)
heads of every rank and head lr are one padded population per V, on the trunk's best
validation checkpoint; the run prints its time estimate and, over its budget, stops with exit
status 75, reports the V that finished (which did not, how to resume, no fit over them) and
resumes when rerun, keeping every call's record (its stop, times and estimates) in the meta's
``runs``. A stop before any V finished still reports: no table, figure or fit, the estimates,
the V not run and how to resume."""

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
  first = _check_partial(out)
  vt.run(out, "gpu-test", data=data, verbose=False)
  err = capfd.readouterr().err
  assert "V96/" not in err  # finished: read back, not trained or timed again
  assert "estimate: run V128/full-dense-lr0.003: 6 steps" in err
  assert "estimate: run V128/a-lowrank-pad4: 4 steps" in err
  # the rerun's record is appended to the first call's, which is kept whole (its stop, times,
  # estimates); the top level describes the latest call
  meta = json.loads((out / "vocab_threshold_meta.json").read_text())
  assert len(meta["runs"]) == 2 and meta["runs"][0] == first["runs"][0]
  assert meta["runs"][1] == {k: meta[k] for k in _vt_run().CALL_KEYS}
  assert meta["stopped"] is None and meta["not_run"] == [] and meta["trained"] == [128]
  assert sorted(meta["estimates"]) == ["V128/a-lowrank-pad4", "V128/full-dense-lr0.003"]
  assert first["runs"][0]["ended"] <= meta["runs"][1]["started"]  # ISO UTC: in call order
  return first["stopped"]


def _vt_run():
  return importlib.import_module("experiments.vocab_threshold.run")


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
  assert "written by" not in md  # one call so far
  (rec,) = meta["runs"]  # this call's record: V=96 trained in it, the stop and its estimates
  assert rec == {k: meta[k] for k in _vt_run().CALL_KEYS} and rec["trained"] == [96]
  assert rec["stopped"] == meta["stopped"] and rec["not_run"] == [128]
  assert sorted(rec["estimates"]) == ["V96/a-lowrank-pad4", "V96/full-dense-lr0.003"]
  assert all(e["steps"] in (4, 6) and e["s_per_step"] >= 0 for e in rec["estimates"].values())
  return meta


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


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
  """The twin's token files (V 96 and 128), built once from generated text."""
  tmp = tmp_path_factory.mktemp("vt_tokens")
  corpus = write_corpus(tmp / "corpus", generated_docs(3, 10))
  bdt.build(corpus, tmp / "tok", vt.PRESETS["gpu-test"].knobs.vocabs, log=lambda s: None)
  return tmp / "tok"


def _ticking(step: float):
  """A budget clock that reads 0 s, then ``step`` s more at every reading."""
  t = [-step]

  def now() -> float:
    t[0] += step
    return t[0]

  return now


def test_stop_before_any_v_finished_still_reports(tmp_path, tok, capfd):
  """The clock advances 1000 s per reading: V=96's trunk passes its start check, then its
  estimate projects an end past the 3600 s budget and it stops (exit status 75) with no V
  finished. The section (as device_science.sh writes it whenever the meta exists) says so,
  gives the recorded estimate, names the V not run and the command that resumes."""
  out = tmp_path / "out"
  with pytest.raises(SystemExit) as e:
    vt.run(out, "gpu-test", data=str(tok), verbose=False, now=_ticking(1000.0))
  assert e.value.code == 75
  assert re.search(r"stopped: run V96/full-dense-lr0\.003 would end at ~\d+ s, past the 3600 s "
                   "budget", capfd.readouterr().err)
  meta = json.loads((out / "vocab_threshold_meta.json").read_text())
  assert meta["not_run"] == [96, 128] and meta["trained"] == []
  assert meta["stopped"].startswith("run V96/full-dense-lr0.003 would end at ~")
  (rec,) = meta["runs"]
  assert rec == {k: meta[k] for k in _vt_run().CALL_KEYS}
  (name, est), = rec["estimates"].items()
  assert name == "V96/full-dense-lr0.003" and est["steps"] == 6
  assert est["projected_end_s"] > meta["budget_s"]  # what stopped it
  assert not (out / "vocab_threshold.csv").exists() and not (out / "fit.json").exists()
  md = write_section(out).read_text()
  assert md.startswith("## vocab_threshold\n\n**The run stopped at its time budget (3600 s) "
                       f"before any V finished**: {meta['stopped']}. Not run: 96, 128. There "
                       "is no table, figure or fit")
  assert (f"run V96/full-dense-lr0.003: {est['s_per_step']:.4g} s/step over its 6 steps, "
          f"projected to end ~{est['projected_end_s']:g} s into the call") in md
  assert ("Rerun the same command with the same --out to resume (here `python -m "
          f"experiments.vocab_threshold --preset=gpu-test --data={tok} --out=<this folder>`") in md
  assert "![" not in md and "beta" not in md and "| 96 |" not in md
  assert not (out / "fig_vocab_threshold.png").exists()


def test_twin_end_to_end(tmp_path, tok, capfd):
  k = vt.PRESETS["gpu-test"].knobs
  out = tmp_path / "out"
  stop = _stopped_then_resumed(capfd, out, str(tok))
  with open(out / "vocab_threshold.csv") as f:
    table = list(csv.DictReader(f))
  assert [int(t["V"]) for t in table] == list(k.vocabs)
  for t in table:
    v, d = int(t["V"]), int(t["d_model"])
    assert t["reference"] == "a-r=d" and int(t["r_star"]) in k.plan.ranks
    assert d == max(k.plan.ranks)  # the reference head's rank r = d is the largest rank
    tr = np.fromfile(tok / f"V{v}" / "train.uint16.bin", np.uint16)
    assert int(t["train_tokens"]) == tr.size
    assert int(t["types_under_50"]) == int((np.bincount(tr, minlength=v) < 50).sum())
    va = np.fromfile(tok / f"V{v}" / "val.uint16.bin", np.uint16)
    tz = Tokenizer(tok / f"V{v}" / "tokenizer.model")
    assert float(t["chars_per_token"]) == pytest.approx(stream_chars_per_token(tz.decode, va))
    plan = json.loads((out / f"V{v}" / "plan.json").read_text())
    assert plan["vocab_size"] == v
    _check_heads_and_trunk(out, v, k)
  md = report_section(out, "vt")
  assert md.startswith("## vocab_threshold\n\n![rank vs V]") and "| a-r=d |" in md
  assert json.loads((out / "vocab_threshold_meta.json").read_text())["not_run"] == []
  body, calls = md.split("\n\nThis folder was written by 2 calls of the command: call 1 (")
  assert "stopped" not in body and "Partial" not in body and "constant threshold" in body
  assert (f"training finished: 96): stopped by the budget ({stop}); call 2 (" in calls
          and "training finished: 128): ran to its end." in calls)
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
  assert _vt_run().uses_tokens("gpu-test") and not _vt_run().uses_tokens("test")
