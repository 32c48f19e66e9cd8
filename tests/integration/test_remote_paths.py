"""``gs://`` paths on a real GCS server offline, each equal to the same call on local disk."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import fsspec
import jax
import numpy as np
import pytest
from fsspec.registry import known_implementations

from sbjax import atomic
from sbjax import checkpoint as ckpt
from sbjax import paths
from sbjax.cli import convert as convert_cli
from sbjax.config import ModelConfig
from sbjax.data import tokens
from sbjax.data.dataset import local_data_dir
from sbjax.data.text import DataError, scan_text_dir
from sbjax.train import done
from sbjax.train import workdir as wd
from tests._corpus import generated_docs, write_corpus
from tests._gcs_emulator import gcs_emulator
from tests._hf_cache import exported_neox
from tests._tiny import tiny_run_config


@pytest.fixture(scope="module")
def server():
  with gcs_emulator("bkt"):
    yield


@pytest.fixture
def gs(server, request, tmp_path, monkeypatch):
  """A fresh ``gs://bkt/<test>`` prefix; nothing may land in a local ``gs:`` folder."""
  (cwd := tmp_path / "cwd").mkdir()
  monkeypatch.chdir(cwd)  # a pathlib bug would write ./gs:/bkt/... here
  monkeypatch.setenv("SBJAX_DATA_CACHE", str(tmp_path / "cache"))
  yield f"gs://bkt/{request.node.name}"
  assert os.listdir(cwd) == [], "a local folder was written for a gs:// path"


def _files(url) -> dict:
  """{name under ``url``: bytes} of the files on local disk or objects on the server."""
  fs, root = fsspec.core.url_to_fs(os.fspath(url))
  return {k[len(root) + 1:]: fs.cat_file(k) for k in fs.find(root)}


def test_the_workdir_files_on_the_store(gs):
  """metrics.jsonl appended, repaired and read back; config.json and the DONE mark."""
  path = paths.upath(gs) / wd.METRICS
  for step in (1, 2):
    wd.append_jsonl(path, {"step": step, "loss": 3.0 - step})
  path.write_bytes(path.read_bytes() + b'{"step": 3, "lo')  # a write cut short
  assert wd.repair_jsonl(path) == len(b'{"step": 3, "lo')
  wd.append_jsonl(path, {"step": 2, "loss": 0.5})  # a resumed run's later record wins
  assert wd.read_metrics(gs) == [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 0.5}]
  cfg = tiny_run_config()
  wd.prepare_workdir(paths.upath(gs), cfg, is_main=True)
  assert json.loads(paths.upath(f"{gs}/config.json").read_text()) == json.loads(
      json.dumps(cfg.to_dict()))
  wd.check_workdir_config(gs, cfg)  # the saved config is read back from the store
  assert done.finished(gs) is None
  done.mark_finished(gs, {"step": 5, "eval_loss": 1.25, "extra": 1}, {"a": 1})
  assert done.finished(gs) == {"step": 5, "eval_loss": 1.25}


def test_a_scheme_without_its_file_system_is_one_line_naming_it(gs, monkeypatch):
  monkeypatch.setitem(known_implementations, "zz", {"class": "zzfs_not_installed.ZZFileSystem",
                                                    "err": "Install zzfs"})
  with pytest.raises(ValueError, match=r"^zz://bucket/run: Install zzfs$"):
    paths.upath("zz://bucket/run")
  with pytest.raises(ValueError, match=r"^nope://b/x: Protocol not known: nope$"):
    paths.upath("nope://b/x")
  assert isinstance(paths.upath("runs/x"), type(paths.upath("/tmp")))  # local: untouched
  assert os.fspath(paths.upath("gs://b/x") / "y") == "gs://b/x/y"


def test_data_files_of_a_remote_workdir_go_to_a_local_cache(gs, tmp_path):
  """The array_record writer, sentencepiece and np.load(mmap) need local files."""
  a, b = local_data_dir(f"{gs}/run"), local_data_dir(f"{gs}/other")
  assert a.parent == b.parent == tmp_path / "cache" and a != b == local_data_dir(f"{gs}/other")
  assert local_data_dir(tmp_path / "run") == tmp_path / "run"


def test_a_token_file_on_the_store_is_read_from_one_local_copy(gs, tmp_path):
  arr = np.arange(2 * 9, dtype=np.int32).reshape(2, 9)
  with paths.upath(f"{gs}/tok.npy").open("wb") as f:
    np.save(f, arr)
  got = tokens.read_tokens(f"{gs}/tok.npy")
  np.testing.assert_array_equal(got, arr)
  assert isinstance(got, np.memmap)  # memory-mapped from the local copy
  assert tokens.file_identity(f"{gs}/tok.npy") == tokens.file_identity(
      paths.local_file(f"{gs}/tok.npy"))
  assert len(list((tmp_path / "cache" / "remote").rglob("tok.npy"))) == 1
  with pytest.raises(DataError, match=f"token file not found: {gs}/nope.npy"):
    tokens.read_tokens(f"{gs}/nope.npy")


def test_a_bad_step_is_moved_aside_object_by_object(gs):
  """An object store has no directories to rename (epath's rename refuses a missing parent
  folder there): move_aside copies every object of the step, then deletes the step."""
  step = paths.upath(f"{gs}/checkpoints/5")
  (step / "params" / "a.bin").write_bytes(b"abc")
  (step / "_CHECKPOINT_METADATA").write_text("{}")
  dst = ckpt.move_aside(gs, 5, "half-written")
  assert os.fspath(dst).startswith(f"{gs}/checkpoints_bad/5_")
  assert (dst / "params" / "a.bin").read_bytes() == b"abc"
  assert not _files(f"{gs}/checkpoints/5")
  assert ckpt.list_steps(gs) == []


def test_local_dir_copies_a_tree_once_and_staged_dir_uploads_only_on_success(gs, tmp_path):
  root = paths.upath(f"{gs}/tree")
  (root / "a.txt").write_text("a")
  (root / "sub" / "b.bin").write_bytes(b"\0\1")
  first = Path(paths.local_dir(f"{gs}/tree"))
  assert _files(first) == {"a.txt": b"a", "sub/b.bin": b"\0\1"} and first.name == "tree"
  (first / "a.txt").write_text("kept")  # a second call reuses the copy: nothing is fetched
  assert paths.local_dir(f"{gs}/tree") == str(first) and (first / "a.txt").read_text() == "kept"
  (root / "a.txt").write_text("changed")  # another size: another copy
  again = Path(paths.local_dir(f"{gs}/tree"))
  assert again != first and (again / "a.txt").read_text() == "changed"
  only = Path(paths.local_dir(f"{gs}/tree", names=("a.txt", "missing.json")))
  assert _files(only) == {"a.txt": b"changed"}
  assert paths.local_dir(tmp_path) == str(tmp_path)  # local: the folder itself
  with pytest.raises(FileNotFoundError, match=f"no such folder: {gs}/none"):
    paths.local_dir(f"{gs}/none")
  with pytest.raises(RuntimeError, match="cut short"):
    with paths.staged_dir(f"{gs}/staged") as d:
      Path(d, "x.json").write_text("{}")
      raise RuntimeError("cut short")
  assert not _files(f"{gs}/staged")
  with paths.staged_dir(f"{gs}/staged") as d:
    Path(d, "q").mkdir()
    Path(d, "q", "y.txt").write_text("y")
  assert _files(f"{gs}/staged") == {"q/y.txt": b"y"}


def test_a_text_corpus_on_the_store_reads_as_its_local_copy(gs, tmp_path):
  local = write_corpus(tmp_path / "corpus", generated_docs(3, 3, n_lines=20))
  write_corpus(local / "more", generated_docs(4, 2, n_lines=5), prefix="sub")
  (local / "notes.md").write_text("not a .txt file")
  fsspec.filesystem("gs").put(f"{local}/", f"{gs}/corpus", recursive=True)
  remote, here = scan_text_dir(f"{gs}/corpus"), scan_text_dir(local)
  assert remote.docs == here.docs and remote.identity == here.identity
  assert [n for n, _ in remote.docs][-2:] == ["more/sub00.txt", "more/sub01.txt"]


def test_hf_imports_from_and_exports_to_the_store_equal_the_local_ones(gs, tmp_path):
  mc = ModelConfig(vocab_size=48, d_model=16, n_layers=1, n_heads=2, max_len=32)
  for s in (1, 2):
    exported_neox(mc, tmp_path / "series" / f"step{s * 1000}", seed=s)
  fsspec.filesystem("gs").put(f"{tmp_path}/series/", f"{gs}/series", recursive=True)
  assert convert_cli.import_to_workdir(f"{gs}/series", str(tmp_path / "a")) == [1000, 2000]
  assert convert_cli.import_to_workdir(str(tmp_path / "series"), str(tmp_path / "b")) == [
      1000, 2000]
  jax.tree.map(np.testing.assert_array_equal, ckpt.load_params(tmp_path / "a", 2000)[1],
               ckpt.load_params(tmp_path / "b", 2000)[1])
  rec = json.loads((tmp_path / "a" / "import.json").read_text())
  local = json.loads((tmp_path / "b" / "import.json").read_text())
  assert rec["source"] == f"{gs}/series" and [r["weights_sha256"] for r in rec["revisions"]] == [
      r["weights_sha256"] for r in local["revisions"]]
  with pytest.raises(FileNotFoundError, match=f"--from_hf={gs}/nope does not exist"):
    convert_cli.import_to_workdir(f"{gs}/nope", str(tmp_path / "c"))
  assert convert_cli.export_from_workdir(str(tmp_path / "b"), f"{gs}/export") == 2000
  convert_cli.export_from_workdir(str(tmp_path / "b"), str(tmp_path / "export"))
  assert _files(f"{gs}/export") == _files(tmp_path / "export")
  assert sorted(_files(tmp_path / "export")) == ["config.json", "model.safetensors"]


def test_an_atomic_write_to_gs_is_one_object(gs):
  atomic.atomic_write_json(paths.upath(f"{gs}/plan.json"), {"r": [4, 8]})
  with atomic.atomic_path(f"{gs}/w.npy") as tmp, open(tmp, "wb") as f:
    np.save(f, np.arange(3))
  npy = io.BytesIO()
  np.save(npy, np.arange(3))  # one object each, no temporary left beside them
  assert _files(gs) == {"plan.json": b'{\n "r": [\n  4,\n  8\n ]\n}\n', "w.npy": npy.getvalue()}
  assert not atomic.is_local(gs) and atomic.is_local("runs/x")
