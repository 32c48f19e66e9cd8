"""A TensorBoard mirror of the metrics records: ``<workdir>/tb/`` event files next to
metrics.jsonl, one scalar per numeric key (``loss``, ``acc``, ``grad_norm``, ``lr``,
``tokens_per_sec``, ``eval_loss``, ``eval_acc``) at the record's step. Written with
tensorboardX (no TensorFlow) by a background thread, so the training loop never waits
on it; ``tensorboard --logdir WORKDIR`` shows the runs. On remote storage (``gs://``) the
event files are written through ``etils.epath`` like the rest of the workdir.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import sys
import threading

from sbjax.paths import scheme, upath

log = logging.getLogger("sbjax")

TB_DIR = "tb"
_FLUSH = object()
_WRITERS = itertools.count()  # event file names: time and host, plus pid and this count


def tb_dir(workdir):
  return upath(workdir) / TB_DIR


class _EpathEventFile:
  """An event file on remote storage, written through ``etils.epath`` (so through the same
  fsspec file system as the rest of the workdir): each flush rewrites the one object whole."""

  def __init__(self, path: str):
    self.path, self.buffer = upath(path), bytearray()

  def write(self, data: bytes) -> None:
    self.buffer += data

  def flush(self) -> None:
    self.path.write_bytes(bytes(self.buffer))

  def close(self) -> None:
    self.flush()


class _EpathEventFiles:
  """tensorboardX's writer factory for one URL scheme (``record_writer.register_writer_factory``)."""

  def open(self, path: str) -> _EpathEventFile:
    return _EpathEventFile(path)

  def directory_check(self, path: str) -> None:
    upath(path).mkdir(parents=True, exist_ok=True)


def route_remote_event_files(dirs) -> None:
  """Event files of remote ``dirs`` go through epath, not tensorboardX's own GCS/S3 clients."""
  from tensorboardX import record_writer  # noqa: PLC0415 - deferred: loaded by import_tensorboardx

  for d in dirs:
    name = scheme(d)
    if name:
      record_writer.register_writer_factory(name, _EpathEventFiles())


def import_tensorboardx():
  """tensorboardX, imported without torch unless torch is already loaded.

  tensorboardX's package imports torch when it is installed, only so that torch tensors are
  accepted as values; that costs ~3 s of CPU in every training process (measured: `import
  jax` 2.7 s, plus tensorboardX 5.6 s with torch, 3.0 s without). The mirror logs Python
  floats, so torch is hidden while tensorboardX loads (its own `try: import torch` then falls
  back to numpy) and restored at once; a later `import torch` works as usual."""
  if "torch" in sys.modules:
    import tensorboardX  # noqa: PLC0415 - deferred: only runs that write TensorBoard need it
    return tensorboardX
  sys.modules["torch"] = None  # makes `import torch` raise ImportError
  try:
    import tensorboardX  # noqa: PLC0415 - deferred: only runs that write TensorBoard need it
  finally:
    if "torch" in sys.modules and sys.modules["torch"] is None:
      del sys.modules["torch"]
  return tensorboardX


class TensorBoardMirror:
  """Writes records ``write(member, rec)`` to ``tb_dir(dirs[member])``."""

  def __init__(self, dirs):
    self._dirs = [upath(d) for d in dirs]
    self._suffix = f".{os.getpid()}.{next(_WRITERS)}"  # a resume in the same second: a new file
    self._q: queue.SimpleQueue = queue.SimpleQueue()
    try:  # in the calling thread: it briefly hides torch from sys.modules (~0.3 s)
      self._tbx = import_tensorboardx()
    except Exception as e:  # noqa: BLE001 - a mirror: training goes on without it
      self._tbx = e
    self._thread = threading.Thread(target=self._run, name="sbjax-tensorboard", daemon=True)
    self._thread.start()

  def write(self, member: int, rec: dict) -> None:
    self._q.put((member, rec))

  def flush(self) -> None:
    self._q.put(_FLUSH)

  def close(self) -> None:
    self._q.put(None)
    self._thread.join()

  def _run(self) -> None:
    try:
      if isinstance(self._tbx, Exception):
        raise self._tbx
      tensorboardX = self._tbx
      route_remote_event_files(self._dirs)
      writers = [tensorboardX.SummaryWriter(logdir=str(tb_dir(d)), flush_secs=30,
                                            filename_suffix=self._suffix) for d in self._dirs]
    except Exception as e:  # noqa: BLE001 - a mirror: training goes on without it
      log.warning("TensorBoard mirror disabled: %s: %s", type(e).__name__, e)
      while self._q.get() is not None:
        pass
      return
    while (item := self._q.get()) is not None:
      if item is _FLUSH:
        for w in writers:
          w.flush()
        continue
      member, rec = item
      for key, value in rec.items():
        if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
          writers[member].add_scalar(key, value, int(rec["step"]))
    for w in writers:
      w.close()
