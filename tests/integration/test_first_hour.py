"""What a new user hits in the first hour (issue 34): one-line errors for config key mistakes,
a clean stdout, result files that follow the umask, runs that say what data they train on,
``--from_hf=org/name`` found in the HF cache, plain report wording, the right last step."""

from __future__ import annotations

import pytest

from sbjax import configs, overrides


@pytest.mark.parametrize("key, said", [
    ("train.stepz", "did you mean 'train.steps'?"),
    # no field of train is near: the fields of train, not the nearest full key ('train.b2')
    ("train.bogus", "the fields of train are: async_checkpoint, b1, b2,"),
])
def test_config_key_mistake_is_one_line_with_the_fix(key, said):
  with pytest.raises(ValueError) as e:
    overrides.apply(configs.get("tiny"), {key: 3})
  msg = str(e.value)
  assert "\n" not in msg and msg.startswith(f"invalid config key {key!r}; {said}"), msg


def test_last_analysis_progress_line_names_the_last_step(tiny_run, tmp_path, capfd):
  """The CKA reference (the run's last step) is analysed first; the last progress line still
  names the last step analysed, not the last of the final group."""
  from sbjax import checkpoint as ckpt
  from sbjax.analysis import Settings, analyze_run

  steps = ckpt.list_steps(tiny_run)
  assert len(steps) >= 3, steps
  analyze_run(tiny_run, Settings(groups=("cka",), cka_sequences=4, eval_sequences=4,
                                 batch_sequences=4, group_size=2, progress=True,
                                 out_dir=str(tmp_path / "analysis"), figures=False,
                                 use_cache=False))
  lines = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("[analyze ")]
  assert lines[-1].startswith(f"[analyze run] {len(steps)}/{len(steps)} checkpoints "
                              f"(step {steps[-1]}),"), lines
