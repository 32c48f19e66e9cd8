"""The one override path (sbjax/overrides.py): dotted keys on a Config for the CLI, the sweep
and the experiments, checked against the Config built by hand."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sbjax import configs, overrides
from sbjax.cli import common
from sbjax.config import Config

ROOT = Path(__file__).resolve().parents[2]


def test_apply_equals_the_config_built_by_hand():
  base = Config.from_dict(configs.get("tiny"))
  got = overrides.apply(base, {"model.d_model": 64, "train.lr": 1e-3, "name": "x"})
  want = dataclasses.replace(base, model=dataclasses.replace(base.model, d_model=64),
                             train=dataclasses.replace(base.train, lr=1e-3), name="x")
  assert got == want
  assert overrides.config_from("tiny", {"model.d_model": 64, "train.lr": 1e-3, "name": "x"}) == want
  assert overrides.apply(base, {}) == base and overrides.apply(base.to_dict(), None) == base


@pytest.mark.parametrize("key, hint", [
    ("train.stepz", "did you mean 'train.steps'?"),
    ("trian.steps", "did you mean 'train.steps'?"),
    ("model.d_model.x", "did you mean 'model.d_model'?"),
    ("lr", "did you mean 'train.lr'?"),
    ("qqqq", "keys are section.field"),
])
def test_unknown_key_is_one_line_with_the_nearest_key(key, hint):
  with pytest.raises(ValueError) as e:
    overrides.config_from("tiny", {key: 1})
  msg = str(e.value)
  assert msg.startswith(f"invalid config key {key!r}; ") and hint in msg and "\n" not in msg


def test_a_bad_value_of_a_known_key_keeps_the_config_error():
  with pytest.raises(ValueError, match="train.steps=-3") as e:
    overrides.config_from("tiny", {"train.steps": -3})
  assert "invalid config key" not in str(e.value)


def test_parse_assignment_types_values_like_the_field():
  cfg = overrides.config_from("tiny")
  assert overrides.parse_assignment("train.steps=50", cfg) == ("train.steps", 50)
  assert overrides.parse_assignment("train.lr=3e-4", cfg) == ("train.lr", 3e-4)
  assert overrides.parse_assignment("train.ckpt_log_spaced=false", cfg) == (
      "train.ckpt_log_spaced", False)
  assert overrides.parse_assignment("data.source=text", cfg) == ("data.source", "text")
  with pytest.raises(ValueError, match="expected KEY=VALUE"):
    overrides.parse_assignment("train.steps", cfg)
  with pytest.raises(ValueError, match=r"train.steps='many'"):
    overrides.parse_assignment("train.steps=many", cfg)


def test_dotted_flags_reach_the_repeatable_override_flag():
  argv = ["prog", "--config=tiny", "--config.train.steps=5", "--config.model.d_model", "64",
          "--data.source=text", "--workdir=w"]
  assert common.dotted_flags(argv, "config", "config_override") == [
      "prog", "--config=tiny", "--config_override=train.steps=5",
      "--config_override=model.d_model=64", "--data.source=text", "--workdir=w"]


@pytest.mark.e2e  # starts a CLI process (the e2e layer; tests/conftest.py)
def test_train_cli_unknown_key_is_one_line_before_any_work(tmp_path):
  r = subprocess.run([sys.executable, "-m", "experiments.train", "--config=tiny",
                      f"--workdir={tmp_path / 'w'}", "--config.train.stepz=5"], cwd=ROOT,
                     capture_output=True, text=True, timeout=120,
                     env=dict(os.environ, JAX_PLATFORMS="cpu"))
  errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
  assert r.returncode == 2 and errors == [
      "error: invalid config key 'train.stepz'; did you mean 'train.steps'?"], r.stderr[-2000:]
  assert "Traceback" not in r.stderr and not (tmp_path / "w").exists()
