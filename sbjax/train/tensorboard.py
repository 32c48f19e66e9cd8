"""A TensorBoard mirror of the metrics records: ``<workdir>/tb/`` event files next to
metrics.jsonl, one scalar per numeric key (``loss``, ``acc``, ``grad_norm``, ``lr``,
``tokens_per_sec``, ``gamma``, ``eval_loss``, ``eval_acc``) at the record's step. Written with
tensorboardX (no TensorFlow), whose own thread writes the files; ``tensorboard --logdir
WORKDIR`` shows the runs. On remote storage (``gs://``) the event files are written through
``etils.epath`` like the rest of the workdir.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys

from sbjax.paths import scheme, upath

log = logging.getLogger("sbjax")

_WRITERS = itertools.count()  # event file names: time and host, plus pid and this count


def tb_dir(workdir):
  return upath(workdir) / "tb"


class _EpathEventFile:
  """An event file on remote storage, written through ``etils.epath``: each flush rewrites
  the one object whole."""

  def __init__(self, path: str):
    self.path, self.buffer = upath(path), bytearray()

  def write(self, data: bytes) -> None:
    self.buffer += data

  def flush(self) -> None:
    self.path.write_bytes(bytes(self.buffer))

  close = flush


class _EpathEventFiles:
  """tensorboardX's writer factory for one URL scheme (``record_writer.register_writer_factory``)."""

  def open(self, path: str) -> _EpathEventFile:
    return _EpathEventFile(path)

  def directory_check(self, path: str) -> None:
    upath(path).mkdir(parents=True, exist_ok=True)


def _tensorboardx():
  """tensorboardX, imported without torch unless torch is already loaded: its package imports
  torch when it is installed, only to accept torch tensors (~3 s of CPU per training process);
  the mirror logs Python floats, so torch is hidden while it loads (``sys.modules`` restored)."""
  if "torch" in sys.modules:
    import tensorboardX  # noqa: PLC0415 - deferred: only runs that write TensorBoard need it
    return tensorboardX
  sys.modules["torch"] = None  # makes `import torch` raise ImportError
  try:
    import tensorboardX  # noqa: PLC0415
  finally:
    if "torch" in sys.modules and sys.modules["torch"] is None:
      del sys.modules["torch"]
  return tensorboardX


class TensorBoardMirror:
  """Writes records ``write(member, rec)`` to ``tb_dir(dirs[member])``; a mirror: if
  tensorboardX cannot start, training goes on without it (a warning)."""

  def __init__(self, dirs):
    suffix = f".{os.getpid()}.{next(_WRITERS)}"  # a resume in the same second: a new file
    try:
      tbx = _tensorboardx() if dirs else None  # (none on processes other than 0)
      for d in dirs:
        if scheme(d):  # through epath, not tensorboardX's own GCS/S3 clients
          tbx.record_writer.register_writer_factory(scheme(d), _EpathEventFiles())
      self._writers = [tbx.SummaryWriter(logdir=str(tb_dir(d)), flush_secs=30,
                                         filename_suffix=suffix) for d in dirs]
    except Exception as e:  # noqa: BLE001 - a mirror: training goes on without it
      log.warning("TensorBoard mirror disabled: %s: %s", type(e).__name__, e)
      self._writers = []

  def write(self, member: int, rec: dict) -> None:
    if not self._writers:
      return
    for key, value in rec.items():
      if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
        self._writers[member].add_scalar(key, value, int(rec["step"]))

  def flush(self) -> None:
    for w in self._writers:
      w.flush()

  def close(self) -> None:
    for w in self._writers:
      w.close()
    self._writers = []
