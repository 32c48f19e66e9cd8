"""Hugging Face import and export without torch (``sbjax[hf]`` has no torch: test_packaging.py).
In a fresh interpreter where ``import torch`` raises ImportError (a meta-path finder), a model
exported to safetensors reads back bit for bit, and pickle weights are one clear error naming
torch."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

BLOCK_TORCH = textwrap.dedent("""
  import importlib.abc, sys
  class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
      if name == "torch" or name.startswith("torch."):
        raise ImportError("torch is blocked in this test: " + name)
  sys.meta_path.insert(0, NoTorch())
""")

CHECK = textwrap.dedent("""
  import json
  from pathlib import Path
  import numpy as np
  import jax
  from sbjax.config import ModelConfig
  from sbjax.convert import export_hf, import_hf
  from sbjax.model import Model

  out = Path(sys.argv[1])
  try:
    import torch
    raise SystemExit("torch was not blocked")
  except ImportError:
    pass
  mc = ModelConfig(vocab_size=64, d_model=16, n_layers=2, n_heads=2, max_len=32, d_ff=32)
  rng = np.random.default_rng(3)
  params = jax.tree.map(lambda a: (0.1 * rng.standard_normal(a.shape)).astype(np.float32),
                        Model(mc).abstract_params())
  export_hf(mc, params, str(out / "hf"))
  cfg2, p2 = import_hf(str(out / "hf"))
  assert cfg2 == mc, (cfg2, mc)
  same = jax.tree.map(lambda a, b: bool(np.array_equal(np.asarray(a), np.asarray(b))), params, p2)
  assert all(jax.tree.leaves(same)), same
  pk = out / "pickle"
  pk.mkdir()
  (pk / "config.json").write_text((out / "hf" / "config.json").read_text())
  (pk / "pytorch_model.bin").write_bytes(b"not read")
  try:
    import_hf(str(pk), allow_pickle=True)
    raise SystemExit("a pickle was read without torch")
  except RuntimeError as e:
    msg = str(e)
  print(json.dumps({"n_tensors": len(jax.tree.leaves(p2)), "torch_loaded": "torch" in sys.modules,
                    "pickle_error": msg}))
""")


@pytest.mark.e2e  # a fresh interpreter (the e2e layer; tests/conftest.py)
def test_hf_import_and_export_without_torch(tmp_path):
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  r = subprocess.run([sys.executable, "-c", BLOCK_TORCH + CHECK, str(tmp_path)], cwd=REPO,
                     capture_output=True, text=True, timeout=300, env=env)
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
  res = json.loads(r.stdout.strip().splitlines()[-1])
  assert res["n_tensors"] > 10 and not res["torch_loaded"]
  assert "pip install torch" in res["pickle_error"]
  assert "pytorch_model.bin" in res["pickle_error"]
