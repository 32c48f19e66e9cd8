"""vocab_threshold's accelerator preset (issue 32): it trains on the shipped token files
(per V a folder of train/val uint16 files and the tokenizer, benchmarks/build_device_tokens.py),
not on TFDS or a text corpus; its test-size twin runs end to end here on token files built from
generated text, report included: r* against the rank-d head of protocol (a), characters per
token through the shipped tokenizer, and what the corpus can and cannot show."""

import csv
import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments import vocab_threshold as vt
from experiments.vocab_threshold.head_lrs import head_lr_rows
from experiments.vocab_threshold.report import report_section
from experiments.vocab_threshold.tolerance import stream_chars_per_token
from sbjax.data.tokenizer import Tokenizer
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
  with pytest.raises(ValueError, match="this preset trains on token files, none given; "
                     "build them on a CPU with benchmarks/build_device_tokens.py"):
    vt.run(tmp_path / "o", "gpu", data="")
  with pytest.raises(FileNotFoundError, match=r"V1024/train.uint16.bin is missing; .*"
                     r"V in 1024, 2048, 4096, 8192\)"):
    vt.run(tmp_path / "o", "gpu", data=str(tmp_path))


def test_twin_end_to_end(tmp_path):
  corpus = write_corpus(tmp_path / "corpus", generated_docs(3, 10))
  k = vt.PRESETS["gpu-test"].knobs
  bdt.build(corpus, tmp_path / "tok", k.vocabs, log=lambda s: None)
  out = tmp_path / "out"
  vt.run(out, "gpu-test", data=str(tmp_path / "tok"), verbose=False)
  with open(out / "vocab_threshold.csv") as f:
    table = list(csv.DictReader(f))
  assert [int(t["V"]) for t in table] == list(k.vocabs)
  for t in table:
    v, d = int(t["V"]), int(t["d_model"])
    assert t["reference"] == "a-r=d" and int(t["r_star"]) in k.plan.ranks
    tr = np.fromfile(tmp_path / "tok" / f"V{v}" / "train.uint16.bin", np.uint16)
    assert int(t["train_tokens"]) == tr.size
    assert int(t["types_under_50"]) == int((np.bincount(tr, minlength=v) < 50).sum())
    va = np.fromfile(tmp_path / "tok" / f"V{v}" / "val.uint16.bin", np.uint16)
    tok = Tokenizer(tmp_path / "tok" / f"V{v}" / "tokenizer.model")
    assert float(t["chars_per_token"]) == pytest.approx(stream_chars_per_token(tok.decode, va))
    plan = json.loads((out / f"V{v}" / "plan.json").read_text())
    assert plan["vocab_size"] == v
  md = report_section(out, "vt")
  assert md.startswith("## vocab_threshold") and "| a-r=d |" in md
  assert "types seen fewer than 50 times in training" in md and "none at the papers' V" in md
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
