"""The data layer: planted-rank languages, local text, TFDS catalog datasets, token files.

    from sbjax.data import make_dataset, Dataset
    ds = make_dataset(cfg.data, seq_len=..., global_batch_size=..., seed=..., workdir=...)
    ds.train_batch(i)      # int32 [B / process_count, seq_len + 1], pure in (seed, i, process)
    ds.eval_batches(n)     # n fixed validation batches

``sources`` is the registry of ``data.source`` values (module doc there: the modules and the
one-way order of their imports). The names below are loaded on first use, so that
``sbjax.config`` can import the plain-Python ``sources`` and ``options`` without importing
jax, numpy or TFDS.
"""

from sbjax._extras import require

require("sbjax.data")

import importlib

_LAZY = {"make_dataset": "sources", "Dataset": "dataset", "PlantedLanguage": "planted",
         "PlantedMixture": "planted", "numerical_rank": "planted", "DataError": "text",
         "Tokenizer": "tokenizer", "train_tokenizer": "tokenizer"}

__all__ = ["make_dataset", "Dataset", "PlantedLanguage", "PlantedMixture", "DataError",
           "numerical_rank", "Tokenizer", "train_tokenizer"]


def __getattr__(name: str):
  if name in _LAZY:
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
