"""The small public-domain text sample shipped with sbjax (package data): five Shakespeare
plays from Project Gutenberg, headers stripped (``sbjax/data/sample_text/README.md``).

    from sbjax.data.sample_corpus import sample_corpus_dir
    cfg.data.path = str(sample_corpus_dir())   # a directory of .txt files

It is the default corpus of the text experiments (``sbjax.studies.corpus.text_corpus``):
enough text for their ``test`` and ``quick`` presets; larger runs take ``--data=DIR``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

PACKAGE = "sbjax.data"
FOLDER = "sample_text"

__all__ = ["sample_corpus_dir", "sample_files"]


def sample_corpus_dir() -> Path:
  """The directory of the sample's ``.txt`` files, from a checkout, an editable install or a
  wheel (``importlib.resources``; the package must be installed as files, not in a zip)."""
  d = resources.files(PACKAGE).joinpath(FOLDER)
  if not isinstance(d, Path) or not d.is_dir():
    raise FileNotFoundError(f"the sbjax sample corpus {d} is not a directory on disk (sbjax is "
                            "installed in a zip, or its package data is missing); reinstall "
                            "sbjax from a wheel, or pass --data=DIR, a directory of .txt files")
  return d


def sample_files() -> list[Path]:
  """The sample's ``.txt`` files, sorted by name."""
  return sorted(sample_corpus_dir().glob("*.txt"))
