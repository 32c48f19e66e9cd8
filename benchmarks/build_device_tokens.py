"""Token files of a text corpus for the accelerator presets (issue 32), built on a CPU.

  python benchmarks/build_device_tokens.py --data=DIR [--out=device_tokens]
      [--vocabs=1024,2048,4096,8192] [--max_mib=64]

For each V: one sentencepiece tokenizer trained on the corpus's training documents (the
``text`` source's document split, the same as every text preset), and in OUT/V<V>/:
``train.uint16.bin`` and ``val.uint16.bin`` (flat uint16 ids, the dtype in the name),
``tokenizer.model`` (to convert nats per token to nats per character) and ``meta.json``
(token counts, characters per validation token, how many token types the training split
holds fewer than 50 times). ``OUT/manifest.json`` lists every file with its size and sha256.
The whole folder must stay within ``--max_mib`` (the device machine takes at most 64 MiB of
carried files): a bigger result is refused before anything is written.

OUT is git-ignored (``/device_tokens/``) so the device tool's ``carry`` ships it, e.g.
``carry: ["device_tokens", ".whl"]``. Nothing is downloaded; the device scripts read the
files as ``--data=OUT/V1024/train.uint16.bin,OUT/V1024/val.uint16.bin``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RARE = 50  # a type seen fewer than RARE times in training is "rare" (the threshold)
FILES = ("train.uint16.bin", "val.uint16.bin", "tokenizer.model", "meta.json")


def tokenize(corpus: Path, vocab: int, work: Path):
  """(train ids, val ids, tokenizer path) of ``corpus`` at vocabulary ``vocab``."""
  from sbjax import overrides
  from sbjax.config import Config
  from sbjax.data import make_dataset
  from sbjax.studies.corpus import corpus_overrides
  dc = overrides.apply(Config(), {"data.options.vocab_size": vocab,
                                  **corpus_overrides("text", str(corpus), str(work / "tfds"))})
  ds = make_dataset(dc.data, seq_len=8, global_batch_size=1, seed=0, workdir=str(work),
                    process_index=0, process_count=1)
  return np.asarray(ds.train_tokens), np.asarray(ds.val_tokens), Path(ds.tokenizer_path)


def meta_of(vocab: int, tr: np.ndarray, va: np.ndarray, tok_path: Path) -> dict:
  """What the files hold: counts, characters per validation token, the rare types."""
  from sbjax.data.tokenizer import Tokenizer
  counts = np.bincount(tr, minlength=vocab)
  chars = len(Tokenizer(tok_path).decode(va.tolist()))
  return {"vocab_size": vocab, "train_tokens": int(len(tr)), "val_tokens": int(len(va)),
          "val_chars": chars, "chars_per_val_token": chars / max(len(va), 1),
          "types_unseen_in_train": int(np.sum(counts == 0)),
          f"types_seen_under_{RARE}": int(np.sum(counts < RARE)),
          "rare_threshold": RARE, "dtype": "uint16"}


def sha256(path: Path) -> str:
  return hashlib.sha256(path.read_bytes()).hexdigest()


def build(corpus: Path, out: Path, vocabs, max_mib: float = 64.0, log=print) -> dict:
  """Write the token files of every V into ``out`` (replacing OUT/V<V>/ only when all fit);
  returns the manifest."""
  corpus = Path(corpus)
  if not corpus.is_dir() or not any(corpus.glob("*.txt")):
    raise FileNotFoundError(f"--data={corpus}: not a directory of .txt files; pass the text "
                            "corpus to tokenise (e.g. a directory of Shakespeare plays)")
  for v in vocabs:
    if not 0 < v <= 65536:
      raise ValueError(f"--vocabs: V={v} does not fit uint16 ids; use 1 <= V <= 65536")
  with tempfile.TemporaryDirectory(prefix="sbjax_tokens_") as tmp:
    staged = {}
    for v in vocabs:
      t0 = time.perf_counter()
      tr, va, tok = tokenize(corpus, v, Path(tmp) / f"work{v}")
      d = Path(tmp) / f"V{v}"
      d.mkdir()
      tr.astype(np.uint16).tofile(d / FILES[0])
      va.astype(np.uint16).tofile(d / FILES[1])
      shutil.copyfile(tok, d / FILES[2])
      m = meta_of(v, tr, va, tok)
      (d / FILES[3]).write_text(json.dumps(m, indent=1))
      staged[v] = d
      log(f"V={v}: {m['train_tokens']:,} train + {m['val_tokens']:,} val tokens, "
          f"{m['chars_per_val_token']:.3f} chars/token, {time.perf_counter() - t0:.1f} s")
    total = sum(f.stat().st_size for d in staged.values() for f in d.iterdir())
    if total > max_mib * 2**20:
      raise ValueError(f"the token files take {total / 2**20:.1f} MiB, over --max_mib="
                       f"{max_mib:g} (what the device machine can carry); use fewer "
                       "--vocabs or a smaller --data corpus")
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for v, d in staged.items():
      shutil.rmtree(out / d.name, ignore_errors=True)
      shutil.copytree(d, out / d.name)
      for name in FILES:
        f = out / d.name / name
        files[f"{d.name}/{name}"] = {"bytes": f.stat().st_size, "sha256": sha256(f)}
  manifest = {"corpus": corpus.name, "vocabs": list(vocabs), "files": files,
              "total_bytes": total}
  (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
  log(f"{out}: {total / 2**20:.1f} MiB in all")
  return manifest


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--data", required=True, help="a directory of UTF-8 .txt files")
  ap.add_argument("--out", default="device_tokens", help="output folder (git-ignored)")
  ap.add_argument("--vocabs", default="1024,2048,4096,8192")
  ap.add_argument("--max_mib", type=float, default=64.0)
  a = ap.parse_args(argv)
  try:
    vocabs = [int(v) for v in a.vocabs.split(",") if v]
  except ValueError:
    print(f"error: --vocabs={a.vocabs!r} is not a comma-separated list of integers",
          file=sys.stderr)
    return 2
  try:
    build(Path(a.data), Path(a.out), vocabs, a.max_mib, log=lambda s: print(s, file=sys.stderr))
  except (FileNotFoundError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
