"""convert --from_hf: a model id found in the HF cache (refs -> snapshots), revision names with
stage/token parts ordered by step, step selections, sha256 records, duplicates, a single
directory's step from its name, and another model in the workdir refused (the other refusals:
the bad-input table of convert)."""

import dataclasses
import hashlib
import json
import shutil

import numpy as np
import pytest

from sbjax import checkpoint
from sbjax.cli import convert as convert_cli
from sbjax.cli import hf_cache
from sbjax.config import ModelConfig
from sbjax.convert import import_hf, revisions
from sbjax.data import hf_tokenizer
from tests._hf_cache import exported_neox, write_hf_cache

V = 53
MC = ModelConfig(vocab_size=V, d_model=16, n_layers=1, n_heads=2, max_len=32)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  d = tmp_path_factory.mktemp("hf")
  saved = {s: exported_neox(MC, d / f"m{s}", seed=s) for s in (1, 2, 3)}
  hf_tokenizer.train_bpe(["a local corpus for the tokenizer"] * 3, saved[3] / "tokenizer.json", 270)
  revs = {"step0-tokens0": saved[3],  # step 0 aliased to the final model
          "step1000-tokens2M": saved[1], "stage1-step2000-tokens4.2M": saved[2],
          "stage1-step3000-tokens6M": saved[3], "main": saved[3]}
  repo = write_hf_cache(d / "cache", "EleutherAI/tiny-neox", revs)
  return d, repo, saved


def test_revision_names(cache):
  """(Selections: the import below; a step not in the series: the bad-input table.)"""
  revs = revisions.find(cache[1].parent)  # the cache dir holding one repository
  assert [(r.step, r.stage, r.tokens) for r in revs] == [
      (0, 0, 0), (1000, 0, 2_000_000), (2000, 1, 4_200_000), (3000, 1, 6_000_000)]
  steps = [(revisions.parse_revision(n) or {}).get("step") for n in (
      "step143000", "some/dir/revision-step20", "pythia-70m_step-7/", "42", "pythia-70m", "xstep5")]
  assert steps == [143000, 20, 7, 42, None, None]


def test_import_hashes_and_duplicates(cache, tmp_path, caplog):
  _, repo, saved = cache
  work = tmp_path / "w"
  steps = convert_cli.import_to_workdir(str(repo), str(work), steps="0,1000:3000:2000")
  assert steps == [0, 1000, 3000] and checkpoint.list_steps(work) == [0, 1000, 3000]
  rec = json.loads((work / "import.json").read_text())
  by = {r["step"]: r for r in rec["revisions"]}
  blob = hashlib.sha256((saved[1] / "model.safetensors").read_bytes()).hexdigest()
  assert by[1000]["files"]["model.safetensors"] == blob  # the content's sha256 (= blob name)
  assert by[0]["duplicate_of"] == 3000 and by[1000]["duplicate_of"] is None
  assert by[3000]["duplicate_of"] is None and rec["duplicates"] == {"0": 3000}
  assert "revision 'step0-tokens0' (step 0) holds the same weights as step 3000" in caplog.text
  cfg, params, _ = checkpoint.load_params(str(work), 1000)
  ref = import_hf(str(saved[1]))[1]
  np.testing.assert_array_equal(np.asarray(params["embed"]), ref["embed"])
  assert cfg.name == "tiny-neox"
  assert (work / "tokenizer.json").read_bytes() == (saved[3] / "tokenizer.json").read_bytes()
  # a later import of another revision merges into the record
  assert convert_cli.import_to_workdir(str(repo), str(work), steps="2000") == [2000]
  rec = json.loads((work / "import.json").read_text())
  assert sorted(r["step"] for r in rec["revisions"]) == [0, 1000, 2000, 3000]


def test_a_model_id_is_found_in_the_hf_cache(cache, tmp_path, monkeypatch):
  """``--from_hf=org/name`` resolves in the hub cache (HF_HUB_CACHE, else HF_HOME/hub): the
  snapshot of refs/main, or the repository of a series; not there, one line naming where it
  looked. No network."""
  d, repo, saved = cache
  monkeypatch.delenv("HF_HUB_CACHE", raising=False)
  monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
  with pytest.raises(FileNotFoundError) as e:
    hf_cache.resolve("EleutherAI/pythia-70m")
  looked = tmp_path / "home" / "hub" / "models--EleutherAI--pythia-70m"
  assert str(looked) in str(e.value) and "\n" not in str(e.value), e.value
  main = write_hf_cache(tmp_path / "home" / "hub", "EleutherAI/pythia-70m", {"main": saved[1]})
  got = hf_cache.resolve("EleutherAI/pythia-70m")
  assert got.startswith(str(main / "snapshots")) and import_hf(got)[0] == MC
  assert hf_cache.model_name("EleutherAI/pythia-70m") == "pythia-70m"
  monkeypatch.setenv("HF_HUB_CACHE", str(d / "cache"))  # wins over HF_HOME: the series
  assert hf_cache.resolve("EleutherAI/tiny-neox") == str(repo)
  assert hf_cache.resolve(str(saved[1])) == str(saved[1])  # a path is a path


def test_a_single_directory_takes_its_step_from_its_name(cache, tmp_path):
  _, _, saved = cache
  src = tmp_path / "rev-step12"
  shutil.copytree(saved[2], src)
  work = tmp_path / "w"
  assert convert_cli.import_to_workdir(str(src), str(work)) == [12]
  assert convert_cli.import_to_workdir(str(src), str(work), step=5) == [5]
  cfg, params, step = checkpoint.load_params(str(work))
  assert step == 12 and cfg.name == "rev-step12"
  np.testing.assert_array_equal(np.asarray(params["embed"]), import_hf(str(src))[1]["embed"])
  other = exported_neox(dataclasses.replace(MC, parallel_residual=False), tmp_path / "o", 4)
  with pytest.raises(ValueError, match="parallel_residual"):  # the workdir holds another model
    convert_cli.import_to_workdir(str(other), str(work))
