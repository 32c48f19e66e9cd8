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
