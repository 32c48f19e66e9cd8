"""Cost of checkpoint checksums against the save (and the restore) itself (NOT a test).

Saves the params + AdamW state of ``--config`` (default pythia-70m, ~850 MB) ``--reps``
times with ``sbjax.checkpoint.make_manager`` (synchronous), whose manager writes the SHA-256
manifest (``sbjax.checksums.write_manifest``) once orbax has finished the step. Per save:
``sealed_s`` = the whole ``save()``; ``hash_s`` = ``write_manifest`` again on the same step
(the files are in the page cache both times, as right after a save); ``save_s`` =
sealed_s - hash_s, the save alone; ``ratio`` = hash_s / save_s. At restore: ``verify_s``
(``verify_step``, every item) against ``restore_s`` (orbax restore of params + opt).
Also the hash throughput of SHA-256 and zlib's CRC-32 on the largest file (the "why
SHA-256" of ``sbjax.checksums``). Medians.

    PYTHONPATH=. python benchmarks/ckpt_checksum.py [--config=pythia-70m --reps=3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import zlib
from pathlib import Path

import _bench  # noqa: F401
from _bench import emit, machine, median, table


def _throughput(path: Path) -> dict:
  """MB/s of hashlib SHA-256 (the one sbjax uses) and zlib CRC-32 over one file's bytes."""
  from sbjax import checksums

  data = path.read_bytes()
  t = time.perf_counter()
  checksums.file_digest(path)
  sha = time.perf_counter() - t
  t = time.perf_counter()
  zlib.crc32(data)
  crc = time.perf_counter() - t
  mb = len(data) / 2 ** 20
  return {"file_mb": round(mb, 1), "sha256_mb_s": round(mb / sha), "crc32_mb_s": round(mb / crc)}


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--config", default="pythia-70m")
  ap.add_argument("--reps", type=int, default=3)
  a = ap.parse_args()

  import jax

  from sbjax import checkpoint as ckpt
  from sbjax import checksums, configs
  from sbjax.model import Model
  from sbjax.optim import make_optimizer

  cfg = configs.load(a.config)
  model = Model(cfg.model)
  p = model.init(jax.random.key(0), 1, 8)
  o = make_optimizer(cfg.train, cfg.model, p).init(p)
  nbytes = sum(x.nbytes for x in jax.tree.leaves((p, o)))
  ap_, ao_ = ckpt.abstract_with_shardings(p), ckpt.abstract_with_shardings(o)
  sealed, hashed, verified, restored, thr = [], [], [], [], {}
  for i in range(a.reps):
    with tempfile.TemporaryDirectory() as d:
      mngr = ckpt.make_manager(d)
      t = time.perf_counter()
      ckpt.save(mngr, i, p, o, {"step": i})
      sealed.append(time.perf_counter() - t)
      mngr.close()
      step_dir = ckpt.ckpt_dir(d) / str(i)
      t = time.perf_counter()
      checksums.write_manifest(step_dir)
      hashed.append(time.perf_counter() - t)
      t = time.perf_counter()
      assert ckpt.verify_step(d, i) is True
      verified.append(time.perf_counter() - t)
      t = time.perf_counter()
      jax.block_until_ready(ckpt.restore(d, i, ap_, ao_)[:2])
      restored.append(time.perf_counter() - t)
      if not thr:
        thr = _throughput(max((f for f in step_dir.rglob("*") if f.is_file()),
                              key=lambda f: f.stat().st_size))
  save_s = median(sealed) - median(hashed)
  emit({"bench": "ckpt_checksum", "config": a.config, "state_mb": round(nbytes / 2 ** 20, 1),
        "reps": a.reps, "sealed_s": round(median(sealed), 3), "hash_s": round(median(hashed), 3),
        "save_s": round(save_s, 3), "ratio": round(median(hashed) / save_s, 3),
        "verify_s": round(median(verified), 3), "restore_s": round(median(restored), 3),
        "verify_ratio": round(median(verified) / median(restored), 3), **thr, **machine()})
  print(table(["config", "state_mb", "save_s", "hash_s", "ratio", "restore_s", "verify_s",
               "verify_ratio", "sha256_mb_s", "crc32_mb_s", "load_avg_1m"]))


if __name__ == "__main__":
  main()
