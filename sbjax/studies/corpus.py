"""The corpus an experiment runs on, set on its config by one rule (``--data``): a directory of
UTF-8 .txt files (default: the sample corpus shipped in the package) or, for a config whose
data source is ``tfds``, a TFDS dataset name (default: the config's)."""

from __future__ import annotations

import logging
from pathlib import Path

from sbjax.data.sample_corpus import sample_corpus_dir
from sbjax.paths import upath

log = logging.getLogger("sbjax")
DEFAULT_TEXT = sample_corpus_dir()


def text_corpus(data: str | Path | None = "") -> Path:
  """The corpus directory: ``data`` if given, else the packaged sample corpus
  (``sbjax.data.sample_corpus``). A clear error names the flag when ``data`` does not exist."""
  if not data:
    log.info("no --data given: using the sample corpus shipped with sbjax (%s; 5 plays, ~590 "
             "KB); published cpu-preset numbers used a larger corpus, pass --data=DIR",
             DEFAULT_TEXT)
    return DEFAULT_TEXT
  path = upath(data)  # gs://b/corpus: read through etils.epath
  if not path.is_dir():
    raise FileNotFoundError(f"corpus directory not found (--data={data}); pass --data=DIR, a "
                            "directory of UTF-8 .txt files")
  return path


def corpus_overrides(source: str, data: str | Path | None = "",
                     tfds_dir: str | Path | None = None) -> dict:
  """The dotted overrides that put a config of data source ``source`` on ``--data``: a TFDS
  name for ``tfds`` (none when ``data`` is empty: the config's own), else a text directory
  (``text_corpus``); ``tfds_dir`` is where a text corpus's token caches go
  (``data.options.data_dir``), left as it is when None."""
  if source == "tfds":
    return {"data.source": "tfds", **({"data.options.name": str(data)} if data else {})}
  out = {"data.source": "text", "data.options.path": str(text_corpus(data))}
  if tfds_dir is not None:
    out["data.options.data_dir"] = str(tfds_dir)
  return out
