"""The data layer: planted-rank languages, local text, TFDS catalog datasets.

    from sbjax.data import make_dataset, Dataset
    ds = make_dataset(cfg.data, seq_len=..., global_batch_size=..., seed=..., workdir=...)
    ds.train_batch(i)      # int32 [B / process_count, seq_len + 1], pure in (seed, i, process)
    ds.eval_batches(n)     # n fixed validation batches

Modules: ``planted`` (PlantedLanguage, PlantedMixture), ``tokenizer`` (sentencepiece),
``hf_tokenizer`` (HF ``tokenizer.json`` files), ``tokens`` (token files on disk: ``.npy``
[n, T+1] or flat ``.bin``, the ``tokens`` source),
``text`` (directory corpora, document split, token caches), ``builders`` (TFDS array_record
builders ``local_text`` and ``planted_rank``, catalog reader), ``dataset`` (packing,
batching, ``make_dataset``). TensorFlow is not needed (TFDS array_record sources work without it).
"""

from sbjax.data.dataset import Dataset, make_dataset
from sbjax.data.planted import PlantedLanguage, PlantedMixture, numerical_rank
from sbjax.data.text import DataError
from sbjax.data.tokenizer import Tokenizer, train_tokenizer

__all__ = ["make_dataset", "Dataset", "PlantedLanguage", "PlantedMixture", "DataError",
           "numerical_rank", "Tokenizer", "train_tokenizer"]

