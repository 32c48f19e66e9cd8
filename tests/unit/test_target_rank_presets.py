"""target_rank's presets and pure pieces (no tokenizer, no counts)."""

import pytest

from experiments import target_rank as tr
from experiments.shared import write_rows


def test_tpu_preset_configs_validate(tmp_path):
  p = tr.get_preset("tpu")
  for v in p.knobs.vocab_sizes:
    dc = tr.data_config(p, v, tmp_path, None)
    assert dc.source == "tfds" and dc.options.vocab_size == v and dc.options.name == "lm1b"
  assert tr.data_config(p, 8192, tmp_path, "other_ds").options.name == "other_ds"
  assert tr.dims_for(p, 10**6)[-1] == p.knobs.max_d
  with pytest.raises(FileNotFoundError, match="--data=DIR"):
    tr.data_config(tr.get_preset("cpu"), 512, tmp_path, str(tmp_path / "missing"))
  with pytest.raises(ValueError, match="unknown target_rank preset 'huge'"):
    tr.get_preset("huge")


def test_presets_and_part_keys():
  assert list(tr.PRESETS) == ["test", "quick", "cpu", "tpu"]
  t, q = tr.PRESETS["test"], tr.PRESETS["quick"]
  assert len(t.knobs.vocab_sizes) * len(t.knobs.ns) < len(q.knobs.vocab_sizes) * len(q.knobs.ns)
  assert 2 in t.knobs.ns  # the e2e test recomputes the n = 2 curve
  assert tr.dims_for(q, 100) == [1, 2, 4, 8, 16, 32, 64, 100]
  # a part's key covers what changes its rows, not the report's d_ref or the V/n lists
  assert tr.part_key(q, 64, 1, "c") == tr.part_key(q, 64, 1, "c")
  assert tr.part_key(q, 64, 1, "c") != tr.part_key(q, 64, 2, "c")
  assert tr.part_key(q, 64, 1, "c") != tr.part_key(q, 64, 1, "d")
  assert tr.part_key(q, 64, 1, "c") != tr.part_key(tr.PRESETS["cpu"], 64, 1, "c")


def test_read_table_keeps_integer_columns(tmp_path):
  rows = [{"variant": "raw", "n": 1, "V": 64, "d": 2, "w_error": 1.0, "C": 10, "nnz": 12,
           "method": "gram", "min_count": 3, "k": 0.1}]
  write_rows(tmp_path / "t.csv", rows)
  got = tr.read_table(tmp_path / "t.csv")
  assert got == rows and all(type(got[0][c]) is int for c in ("n", "V", "d", "C", "nnz"))
  assert type(got[0]["w_error"]) is float
