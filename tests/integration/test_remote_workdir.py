"""A workdir on a non-local etils.epath backend (``gs://`` served by fsspec's in-memory file
system, tests/_fake_gcs.py): the workdir files that do not go through TensorStore land in the
store, read back equal, and no local ``gs:`` folder appears (``pathlib.Path("gs://b/x")`` is
the local ``gs:/b/x``). A whole run, a kill -9 and an analysis on a real GCS server, orbax's
arrays included: tests/e2e/test_remote_workdir_gcs.py."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
from fsspec.registry import known_implementations
from tensorboardX.proto import event_pb2

from sbjax import checkpoint as ckpt
from sbjax import paths
from sbjax.analysis import figures, table
from sbjax.analysis.analyze import _check_out_dir
from sbjax.analysis.cache import Cache
from sbjax.data import tokens
from sbjax.data.dataset import local_data_dir
from sbjax.data.text import DataError
from sbjax.train import done
from sbjax.train import workdir as wd
from sbjax.train.tensorboard import TensorBoardMirror
from tests._fake_gcs import fake_gcs
from tests._tiny import tiny_run_config

RUN = "gs://bkt/run"


@pytest.fixture
def store(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # a pathlib bug would write ./gs:/bkt/run here
  with fake_gcs() as s:
    yield s
  assert os.listdir(tmp_path) == [], "a local folder was written for a gs:// path"


def test_metrics_log_appends_repairs_and_reads_back(store):
  path = paths.upath(RUN) / wd.METRICS
  for step in (1, 2):
    wd.append_jsonl(path, {"step": step, "loss": 3.0 - step})
  path.write_bytes(path.read_bytes() + b'{"step": 3, "lo')  # a write cut short
  assert wd.repair_jsonl(path) == len(b'{"step": 3, "lo')
  wd.append_jsonl(path, {"step": 2, "loss": 0.5})  # a resumed run's later record wins
  assert wd.read_metrics(RUN) == [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 0.5}]


def test_config_and_done_mark_objects(store):
  cfg = tiny_run_config()
  wd.prepare_workdir(paths.upath(RUN), cfg, is_main=True)
  assert json.loads(paths.upath(f"{RUN}/config.json").read_text()) == json.loads(
      json.dumps(cfg.to_dict()))
  wd.check_workdir_config(RUN, cfg)  # the saved config is read back from the store
  assert done.finished(RUN) is None
  done.mark_finished(RUN, {"step": 5, "eval_loss": 1.25, "extra": 1}, {"a": 1})
  assert done.finished(RUN) == {"step": 5, "eval_loss": 1.25}


def test_analysis_outputs_csv_cache_and_figure(store):
  out = paths.upath(f"{RUN}/analysis")
  _check_out_dir(out)  # the writability probe: written and deleted
  rows = [{"step": 0, "eval_loss": 3.5, "anisotropy_last": 0.25},
          {"step": 8, "eval_loss": 2.5, "anisotropy_last": 0.5}]
  table.write_csv(out / "metrics.csv", rows)
  assert table.read_csv(f"{RUN}/analysis/metrics.csv") == rows
  cache = Cache(out / "cache", "key")
  cache.put(8, "k8", {"x": 1.0}, spectrum_top=[1.0, 0.5])
  cache.put_reference({"h": np.arange(6, dtype=np.float32).reshape(2, 3)})
  assert cache.get(8, "k8")["row"] == {"x": 1.0}
  np.testing.assert_array_equal(cache.get_reference()["h"], np.arange(6).reshape(2, 3))
  png = figures.plot_loss_anisotropy(rows, f"{RUN}/analysis/fig.png")
  assert os.fspath(png) == f"{RUN}/analysis/fig.png"
  assert bytes(store[f"{RUN}/analysis/fig.png"].getvalue())[:4] == b"\x89PNG"
  assert not any(".write_test_" in k for k in store)


def test_tensorboard_event_file_is_written_through_epath(store):
  m = TensorBoardMirror([RUN])
  m.write(0, {"step": 3, "loss": 1.5})
  m.close()
  [name] = [k for k in store if k.startswith(f"{RUN}/tb/events.out.tfevents.")]
  data, pos, got = bytes(store[name].getvalue()), 0, {}
  while pos < len(data):  # TFRecord: u64 length, u32 crc, data, u32 crc
    (n,) = struct.unpack("<Q", data[pos:pos + 8])
    ev = event_pb2.Event.FromString(data[pos + 12:pos + 12 + n])
    got.update({(v.tag, ev.step): v.simple_value for v in ev.summary.value})
    pos += 12 + n + 4
  assert got == {("loss", 3): 1.5}


def test_a_scheme_without_its_file_system_is_one_line_naming_it(monkeypatch):
  monkeypatch.setitem(known_implementations, "zz", {"class": "zzfs_not_installed.ZZFileSystem",
                                                    "err": "Install zzfs"})
  with pytest.raises(ValueError, match=r"^zz://bucket/run: Install zzfs$"):
    paths.upath("zz://bucket/run")
  with pytest.raises(ValueError, match=r"^nope://b/x: Protocol not known: nope$"):
    paths.upath("nope://b/x")
  assert isinstance(paths.upath("runs/x"), type(paths.upath("/tmp")))  # local: untouched
  assert os.fspath(paths.upath("gs://b/x") / "y") == "gs://b/x/y"


def test_data_files_of_a_remote_workdir_go_to_a_local_cache(tmp_path, monkeypatch):
  """Sentencepiece and np.load(mmap) need local files."""
  monkeypatch.setenv("SBJAX_DATA_CACHE", str(tmp_path))
  a, b = local_data_dir("gs://bkt/run"), local_data_dir("gs://bkt/other")
  assert a.parent == b.parent == tmp_path and a != b == local_data_dir("gs://bkt/other")
  assert local_data_dir(tmp_path / "run") == tmp_path / "run"


def test_a_token_file_on_the_store_is_read_from_one_local_copy(store, tmp_path_factory,
                                                              monkeypatch):
  cache = tmp_path_factory.mktemp("cache")
  monkeypatch.setenv("SBJAX_DATA_CACHE", str(cache))
  arr = np.arange(2 * 9, dtype=np.int32).reshape(2, 9)
  with paths.upath(f"{RUN}/tok.npy").open("wb") as f:
    np.save(f, arr)
  got = tokens.read_tokens(f"{RUN}/tok.npy")
  np.testing.assert_array_equal(got, arr)
  assert isinstance(got, np.memmap)  # memory-mapped from the local copy
  assert tokens.file_identity(f"{RUN}/tok.npy") == tokens.file_identity(
      paths.local_file(f"{RUN}/tok.npy"))
  assert len(list((cache / "remote").rglob("tok.npy"))) == 1
  with pytest.raises(DataError, match="token file not found: gs://bkt/run/nope.npy"):
    tokens.read_tokens(f"{RUN}/nope.npy")


def test_a_bad_step_is_moved_aside_object_by_object(store):
  """An object store has no directories to rename (epath's rename refuses a missing parent
  folder there): move_aside copies every object of the step, then deletes the step."""
  step = paths.upath(f"{RUN}/checkpoints/5")
  (step / "params").mkdir(parents=True, exist_ok=True)
  (step / "params" / "a.bin").write_bytes(b"abc")
  (step / "_CHECKPOINT_METADATA").write_text("{}")
  dst = ckpt.move_aside(RUN, 5, "half-written")
  assert os.fspath(dst).startswith(f"{RUN}/checkpoints_bad/5_")
  assert (dst / "params" / "a.bin").read_bytes() == b"abc"
  assert not any(k.startswith(f"{RUN}/checkpoints/5/") for k in store)
  assert ckpt.list_steps(RUN) == []
