"""A training run mirrors metrics.jsonl into TensorBoard event files in WORKDIR/tb, read
back here with tensorboardX's protos (TFRecord framing parsed by hand: no TensorFlow)."""

import struct
from pathlib import Path

import numpy as np
from tensorboardX.proto import event_pb2

from sbjax.train import read_metrics
from sbjax.train.tensorboard import tb_dir


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
