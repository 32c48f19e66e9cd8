"""One writer per folder (a workdir, an experiment's output folder): ``workdir_lock(folder)``.

``FOLDER/LOCK`` records its holder (host, pid, start time); a second writer stops with one
line naming it (``WorkdirLockedError``). Callers validate their inputs before they take the
lock, which creates the folder.

- Local disk: ``fcntl.flock``, released by the kernel however the holder exits (even SIGKILL).
- Remote storage (``gs://``): the object is the lock, deleted at release. One left by a killed
  run is taken over only from the host it names, when its pid is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import time
from typing import Iterator

from sbjax.atomic import is_local
from sbjax.paths import upath

log = logging.getLogger("sbjax")

LOCK = "LOCK"


class WorkdirLockedError(RuntimeError):
  """Another process holds the folder's lock."""


def _busy(folder, text: str, remote: bool) -> WorkdirLockedError:
  try:
    info = json.loads(text)
  except ValueError:
    info = {}
  fix = f" (if it is gone, delete {upath(folder) / LOCK})" if remote else ""
  return WorkdirLockedError(
      f"{folder} is in use by another run (host {info.get('host')}, pid {info.get('pid')}, "
      f"started {info.get('started')}); wait for it or stop it{fix}, or use another folder")


def _me() -> str:
  return json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                     "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})


@contextlib.contextmanager
def _flock(folder) -> Iterator[None]:
  path = os.path.join(os.fspath(folder), LOCK)
  while True:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      text = os.pread(fd, 1 << 16, 0).decode(errors="replace")
      os.close(fd)
      raise _busy(folder, text, remote=False) from None
    if os.fstat(fd).st_nlink:
      break
    os.close(fd)  # its holder deleted it as we opened it: take the new file
  try:
    os.ftruncate(fd, 0)
    os.pwrite(fd, _me().encode(), 0)
    yield
  finally:
    os.unlink(path)  # while still held: a waiter that opened it sees st_nlink == 0
    os.close(fd)


def _gone(text: str) -> bool:
  """The holder was a process of this host that no longer runs."""
  try:
    info = json.loads(text)
    if info["host"] == socket.gethostname():
      os.kill(int(info["pid"]), 0)
  except ProcessLookupError:
    return True
  except (ValueError, KeyError, TypeError, OSError):
    pass
  return False


@contextlib.contextmanager
def _object(folder) -> Iterator[None]:
  path = upath(folder) / LOCK
  if path.exists():
    text = path.read_text()
    if not _gone(text):
      raise _busy(folder, text, remote=True)
    log.warning("took over the lock of %s: its holder is gone (%s)", folder, text)
  path.write_text(_me())
  try:
    yield
  finally:
    path.unlink(missing_ok=True)


@contextlib.contextmanager
def workdir_lock(folder, *, enabled: bool = True) -> Iterator[None]:
  """Hold the lock of ``folder`` (created if missing) for the block; ``enabled=False``
  (processes other than 0 of a multi-process run) holds nothing."""
  if not enabled:
    yield
    return
  try:
    upath(folder).mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise OSError(f"cannot create {folder}: {e.strerror}; choose a writable folder") from None
  with _flock(folder) if is_local(folder) else _object(folder):
    yield


@contextlib.contextmanager
def workdir_locks(folders, *, enabled: bool = True) -> Iterator[None]:
  """``workdir_lock`` of every folder (in order; all released at the end)."""
  with contextlib.ExitStack() as stack:
    for d in folders:
      stack.enter_context(workdir_lock(d, enabled=enabled))
    yield
