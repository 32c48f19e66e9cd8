"""sbjax.overrides: a mistaken config key is one line that names the fix."""

import pytest

from sbjax import configs, overrides


@pytest.mark.parametrize("key, said", [
    ("train.stepz", "did you mean 'train.steps'?"),
    # no field of train is near: the fields of train, not the nearest full key ('train.b2')
    ("train.bogus", "the fields of train are: async_checkpoint, b1, b2,"),
    ("lr", "did you mean 'train.lr'?"),  # a field without its section
    ("model.head_rank", "did you mean 'model.head'?"),  # a flat key of earlier versions
    ("model.head.rank", "the fields of model.head are: kind"),
    ("qqqq", "keys are section.field"),
])
def test_a_config_key_mistake_is_one_line_with_the_fix(key, said):
  with pytest.raises(ValueError) as e:
    overrides.apply(configs.get("tiny"), {key: 3})
  msg = str(e.value)
  assert "\n" not in msg and msg.startswith(f"invalid config key {key!r}; {said}"), msg
