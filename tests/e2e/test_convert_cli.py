"""experiments.convert as a user runs it: a transformers-saved series -> an sbjax workdir
(orbax) -> Hugging Face directories that transformers loads with the same logits."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import transformers

from sbjax.cli import convert as convert_cli
from sbjax import checkpoint
from sbjax.convert import import_hf
from tests._hf_cache import tiny_neox
from tests.integration.test_convert_hf import assert_tree_equal

ROOT = Path(__file__).resolve().parents[2]
V = 61
SIZES = dict(vocab_size=V, hidden_size=32, num_attention_heads=4, intermediate_size=64,
             initializer_range=0.2)  # tiny_neox's GPT-NeoX config
transformers.logging.set_verbosity_error()


def _logits(m, tok):
  with torch.no_grad():
    return m(torch.tensor(tok)).logits.numpy()


def test_cli_series_import_and_export(tmp_path):
  series = tmp_path / "tiny-series"
  models = {s: tiny_neox(series / f"step{s}", s, **SIZES) for s in (0, 64)}
  work = tmp_path / "work"
  r = subprocess.run([sys.executable, "-m", "experiments.convert", f"--from_hf={series}",
                      f"--to={work}"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                     env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert r.returncode == 0, r.stderr[-3000:]
  assert checkpoint.list_steps(work) == [0, 64]
  conf = json.loads((work / "config.json").read_text())
  assert conf["model"]["max_len"] == 32 and conf["model"]["pos"] == "rotary"
  tok = np.random.RandomState(0).randint(0, V, (2, 16))
  for s, m in models.items():
    out = tmp_path / f"hf{s}"
    assert convert_cli.export_from_workdir(str(work), str(out), step=s) == s
    again = transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()
    np.testing.assert_array_equal(_logits(again, tok), _logits(m, tok))
    assert_tree_equal(import_hf(str(out))[1], import_hf(str(series / f"step{s}"))[1])
