"""The workdir lock: one writer per workdir, held for the whole run.

``workdir_lock(workdir)`` (a context manager) is taken by every command that writes a
workdir's checkpoints (``sbjax.train.train``, the Hugging Face import) before it writes
anything there. The lock is the file ``WORKDIR/LOCK``; it records the holder as JSON
``{"host", "pid", "started", "heartbeat"}``. A second writer stops with one line naming the
holder (its host and pid) and what to do (``WorkdirLockedError``).

- **Local disk**: the file is held with ``fcntl.flock``, which the kernel releases when the
  holder exits, however it exits (even SIGKILL). A ``LOCK`` file whose lock is free is stale
  (its holder is gone): it is taken over with a warning naming the old holder. The holder
  deletes the file when it releases the lock.
- **Remote storage** (``gs://``, any non-local ``etils.epath``, or a mount that refuses
  flock): the file is a lock *object* with a heartbeat. The holder rewrites ``heartbeat``
  (seconds since the epoch) every ``HEARTBEAT_S`` seconds from a daemon thread. A lock whose
  heartbeat is older than ``MISSED_HEARTBEATS`` intervals (5 min by default), or whose holder
  is a dead pid of this host, is stale and taken over with a warning; a holder that finds
  its object taken over logs an error. This is the simple version: it assumes the hosts'
  clocks agree to well within 5 min, and it narrows, without closing, the race of two
  writers that start at the same moment (each re-reads the object after writing it, and the
  one whose write did not survive stops; an object store has no compare-and-swap here).

Within one process the lock is re-entrant (``train_once`` holds it around ``train``).

A refused or failed call leaves no empty folder behind: when the block ends with an error (an
exception, or ``SystemExit`` with a non-zero or text code), the folders the call created (the
workdir and the missing parents it made; never a bucket) that hold no file once the lock is
released are removed, each alone (no recursive delete). A folder that existed before, or that
holds anything (partial results a rerun resumes from), is never touched; a call that ends well
keeps its folder even when it is empty.

``out_lock(out, flag=...)`` is the same lock for an experiment's output folder (``OUT/LOCK``,
taken by each ``python -m experiments.<name>`` for its whole call); its busy error names the
caller's option that chose the folder (the caller passes it: this module defines no flag).
The folder's own training workdirs (``OUT/runs/<arm>/``) take their own locks: other files,
other keys.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import fsspec

from sbjax.atomic import atomic_write_text, is_local
from sbjax.paths import upath

log = logging.getLogger("sbjax")

LOCK = "LOCK"
HEARTBEAT_S = 60.0
MISSED_HEARTBEATS = 5

_HELD: dict[str, list] = {}  # key -> [lock, depth]: the locks this process holds
_HELD_GUARD = threading.Lock()


class WorkdirLockedError(RuntimeError):
  """Another process holds the workdir's lock."""


class FlockUnsupported(OSError):
  """The workdir's file system refuses flock: the heartbeat lock is used there instead."""


def holder_info() -> dict:
  """This process as a lock holder: host, pid, start time (UTC) and a heartbeat."""
  now = time.time()
  started = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)
  return {"host": socket.gethostname(), "pid": os.getpid(),
          "started": started.strftime("%Y-%m-%dT%H:%M:%SZ"), "heartbeat": now,
          "token": uuid.uuid4().hex}


def describe(info: dict) -> str:
  if not info:
    return "a holder that has not yet recorded its host and pid"
  return f"host {info.get('host')}, pid {info.get('pid')}, started {info.get('started')}"


WORKDIR = ("workdir", "--workdir")  # what a lock's messages call its folder, and its flag


def busy_message(workdir, info: dict, names: tuple = WORKDIR) -> str:
  pid, host = info.get("pid", "?"), info.get("host", "?")
  return (f"the {names[0]} {workdir} is in use by another run ({describe(info)}); wait for it "
          f"to finish, stop it (kill {pid} on {host}), or use another {names[1]}")


def pid_alive(pid) -> bool:
  try:
    os.kill(int(pid), 0)
  except ProcessLookupError:
    return False
  except (PermissionError, ValueError, TypeError, OverflowError):
    return True  # another user's process, or not a pid we can check: assume it is alive
  return True


def _parse(text: str) -> dict:
  try:
    info = json.loads(text)
  except ValueError:
    return {}
  return info if isinstance(info, dict) else {}


class LocalLock:
  """``WORKDIR/LOCK`` held with ``flock`` (module doc)."""

  def __init__(self, workdir, names: tuple = WORKDIR):
    self.workdir, self.path, self.fd, self.names = workdir, Path(workdir) / LOCK, None, names

  def _read(self, fd) -> dict:
    return _parse(os.pread(fd, 1 << 16, 0).decode(errors="replace"))

  def _is_current(self, fd) -> bool:
    """The locked file is still ``self.path`` (the previous holder did not delete it)."""
    try:
      st = os.stat(self.path)
    except FileNotFoundError:
      return False
    return os.fstat(fd).st_ino == st.st_ino

  def acquire(self) -> None:
    for _ in range(100):
      try:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
      except FileNotFoundError:  # a refused call removed the empty folder it made: again
        _mkdir(self.workdir, self.names)
        continue
      except OSError as e:
        raise OSError(f"cannot write the lock file {self.path}: {e.strerror}; choose a "
                      f"writable {self.names[1]}") from None
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        info = self._read(fd)
        os.close(fd)
        raise WorkdirLockedError(busy_message(self.workdir, info, self.names)) from None
      except OSError as e:  # a file system without flock (some network mounts)
        os.close(fd)
        raise FlockUnsupported(e.strerror) from None
      if self._is_current(fd):
        break
      os.close(fd)  # the holder released and deleted it in between: take the new file
    else:
      raise WorkdirLockedError(f"could not take the lock {self.path}: it keeps being replaced")
    old = self._read(fd)
    if old:
      log.warning("took over the stale lock of %s: %s is gone (its lock was free)",
                  self.workdir, describe(old))
    data = json.dumps(holder_info()).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    os.fsync(fd)
    self.fd = fd

  def release(self) -> None:
    if self.fd is None:
      return
    if self._is_current(self.fd):
      os.unlink(self.path)  # while still locked: a waiter re-checks the inode
    os.close(self.fd)
    self.fd = None


class HeartbeatLock:
  """A lock object with a heartbeat, for remote storage (module doc)."""

  def __init__(self, workdir, interval_s: float = HEARTBEAT_S, missed: int = MISSED_HEARTBEATS,
               names: tuple = WORKDIR):
    self.workdir, self.path, self.names = workdir, upath(workdir) / LOCK, names
    self.interval, self.missed = interval_s, missed
    self.info, self.stop, self.thread = None, threading.Event(), None

  def _read(self) -> dict:
    try:
      return _parse(self.path.read_text())
    except (FileNotFoundError, OSError):
      return {}

  def stale(self, info: dict) -> bool:
    age = time.time() - float(info.get("heartbeat", 0))
    if age > self.interval * self.missed:
      return True
    return info.get("host") == socket.gethostname() and not pid_alive(info.get("pid"))

  def acquire(self) -> None:
    old = self._read() if self.path.exists() else {}
    if old and not self.stale(old):
      raise WorkdirLockedError(busy_message(self.workdir, old, self.names))
    if old:
      log.warning("took over the stale lock of %s: %s is gone (last heartbeat %.0f s ago)",
                  self.workdir, describe(old), time.time() - float(old.get("heartbeat", 0)))
    self.info = holder_info()
    atomic_write_text(self.path, json.dumps(self.info))
    now = self._read()
    if now.get("token") != self.info["token"]:
      raise WorkdirLockedError(busy_message(self.workdir, now, self.names))
    self.thread = threading.Thread(target=self._beat, daemon=True, name="sbjax-lock-heartbeat")
    self.thread.start()

  def _beat(self) -> None:
    while not self.stop.wait(self.interval):
      now = self._read()
      if now.get("token") != self.info["token"]:
        log.error("the lock of %s was taken over by %s (this run missed its heartbeats); "
                  "stop one of the two runs", self.workdir, describe(now))
        return
      self.info["heartbeat"] = time.time()
      atomic_write_text(self.path, json.dumps(self.info))

  def release(self) -> None:
    self.stop.set()
    if self.thread is not None:
      self.thread.join()
    if self.info is not None and self._read().get("token") == self.info["token"]:
      self.path.unlink(missing_ok=True)
    self.info = None


def make_lock(workdir, names: tuple = WORKDIR):
  return LocalLock(workdir, names) if is_local(workdir) else HeartbeatLock(workdir, names=names)


def _key(workdir) -> str:
  return os.path.realpath(workdir) if is_local(workdir) else os.fspath(workdir)


def new_folders(folder) -> list:
  """The folders that creating ``folder`` with its parents makes: ``folder`` and its missing
  ancestors, deepest first ([] when it exists). A bucket (``gs://bucket``) is never listed."""
  made, p = [], upath(folder)
  while not p.exists():
    if not is_local(p) and "/" not in os.fspath(p).split("://", 1)[1].rstrip("/"):
      break  # the bucket itself
    made.append(p)
    if p.parent == p:
      break
    p = p.parent
  return made


def remove_if_empty(folder) -> bool:
  """Remove ``folder`` if it holds no file (folders only, or nothing; True: it is gone). Never
  a recursive delete: each folder is removed alone, deepest first, and a file that another
  process writes meanwhile keeps its folder. Remote: a folder without objects is no folder;
  the file system's ``rmdir`` drops what marks an empty one (gcsfs: nothing to drop)."""
  try:
    if is_local(folder):
      if any(files for _, _, files in os.walk(folder)):  # stops at the first file
        return False
      for root, dirs, _ in os.walk(folder, topdown=False):  # deepest first
        for d in dirs:
          os.rmdir(os.path.join(root, d))  # refuses a folder that holds anything
      os.rmdir(folder)
      return True
    fs, path = fsspec.core.url_to_fs(os.fspath(folder))
    if not fs.exists(path):
      return True
    if fs.find(path):
      return False
    for d in sorted(fs.find(path, withdirs=True), key=len, reverse=True) + [path]:
      fs.rmdir(d)
    return True
  except FileNotFoundError:
    return True
  except OSError:
    return False


def failed(e: BaseException) -> bool:
  """Whether ``e`` ends a call with an error (``sys.exit(0)``/``sys.exit()`` does not)."""
  return not (isinstance(e, SystemExit) and e.code in (0, None))


@contextlib.contextmanager
def workdir_lock(workdir, *, enabled: bool = True, names: tuple = WORKDIR) -> Iterator[None]:
  """Hold the lock of ``workdir`` (created if missing) for the block; ``enabled=False``
  (processes other than 0 of a multi-process run) holds nothing; ``names``: what the
  messages call the folder and the flag that chooses it (default ``WORKDIR``; ``out_lock``
  names an output folder). A block that ends with an error (an exception, or ``SystemExit``
  with a non-zero or text code) removes the folders this call created (``workdir``, and the
  missing parents it made) that hold nothing once the lock is released: a refused call leaves
  no empty folder behind. A folder that existed before, or that holds anything (partial
  results a rerun resumes from), is never touched."""
  if not enabled:
    yield
    return
  made = new_folders(workdir)
  try:
    with _holding(workdir, names):
      yield
  except BaseException as e:
    if made and failed(e):
      for folder in made:  # deepest first; stop at the first that holds something
        if not remove_if_empty(folder):
          break
    raise


def _mkdir(workdir, names: tuple) -> None:
  try:
    upath(workdir).mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise OSError(f"cannot create the {names[0]} {workdir}: {e.strerror}; choose a writable "
                  f"{names[1]}") from None


@contextlib.contextmanager
def _holding(workdir, names: tuple) -> Iterator[None]:
  """``workdir`` created if missing and its lock held (re-entrant within the process)."""
  _mkdir(workdir, names)
  key = _key(workdir)
  with _HELD_GUARD:
    held = _HELD.get(key)
    if held is None:
      lock = make_lock(workdir, names)
      try:
        lock.acquire()
      except FlockUnsupported as e:
        log.warning("%s: no flock on this file system (%s); using a heartbeat lock", workdir, e)
        lock = HeartbeatLock(workdir, names=names)
        lock.acquire()
      held = _HELD[key] = [lock, 0]
    held[1] += 1
  try:
    yield
  finally:
    with _HELD_GUARD:
      held[1] -= 1
      if held[1] == 0:
        del _HELD[key]
        held[0].release()


@contextlib.contextmanager
def workdir_locks(workdirs, *, enabled: bool = True) -> Iterator[None]:
  """``workdir_lock`` of every workdir (in order; all released at the end)."""
  with contextlib.ExitStack() as stack:
    for d in workdirs:
      stack.enter_context(workdir_lock(d, enabled=enabled))
    yield


def out_lock(out, *, flag: str):
  """``workdir_lock`` of an experiment's output folder ``out`` (``OUT/LOCK``; module doc):
  one writer per folder; a second caller stops with one line naming the folder, the holder
  and ``flag`` (the option that chooses the folder), before it writes anything. A call that
  created the folder and ends with an error leaves no empty folder (``workdir_lock``)."""
  return workdir_lock(out, names=("output folder", flag))
