"""The collapse experiment's accelerator presets (issue 32): gpu (24 data-order seeds of
L2-d256, V 1024) and gpu-grid (L {1,2,4} x d {64..512}) train on shipped token files, not
TFDS; the grid's test-size twin runs end to end here on generated token files, report
included (the seed twin: tests/e2e/test_device_science.py, through the device script)."""

import csv
import json

import numpy as np
import pytest

from experiments import collapse
from experiments.collapse.run import groups
from tests._corpus import chain_tokens


def test_the_device_presets_train_on_token_files(tmp_path):
  gpu, grid = collapse.get_preset("gpu"), collapse.get_preset("gpu-grid")
  for p in (gpu, grid):
    o = p.overrides
    assert o["data.source"] == "tokens" and o["data.options.vocab_size"] == 1024
    assert not o.get("data.options.name") and max(p.knobs.epochs) == 3
  [(name, kind, n_layers, d, members, epochs)] = groups(gpu)  # one population, no grid
  assert (kind, n_layers, d, len(members)) == ("seeds", 2, 256, 24)
  assert len({m.data_seed for m in members}) == 24
  shapes = [(g[2], g[3]) for g in groups(grid)]
  assert sorted(shapes) == sorted((L, d) for L in (1, 2, 4) for d in (64, 128, 256, 512))
  assert all(g[1] == "grid" for g in groups(grid))
  collapse.validate(gpu), collapse.validate(grid)  # every config builds
  with pytest.raises(ValueError, match="this preset trains on token files"):
    collapse.run(tmp_path, "gpu", data=None)


def test_grid_twin_end_to_end(tmp_path):
  v = collapse.get_preset("gpu-grid-test").overrides["data.options.vocab_size"]
  tr = chain_tokens(tmp_path / "train.uint16.bin", 4096, v, 1)
  chain_tokens(tmp_path / "val.uint16.bin", 1024, v, 2)
  out = tmp_path / "out"
  collapse.run(out, "gpu-grid-test", data=f"{tmp_path / 'train.uint16.bin'},"
               f"{tmp_path / 'val.uint16.bin'}", verbose=False)
  with open(out / "collapse_models.csv") as f:
    rows = list(csv.DictReader(f))
  assert {r["kind"] for r in rows} == {"grid"} and not (out / "collapse_seeds.csv").exists()
  assert len({r["run"] for r in rows}) == 3  # L1-d8 x λ {0, 0.05, 0.1}
  meta = json.loads((out / "collapse_meta.json").read_text())
  assert meta["vocab_size"] == v and meta["train_tokens"] == 1024  # the twin's epoch budget
  assert meta["tokenizer"] is None
  first = {r["run"]: float(r["val_loss"]) for r in rows if r["epochs"] == "1"}
  for r in rows:
    if r["epochs"] == "3":  # two more epochs lower every run's loss
      assert float(r["val_loss"]) < first[r["run"]]
  counts = np.bincount(tr[:1025], minlength=v)
  with open(out / "collapse_tokens.csv") as f:
    tok = list(csv.DictReader(f))
  top = [int(r["token_id"]) for r in tok[:-1]]
  assert counts[top[0]] == max(counts[t] for t in top)  # most frequent first
  md = collapse.report_section(out, "c")
  assert md.startswith("## Linguistic collapse") and "3 grid runs, 6 snapshots" in md
  assert "preset `gpu-grid-test`" in md and (out / "fig_collapse_vs_loss.png").exists()
