"""Hugging Face import and export without torch (``sbjax[hf]`` has no torch: test_packaging.py).
In a fresh interpreter where ``import torch`` fails, a model exported to safetensors reads back
(bit for bit: test_convert_hf.py), and pickle weights are one clear error naming torch."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CHECK = textwrap.dedent("""
  import sys
  sys.modules["torch"] = None  # import torch: ImportError
  from pathlib import Path
  from sbjax.config import ModelConfig
  from sbjax.convert import import_hf
  from tests._hf_cache import exported_neox

  out = Path(sys.argv[1])
  mc = ModelConfig(vocab_size=64, d_model=16, n_layers=2, n_heads=2, max_len=32, d_ff=32)
  assert import_hf(str(exported_neox(mc, out / "hf", 3)))[0] == mc
  (out / "hf" / "model.safetensors").unlink()
  (out / "hf" / "pytorch_model.bin").write_bytes(b"not read")
  try:
    import_hf(str(out / "hf"), allow_pickle=True)
  except RuntimeError as e:
    print(e)
""")


@pytest.mark.e2e  # a fresh interpreter (the e2e layer; tests/conftest.py)
def test_hf_import_and_export_without_torch(tmp_path):
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  r = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path)], cwd=REPO,
                     capture_output=True, text=True, timeout=300, env=env)
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
  assert "pip install torch" in r.stdout and "pytorch_model.bin" in r.stdout, r.stdout
