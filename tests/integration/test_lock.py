"""One writer per folder, local and ``gs://``: a second writer stops until the holder is gone."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sbjax.paths import upath
from sbjax.train.lock import LOCK, WorkdirLockedError, workdir_lock
from tests._gcs_emulator import gcs_emulator

ROOT = Path(__file__).resolve().parents[2]
# the holder loads sbjax/train/lock.py alone (without sbjax.train's JAX imports)
HOLD = ("import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('lock', 'sbjax/train/lock.py')\n"
        "lock = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(lock)\n"
        "with lock.workdir_lock(sys.argv[1]):\n  print('held', flush=True)\n  sys.stdin.read()\n")


@pytest.mark.parametrize("where", ["local", "gs"])
def test_a_second_writer_stops_naming_the_holder_until_it_is_gone(where, tmp_path):
  with gcs_emulator("bkt") if where == "gs" else contextlib.nullcontext():
    folder = f"gs://bkt/{tmp_path.name}/out" if where == "gs" else str(tmp_path / "out")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, folder], cwd=ROOT, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
      assert holder.stdout.readline().strip() == "held"
      with pytest.raises(WorkdirLockedError) as e:
        with workdir_lock(folder):
          pass
      info = json.loads((upath(folder) / LOCK).read_text())
      assert (info["host"], info["pid"]) == (socket.gethostname(), holder.pid)
      assert str(e.value).startswith(f"{folder} is in use by another run (host "
                                     f"{socket.gethostname()}, pid {holder.pid}, started ")
      assert len(str(e.value).splitlines()) == 1
    finally:
      holder.send_signal(signal.SIGKILL)
      holder.wait()
    with workdir_lock(folder):  # the killed holder's lock is free (local) or gone (gs)
      assert json.loads((upath(folder) / LOCK).read_text())["pid"] == os.getpid()
    assert not (upath(folder) / LOCK).exists()
