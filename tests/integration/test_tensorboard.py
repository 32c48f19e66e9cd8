"""A training run mirrors metrics.jsonl into TensorBoard event files in WORKDIR/tb, read
back here with tensorboardX's protos (TFRecord framing parsed by hand: no TensorFlow)."""

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tensorboardX.proto import event_pb2

from sbjax.train import read_metrics
from sbjax.train.tensorboard import tb_dir

ROOT = Path(__file__).resolve().parents[2]


def read_events(logdir: Path) -> list:
  """Every Event of the event files in ``logdir`` (TFRecord: u64 length, u32 crc, data,
  u32 crc)."""
  events = []
  for path in sorted(Path(logdir).glob("events.out.tfevents.*")):
    data, pos = path.read_bytes(), 0
    while pos < len(data):
      (n,) = struct.unpack("<Q", data[pos:pos + 8])
      ev = event_pb2.Event()
      ev.ParseFromString(data[pos + 12:pos + 12 + n])
      events.append(ev)
      pos += 12 + n + 4
  return events


def scalars(logdir: Path) -> dict:
  """{(tag, step): value} of the scalar summaries."""
  out = {}
  for ev in read_events(logdir):
    for v in ev.summary.value:
      out[(v.tag, ev.step)] = v.simple_value
  return out


def test_tensorboard_mirror_equals_metrics_jsonl(tiny_run):
  files = list(tb_dir(tiny_run).glob("events.out.tfevents.*"))
  assert files and all(f.parent == tiny_run / "tb" for f in files)  # next to metrics.jsonl
  tb = scalars(tb_dir(tiny_run))
  want = {}
  for rec in read_metrics(tiny_run):
    for k, v in rec.items():
      if k != "step":
        want[(k, rec["step"])] = v
  assert {k for k, _ in want} == {"loss", "acc", "grad_norm", "lr", "tokens_per_sec", "gamma",
                                  "eval_loss", "eval_acc"}
  assert set(tb) == set(want)
  for key, v in want.items():  # TensorBoard stores float32
    assert tb[key] == np.float32(v), (key, tb[key], v)


@pytest.mark.e2e  # a fresh interpreter (the e2e layer; tests/conftest.py)
def test_mirror_loads_tensorboardx_without_torch(tmp_path):
  """tensorboardX imports torch when torch is installed (~3 s of CPU per training process);
  the mirror hides it while tensorboardX loads, restores sys.modules and still writes."""
  code = (
      "import sys\n"
      "from sbjax.train.tensorboard import TensorBoardMirror\n"
      f"m = TensorBoardMirror([{str(tmp_path)!r}])\n"
      "m.write(0, {'step': 3, 'loss': 1.5})\n"
      "m.close()\n"
      "assert 'torch' not in sys.modules, sys.modules.get('torch')\n")
  subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=300)
  assert scalars(tb_dir(tmp_path)) == {("loss", 3): 1.5}
