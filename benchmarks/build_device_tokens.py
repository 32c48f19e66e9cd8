"""Token files of a text corpus for the accelerator presets, built on a CPU (NOT a test).

  python benchmarks/build_device_tokens.py --data=DIR [--out=device_tokens]
      [--vocabs=1024,2048,4096,8192]

For each V: a sentencepiece tokenizer trained on the corpus's training documents (the
``text`` source's document split, as every text preset), and in OUT/V<V>/ the flat uint16
ids ``train.uint16.bin`` and ``val.uint16.bin`` and ``tokenizer.model``. OUT is git-ignored;
``benchmarks/device_science.sh`` reads it (collapse: ``OUT/V1024/{train,val}.uint16.bin``,
vocab_threshold: the folder).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np


def build(corpus: Path, out: Path, vocab: int, work: Path) -> None:
  """OUT/V<vocab>/: the corpus's train and validation ids and its tokenizer."""
  from sbjax import overrides
  from sbjax.config import Config
  from sbjax.data import make_dataset
  from sbjax.studies.corpus import corpus_overrides

  if not 0 < vocab <= 65536:
    raise SystemExit(f"error: --vocabs: V={vocab} does not fit uint16 ids; use 1 <= V <= 65536")
  cfg = overrides.apply(Config(), {"data.options.vocab_size": vocab,
                                   **corpus_overrides("text", str(corpus), str(work / "tfds"))})
  ds = make_dataset(cfg.data, seq_len=8, global_batch_size=1, seed=0, workdir=str(work),
                    process_index=0, process_count=1)
  d = out / f"V{vocab}"
  d.mkdir(parents=True, exist_ok=True)
  np.asarray(ds.train_tokens, np.uint16).tofile(d / "train.uint16.bin")
  np.asarray(ds.val_tokens, np.uint16).tofile(d / "val.uint16.bin")
  shutil.copyfile(ds.tokenizer_path, d / "tokenizer.model")
  print(f"{d}: {len(ds.train_tokens):,} train + {len(ds.val_tokens):,} val tokens", flush=True)


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--data", required=True, help="a directory of UTF-8 .txt files")
  ap.add_argument("--out", default="device_tokens", help="output folder (git-ignored)")
  ap.add_argument("--vocabs", default="1024,2048,4096,8192")
  a = ap.parse_args(argv)
  with tempfile.TemporaryDirectory(prefix="sbjax_tokens_") as tmp:
    for v in a.vocabs.split(","):
      build(Path(a.data), Path(a.out), int(v), Path(tmp) / f"work{v}")


if __name__ == "__main__":
  main()
