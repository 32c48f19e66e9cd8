"""A Hugging Face cache directory built from saved model directories (no network)."""

import hashlib
import os
import shutil
from pathlib import Path

import jax
import numpy as np

from sbjax.convert import export_hf
from sbjax.model import Model


def write_hf_cache(cache: Path, repo_id: str, revisions: dict) -> Path:
  """``cache/models--org--name`` (blobs, snapshots linking to them, refs) for ``revisions`` =
  {revision: a save_pretrained directory}, equal files sharing a blob; returns the repository."""
  repo = Path(cache) / ("models--" + repo_id.replace("/", "--"))
  (repo / "blobs").mkdir(parents=True, exist_ok=True)
  for rev, src in revisions.items():
    files = sorted(p for p in Path(src).iterdir() if p.is_file())
    commit = hashlib.sha1(b"".join(hashlib.sha256(p.read_bytes()).digest() for p in files)
                          + rev.encode()).hexdigest()
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    for p in files:
      blob = repo / "blobs" / hashlib.sha256(p.read_bytes()).hexdigest()
      if not blob.exists():
        shutil.copyfile(p, blob)
      os.symlink(os.path.relpath(blob, snap), snap / p.name)
    ref = repo / "refs" / rev
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(commit)
  return repo


def tiny_neox(path, seed: int, **sizes):
  """A random transformers GPT-NeoX (``torch.manual_seed(seed)``) saved to ``path``, in eval mode;
  ``sizes`` override the small GPTNeoXConfig defaults below."""
  import torch  # deferred: only the tests that build HF models pay for torch
  import transformers  # deferred: as torch
  torch.manual_seed(seed)
  kw = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=32, rotary_pct=0.5,
            initializer_range=0.3, bos_token_id=0, eos_token_id=0)
  m = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**{**kw, **sizes})).eval()
  m.save_pretrained(str(path))
  return m


def exported_neox(mc, path, seed: int):
  """A random GPT-NeoX directory of ModelConfig ``mc`` written by sbjax's exporter (weights
  N(0, 0.1²) from ``seed``; no torch needed); returns ``path``."""
  rng = np.random.default_rng(seed)
  params = jax.tree.map(lambda a: (0.1 * rng.standard_normal(a.shape)).astype(np.float32),
                        Model(mc).abstract_params())
  export_hf(mc, params, str(path))
  return path
