"""An analysis of a run with damaged checkpoints: each damaged step is named, set aside (in
WORKDIR/checkpoints_bad, as a resumed training run sets it aside), the other steps are
analysed and metrics.json lists the ones set aside; the analysis fails, writing nothing, only
when no step is left."""

import json
import logging
import shutil

import pytest

from sbjax import checkpoint as ckpt
from sbjax.analysis import Settings, analyze_run, read_csv
from tests._damage import MANIFEST, flip_one_byte, largest_data_file

# orbax leaves un-awaited read coroutines behind when a restore of a damaged step fails
pytestmark = [pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
              pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")]

SMALL = dict(eval_sequences=8, cka_sequences=8, anisotropy_tokens=0, collapse_sequences=8,
             batch_sequences=8, group_size=3, progress=False, figures=False, use_cache=False)


def test_damaged_steps_are_named_set_aside_and_the_others_analysed(tiny_run, tmp_path, caplog):
  wd = tmp_path / "run"
  shutil.copytree(tiny_run, wd)
  for s in ckpt.list_steps(wd):
    if s not in (8, 16, 24):
      shutil.rmtree(wd / "checkpoints" / str(s))
  flip_one_byte(largest_data_file(wd / "checkpoints" / "16"))
  final = wd / "checkpoints" / "24"  # the CKA reference: truncated, in a step without a
  (final / MANIFEST).unlink(missing_ok=True)  # manifest (found by the read, not the checksums)
  f = largest_data_file(final)
  f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
  with caplog.at_level(logging.WARNING, logger="sbjax"):
    rows = analyze_run(wd, Settings(out_dir=str(tmp_path / "out"), **SMALL))
  assert [r["step"] for r in rows] == [8] == [r["step"] for r in read_csv(tmp_path / "out" /
                                                                          "metrics.csv")]
  assert abs(rows[0]["cka_to_final_mlp_0"] - 1.0) < 1e-5  # against the newest good step
  for bad in (16, 24):
    assert any(f"checkpoint step {bad} in {wd} is bad" in r.getMessage() and "moved it aside"
               in r.getMessage() for r in caplog.records), bad
  moved = sorted((wd / "checkpoints_bad").iterdir())
  assert [p.name.split("_")[0] for p in moved] == ["16", "24"] and ckpt.list_steps(wd) == [8]
  meta = json.loads((tmp_path / "out" / "metrics.json").read_text())
  assert sorted(d["step"] for d in meta["set_aside"]) == [16, 24] and meta["final_step"] == 8
  assert {d["moved_to"] for d in meta["set_aside"]} == {str(p) for p in moved}
  flip_one_byte(largest_data_file(wd / "checkpoints" / "8"))
  with pytest.raises(ckpt.CorruptCheckpointError, match=rf"no checkpoint of {wd} could be "
                     r"analysed: step\(s\) \[8\] are damaged .*checksum mismatch"):
    analyze_run(wd, Settings(out_dir=str(tmp_path / "none"), **SMALL))
  assert not (tmp_path / "none" / "metrics.csv").exists()
