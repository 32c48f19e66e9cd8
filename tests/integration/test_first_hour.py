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
    ("lr", "did you mean 'train.lr'?"),  # a field without its section
    ("model.head_rank", "did you mean 'model.head.rank'?"),  # a flat key of earlier versions
    ("model.head.rank", "the fields of model.head are: kind (model.head=KIND chooses others)"),
    ("qqqq", "keys are section.field"),
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


def test_from_hf_model_id_is_found_in_the_hf_cache(tmp_path, monkeypatch):
  """``--from_hf=org/name`` resolves in the hub cache that ``save_pretrained`` files were laid
  into (HF_HUB_CACHE, else HF_HOME/hub): the snapshot of refs/main, or the repository of a
  series; not there, one error naming where it looked. No network."""
  from sbjax.cli import hf_cache
  from sbjax.convert import hf_import
  from tests._hf_cache import tiny_neox, write_hf_cache

  saved = tmp_path / "saved"
  tiny_neox(saved, seed=0)
  monkeypatch.delenv("HF_HUB_CACHE", raising=False)
  monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
  with pytest.raises(FileNotFoundError) as e:
    hf_cache.resolve("EleutherAI/pythia-70m")
  looked = tmp_path / "home" / "hub" / "models--EleutherAI--pythia-70m"
  assert str(looked) in str(e.value) and "\n" not in str(e.value), e.value

  repo = write_hf_cache(tmp_path / "home" / "hub", "EleutherAI/pythia-70m", {"main": saved})
  got = hf_cache.resolve("EleutherAI/pythia-70m")
  assert got.startswith(str(repo / "snapshots")), got
  mc, _ = hf_import.import_hf(got)  # the snapshot is the saved model
  assert mc.vocab_size == 64 and hf_cache.model_name("EleutherAI/pythia-70m") == "pythia-70m"

  monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub2"))  # wins over HF_HOME
  series = write_hf_cache(tmp_path / "hub2", "EleutherAI/pythia-70m",
                          {"step0": saved, "step1000": saved})
  assert hf_cache.resolve("EleutherAI/pythia-70m") == str(series)
  assert hf_cache.resolve(str(saved)) == str(saved)  # a path is a path


def _cli(tmp_path, *args, env=None):
  import os
  import subprocess
  import sys
  from pathlib import Path

  root = Path(__file__).resolve().parents[2]
  return subprocess.run([sys.executable, "-m", *args], cwd=root, capture_output=True, text=True,
                        env={**os.environ, **(env or {})}, timeout=600)


@pytest.mark.e2e
def test_train_stdout_is_the_json_result_and_stderr_says_the_data(tmp_path):
  """A tiny run: stdout parses as JSON (TFDS's "Downloading and preparing" lines went to
  stderr), no absl "custom data configuration" warning, and one stderr line says the run
  trains on the planted language of --config=tiny and how to choose other data."""
  import json

  r = _cli(tmp_path, "experiments.train", "--config=tiny", "--config.train.steps=2",
           f"--workdir={tmp_path / 'run'}")
  assert r.returncode == 0, r.stderr[-3000:]
  summary = json.loads(r.stdout)
  assert summary["step"] == 2
  assert "Using custom data configuration" not in r.stderr, r.stderr[-3000:]
  notes = [ln for ln in r.stderr.splitlines() if ln.startswith("data: ")]
  assert len(notes) == 1 and "data.source=planted" in notes[0] and "synthetic" in notes[0] \
      and "--config.data.source=text" in notes[0], r.stderr[-3000:]


def test_the_data_note_only_when_the_data_was_not_chosen():
  from sbjax.cli.data_note import data_note

  cfg = configs.load("pythia-70m")
  note = data_note("pythia-70m", cfg, [])
  assert note.startswith("data: --config=pythia-70m trains on data.source=planted (") \
      and "\n" not in note, note
  assert data_note("pythia-70m", cfg, ["data.source"]) is None  # chosen on the command line
  assert data_note("pythia-70m", cfg, ["data.options.vocab"]) is None
  assert data_note("my_config.json", cfg, []) is None  # chosen in the user's own file
  assert data_note("pythia-70m", cfg, ["train.steps"]) == note


@pytest.mark.e2e
def test_convert_from_hf_model_id_not_in_the_cache_says_where_it_looked(tmp_path):
  r = _cli(tmp_path, "experiments.convert", "--from_hf=EleutherAI/pythia-70m",
           f"--to={tmp_path / 'w'}", env={"HF_HOME": str(tmp_path / "home"), "HF_HUB_CACHE": ""})
  assert r.returncode == 2, r.stderr[-3000:]
  err = [ln for ln in r.stderr.splitlines() if ln.strip()]
  assert len(err) == 1 and err[0].startswith("error: --from_hf=EleutherAI/pythia-70m: ") \
      and str(tmp_path / "home" / "hub" / "models--EleutherAI--pythia-70m") in err[0], err
  assert not (tmp_path / "w").exists()


def test_the_report_opens_in_plain_words(tmp_path):
  """The report's opening names its experiments, not an issue number."""
  import json

  from experiments.reproduce import write_report

  (tmp_path / "timings.json").write_text(json.dumps(
      {"planted": {"preset": "test", "status": "failed", "error": "x", "seconds": 1.0}}))
  text = write_report(tmp_path).read_text()
  assert "issue" not in text.lower(), text[:400]
  assert text.splitlines()[2].startswith("1 experiment(s): planted. Every number"), text[:400]


def test_expected_orbax_and_tfds_notes_are_not_logged(tiny_run, tmp_path, caplog):
  """With the filter the command-line entry points install (``lognotes.install``; importing
  sbjax installs nothing), a restore (orbax's read-only CheckpointManager) and a dataset made
  at run time (TFDS's custom builder config) log none of their expected notes; other warnings
  still pass."""
  import logging
  import shutil

  from absl import logging as absl_logging

  from sbjax import checkpoint as ckpt
  from sbjax import lognotes
  from sbjax.data import make_dataset
  from tests._tiny import tiny_run_config

  caplog.set_level(logging.INFO)
  lognotes.install()
  run = tmp_path / "run"
  shutil.copytree(tiny_run, run)
  ckpt.load_params(str(run), None)
  cfg = tiny_run_config()
  make_dataset(cfg.data, seq_len=cfg.train.seq_len, global_batch_size=cfg.train.batch_size,
               seed=cfg.train.data_seed, workdir=str(tmp_path / "data"))
  absl_logging.warning("another note of a dependency")
  text = caplog.text
  for note in ("Given directory is read only", "setting save_interval_steps=0",
               "Using custom data configuration"):
    assert note not in text, text[-2000:]
  assert "another note of a dependency" in text
