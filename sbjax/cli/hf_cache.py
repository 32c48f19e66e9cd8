"""``--from_hf=org/name``: a model of the Hugging Face cache (``models--org--name`` in the hub
cache), found as ``from_pretrained`` would, without the network. A model with step revisions
(``refs/step1000``, ...) is a series: its repository directory is imported; otherwise the
snapshot that ``refs/main`` names. A path that exists is used as it is."""

from __future__ import annotations

import os
import re
from pathlib import Path

from sbjax.convert import revisions
from sbjax.paths import scheme, upath

_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


def hub_cache() -> Path:
  """The directory holding ``models--org--name`` (the hub's own rule)."""
  if os.environ.get("HF_HUB_CACHE"):
    return Path(os.environ["HF_HUB_CACHE"]).expanduser()
  home = os.environ.get("HF_HOME") or os.path.join(
      os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface")
  return Path(home).expanduser() / "hub"


def resolve(src: str) -> str:
  """The directory to import for ``--from_hf=src``: ``src`` itself when it exists, else the
  HF cache's copy of the model ``org/name``; FileNotFoundError naming where it looked."""
  if os.path.exists(src) or (scheme(src) and upath(src).exists()):  # gs://...: etils.epath
    return src
  if not _REPO_ID.fullmatch(src):
    raise FileNotFoundError(f"--from_hf={src} does not exist (give an HF model directory, a "
                            "directory of stepN revisions, or a model id org/name of the HF "
                            "cache)")
  repo = hub_cache() / ("models--" + src.replace("/", "--"))
  if not (repo / "snapshots").is_dir():
    raise FileNotFoundError(
        f"--from_hf={src}: no such directory, and the Hugging Face cache has no copy of it: "
        f"looked for {repo} (the cache is $HF_HUB_CACHE, else $HF_HOME/hub, else "
        "~/.cache/huggingface/hub); download it there first (from_pretrained, or "
        f"`huggingface-cli download {src}`), or pass its directory")
  if revisions.find(repo):  # a series: refs/step<N>
    return str(repo)
  main = repo / "refs" / "main"
  if main.is_file():
    snap = repo / "snapshots" / main.read_text().strip()
    if snap.is_dir():
      return str(snap)
  snaps = sorted(p for p in (repo / "snapshots").iterdir() if p.is_dir())
  if len(snaps) == 1:
    return str(snaps[0])
  raise FileNotFoundError(f"--from_hf={src}: {repo} names no step revisions and no readable "
                          f"refs/main; pass one snapshot, {repo}/snapshots/<commit>")


def model_name(src: str) -> str:
  """The run name of an import of ``src``: ``name`` of ``org/name``, else the directory's."""
  if not os.path.exists(src) and _REPO_ID.fullmatch(src):
    return src.split("/")[-1]
  return os.path.basename(os.path.normpath(src))
