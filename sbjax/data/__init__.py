"""The data layer: planted-rank languages, local text, TFDS catalog datasets.

    from sbjax.data import make_dataset, Dataset
    ds = make_dataset(cfg.data, seq_len=..., global_batch_size=..., seed=..., workdir=...)
    ds.train_batch(i)      # int32 [B / process_count, seq_len + 1], pure in (seed, i, process)
    ds.eval_batches(n)     # n fixed validation batches

Modules: ``planted`` (PlantedLanguage, PlantedMixture), ``tokenizer`` (sentencepiece),
``text`` (directory corpora, document split, token caches), ``builders`` (TFDS array_record
builders ``local_text`` and ``planted_rank``, catalog reader), ``pipeline`` (packing,
batching, ``make_dataset``). Importing this package does not import TensorFlow (which is not
needed) and imports tensorflow_datasets only when ``make_dataset``/``builders`` is used.
"""

from sbjax.data.planted import PlantedLanguage, PlantedMixture, numerical_rank
from sbjax.data.text import DataError

__all__ = ["make_dataset", "Dataset", "PlantedLanguage", "PlantedMixture", "DataError",
           "numerical_rank", "Tokenizer", "train_tokenizer"]


def __getattr__(name):
  # Lazy: tensorflow_datasets / sentencepiece are imported on first use.
  if name in ("make_dataset", "Dataset"):
    from sbjax.data import pipeline  # pylint: disable=g-import-not-at-top
    return getattr(pipeline, name)
  if name in ("Tokenizer", "train_tokenizer"):
    from sbjax.data import tokenizer  # pylint: disable=g-import-not-at-top
    return getattr(tokenizer, name)
  raise AttributeError(f"module 'sbjax.data' has no attribute {name!r}")
