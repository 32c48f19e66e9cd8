"""One line naming the extra when a module of sbjax needs what the base install lacks: the base
install (``pip install sbjax``) is what ``sbjax.metrics`` needs; training, data, analysis, the
experiments and the command lines need ``pip install 'sbjax[train]'``."""

from __future__ import annotations

import importlib.util

TRAIN = ("flax", "optax", "orbax", "etils", "absl", "sentencepiece", "tensorflow_datasets",
         "scipy", "matplotlib")


def require(module: str, extra: str = "train", packages: tuple = TRAIN) -> None:
  """Raise one ``ModuleNotFoundError`` naming ``extra`` when a package it brings is missing."""
  missing = [p for p in packages if importlib.util.find_spec(p) is None]
  if missing:
    raise ModuleNotFoundError(f"{module} needs the [{extra}] extra ({', '.join(missing)} not "
                              f"installed): pip install 'sbjax[{extra}]'", name=missing[0])
