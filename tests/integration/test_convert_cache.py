"""convert --from_hf on the HF cache layout: refs -> snapshots, revision names with
stage/token parts ordered by step, step selections, sha256 records, duplicates, and the
errors (missing revision, truncated weights) that leave the workdir untouched."""

import hashlib
import json
import shutil

import numpy as np
import pytest

from sbjax.cli import convert as convert_cli
from sbjax import checkpoint
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


def test_revision_names_and_selection(cache):
  _, repo, _ = cache
  revs = revisions.find(repo.parent)  # the cache dir holding one repository
  assert [(r.step, r.stage, r.tokens) for r in revs] == [
      (0, 0, 0), (1000, 0, 2_000_000), (2000, 1, 4_200_000), (3000, 1, 6_000_000)]
  assert [r.step for r in revisions.select(revs, "0,2000:3000")] == [0, 2000, 3000]
  assert [r.step for r in revisions.select(revs, "0:3000:2000")] == [0, 2000]
  with pytest.raises(ValueError, match=r"requested revision step\(s\) \[500\] not found; "
                                       r"available steps: \[0, 1000, 2000, 3000\]"):
    revisions.select(revs, "500")


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
  assert "step 0 holds the same weights as the last step 3000" in caplog.text
  cfg, params, _ = checkpoint.load_params(str(work), 1000)
  ref = import_hf(str(saved[1]))[1]
  np.testing.assert_array_equal(np.asarray(params["embed"]), ref["embed"])
  assert cfg.name == "tiny-neox"
  assert (work / "tokenizer.json").read_bytes() == (saved[3] / "tokenizer.json").read_bytes()
  # a later import of another revision merges into the record
  assert convert_cli.import_to_workdir(str(repo), str(work), steps="2000") == [2000]
  rec = json.loads((work / "import.json").read_text())
  assert sorted(r["step"] for r in rec["revisions"]) == [0, 1000, 2000, 3000]


def _snapshot(repo, ref):
  return repo / "snapshots" / (repo / "refs" / ref).read_text().strip()


def test_missing_revision_and_truncated_weights(cache, tmp_path):
  d, repo, saved = cache
  bad = d / "bad"
  shutil.copytree(repo.parent, bad, symlinks=True)
  brepo = bad / repo.name
  work = tmp_path / "w"
  work.mkdir()
  (work / "keep.txt").write_text("x")
  with pytest.raises(ValueError, match=r"requested revision step\(s\) \[4000\] not found"):
    convert_cli.import_to_workdir(str(brepo), str(work), steps="4000")
  shutil.rmtree(_snapshot(brepo, "step1000-tokens2M"))
  with pytest.raises(ValueError, match=r"revision 'step1000-tokens2M' points to snapshot .* "
                                       r"does not exist: the cache does not hold"):
    convert_cli.import_to_workdir(str(brepo), str(work), steps="1000")
  snap = _snapshot(brepo, "stage1-step2000-tokens4.2M")
  blob = (snap / "model.safetensors").resolve()
  data = blob.read_bytes()
  blob.unlink()
  blob.write_bytes(data[:len(data) - 100])  # a partial download
  with pytest.raises(ValueError, match=r"revision 'stage1-step2000-tokens4.2M': weight file "
                                       r"model.safetensors is truncated or corrupt"):
    convert_cli.import_to_workdir(str(brepo), str(work), steps="2000:3000")
  assert sorted(p.name for p in work.iterdir()) == ["keep.txt"]  # nothing written or lost
