"""Analysis of a run with a damaged checkpoint (issue 34): the damaged step is named, set
aside (as a resumed training run sets it aside: WORKDIR/checkpoints_bad), the other steps
are analysed, metrics.json lists it; the analysis fails only when no step is left."""

import json
import logging
import shutil

import pytest

from sbjax import checkpoint as ckpt
from sbjax.analysis import Settings, analyze_run, read_csv
from tests._damage import MANIFEST, flip_one_byte
from tests._damage import largest_data_file as _largest_data_file

# orbax leaves un-awaited read coroutines behind when a restore of a damaged step fails
pytestmark = [pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
              pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")]

KEEP = [8, 16, 24]
SMALL = dict(eval_sequences=8, cka_sequences=8, anisotropy_tokens=0, collapse_sequences=8,
             batch_sequences=8, group_size=3, progress=False, figures=False, use_cache=False)


def _three_steps(tiny_run, tmp_path):
  """A copy of the shared tiny run holding only the checkpoints 8, 16 and 24."""
  wd = tmp_path / "run"
  shutil.copytree(tiny_run, wd)
  for s in ckpt.list_steps(wd):
    if s not in KEEP:
      shutil.rmtree(wd / "checkpoints" / str(s))
  assert ckpt.list_steps(wd) == KEEP
  return wd


def flipped_byte(step_dir):
  flip_one_byte(_largest_data_file(step_dir))


def truncated_unsealed(step_dir):
  """A truncated array file in a step without a manifest (written before manifests): found
  by the read itself, not by the checksums."""
  (step_dir / MANIFEST).unlink(missing_ok=True)  # (missing: steps of earlier versions)
  f = _largest_data_file(step_dir)
  f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


@pytest.mark.parametrize("damage,bad", [(flipped_byte, 16), (truncated_unsealed, 24)],
                         ids=["flipped_byte_step16", "truncated_final_step24"])
def test_damaged_step_is_named_set_aside_and_the_others_analysed(damage, bad, tiny_run,
                                                                 tmp_path, caplog):
  wd = _three_steps(tiny_run, tmp_path)
  damage(wd / "checkpoints" / str(bad))
  out = tmp_path / "out"
  with caplog.at_level(logging.WARNING, logger="sbjax"):
    rows = analyze_run(wd, Settings(out_dir=str(out), **SMALL))
  good = [s for s in KEEP if s != bad]
  assert [r["step"] for r in rows] == good
  assert [int(r["step"]) for r in read_csv(out / "metrics.csv")] == good
  msgs = [r.getMessage() for r in caplog.records]
  assert any(f"checkpoint step {bad} in {wd} is bad" in m and "moved it aside" in m
             for m in msgs), msgs
  moved = list((wd / "checkpoints_bad").iterdir())
  assert len(moved) == 1 and moved[0].name.startswith(f"{bad}_")
  assert ckpt.list_steps(wd) == good
  meta = json.loads((out / "metrics.json").read_text())
  assert [d["step"] for d in meta["set_aside"]] == [bad]
  assert meta["set_aside"][0]["moved_to"] == str(moved[0])
  # CKA to the final checkpoint is taken against the newest good step
  last = [r for r in rows if r["step"] == good[-1]][0]
  assert abs(last["cka_to_final_mlp_0"] - 1.0) < 1e-5
  assert meta["final_step"] == good[-1]


def test_no_good_step_left_fails_and_writes_nothing(tiny_run, tmp_path):
  wd = _three_steps(tiny_run, tmp_path)
  for s in KEEP:
    flipped_byte(wd / "checkpoints" / str(s))
  out = tmp_path / "out"
  with pytest.raises(ckpt.CorruptCheckpointError,
                     match=rf"no checkpoint of {wd} could be analysed: step\(s\) \[8, 16, 24\] "
                           r"are damaged .*checksum mismatch"):
    analyze_run(wd, Settings(out_dir=str(out), **SMALL))
  assert not (out / "metrics.csv").exists() and not (out / "metrics.json").exists()
  assert len(list((wd / "checkpoints_bad").iterdir())) == 3
