"""Bad inputs of ``convert``, an export over an HF cache's links, non-finite weights on request."""

import json
import shutil
import struct

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from sbjax import checkpoint as ckpt
from sbjax.cli import convert
from sbjax.convert import import_hf
from sbjax.data import hf_tokenizer
from tests._corpus import generated_docs
from tests._hf_cache import write_hf_cache
from tests.integration.test_bad_inputs import (assert_unchanged, check_cli, check_line, refusal,
                                               run_table, snapshot)

ST = "model.safetensors"


def _import(change=lambda tmp: None, src="hf", **kw):
  """An import of ``src`` (the HF directory) into a new workdir after ``change(tmp)``."""
  def setup(tmp):
    change(tmp)
    return lambda: convert.import_to_workdir(str(tmp / src), str(tmp / "new"), **kw)
  return setup


def _weights(edit):
  """An import of the HF directory after ``edit(tensors)`` rewrote its weights."""
  def change(tmp):
    t = load_file(tmp / "hf" / ST)
    edit(t)
    save_file(t, tmp / "hf" / ST)
  return _import(change)


def _raw(header, data: bytes):  # a hand-made safetensors file
  hb = json.dumps(header).encode()
  return _import(lambda tmp: (tmp / "hf" / ST).write_bytes(struct.pack("<Q", len(hb)) + hb + data))


def _hf_config(edit):
  return _import(lambda tmp: (tmp / "hf" / "config.json").write_text(
      edit(json.loads((tmp / "hf" / "config.json").read_text()))))


def _set(key, value):
  return _hf_config(lambda c: json.dumps({**c, key: value}))


def _tensor(t, suffix):
  return sorted(k for k in t if k.endswith(suffix))[0]


def _nan(t):
  t[_tensor(t, "dense_h_to_4h.weight")][0, 0] = np.nan


def _wrong_shape(t):
  t[_tensor(t, "dense_h_to_4h.weight")] = np.zeros((1, 1), np.float32)


def pickle_only(tmp):
  (tmp / "hf" / ST).unlink()
  (tmp / "hf" / "pytorch_model.bin").write_bytes(b"not read: refused before loading")


def blob_truncated(tmp):
  blob = next((tmp / "cache").glob(f"{REPO}/snapshots/*/{ST}")).resolve()
  data = blob.read_bytes()
  blob.unlink()
  blob.write_bytes(data[:-100])  # a partial download


def into_training_workdir(tmp):
  (tmp / "run" / "metrics.jsonl").write_text(json.dumps({"step": 0, "loss": 4.0}) + "\n")
  return lambda: convert.import_to_workdir(str(tmp / "hf"), str(tmp / "run"), step=3)


def _export(to, **kw):
  return lambda tmp: (lambda: convert.export_from_workdir(str(tmp / "run"), str(tmp / to), **kw))


def export_into_files(tmp):
  (tmp / "out").mkdir()
  (tmp / "out" / "notes.txt").write_text("mine\n")
  return _export("out")(tmp)


REPO = "models--org--tiny"
F32 = {"dtype": "F32", "shape": [2]}
CONVERT_ROWS = [  # name, setup, the error line holds, exit status
    # safetensors read by the safetensors package, with the format's checks
    ("a safetensors header that is a JSON list", _raw([1, 2], b""),
     "not a valid safetensors file (Error while deserializing header: invalid JSON", 2),
    ("a truncated weight file", _raw({"a": {**F32, "data_offsets": [0, 8]}}, b"0" * 5),
     "incomplete metadata, file not fully covered", 2),
    # the weights and the config
    ("NaN weights", _weights(_nan), "weights hold NaN or inf values in 1 tensor(s): "
     "gpt_neox.layers.0.mlp.dense_h_to_4h.weight", 2),
    ("a missing tensor", _weights(lambda t: t.pop(_tensor(t, "attention.dense.weight"))),
     "missing keys (1)", 2),
    ("a tensor of the wrong shape", _weights(_wrong_shape), "shape mismatches (1): gpt_neox.layers.0"
     ".mlp.dense_h_to_4h.weight: got (1, 1)", 2),
    ("an unknown tensor", _weights(lambda t: t.update(extra=np.zeros(2, np.float32))),
     "unknown keys (1): extra", 2),
    ("no weights", _import(lambda tmp: (tmp / "hf" / ST).unlink()), "no weights found", 2),
    ("an HF config without hidden_size", _hf_config(lambda c: json.dumps(
        {k: v for k, v in c.items() if k != "hidden_size"})),
     "config.json lacks hidden_size, which a gpt_neox config needs", 2),
    ("a negative layer-norm epsilon", _set("layer_norm_eps", -1),
     "config.json: invalid config: model.ln_eps=-1.0", 2),
    ("heads that do not divide the width", _set("num_attention_heads", 3),
     "config.json: invalid config: model.n_heads=3", 2),
    ("an HF config that is no JSON", _hf_config(lambda c: "{oops"), "config.json is not valid JSON",
     2),
    ("an HF config that is a list", _hf_config(lambda c: "[]"), "holds a JSON list", 2),
    ("an unsupported architecture", _set("model_type", "llama"), "unsupported model_type 'llama'",
     2),
    ("a classification head", _set("architectures", ["GPTNeoXForSequenceClassification"]),
     "unsupported architectures ['GPTNeoXForSequenceClassification']", 2),
    ("an unsupported activation", _set("hidden_act", "relu"),
     "unsupported activation hidden_act='relu'; supported: ['gelu'", 2),
    ("rope scaling", _set("rope_parameters", {"rope_type": "linear", "factor": 2.0}),
     "unsupported rope_type 'linear' (rope scaling)", 2),
    ("pickle weights only", _import(pickle_only), "has only PyTorch pickle weights", 2),
    ("a shard index naming a missing shard", _import(lambda tmp: (
        tmp / "hf" / "model.safetensors.index.json").write_text(json.dumps(
            {"weight_map": {"embed": "model-00001-of-00002.safetensors"}}))),
     "shard files listed in model.safetensors.index.json are missing", 2),
    ("a series without the revision asked for", _import(src=f"cache/{REPO}", steps="0,4000"),
     "requested revision step(s) [4000] not found", 2),
    ("a series revision whose snapshot is gone", _import(lambda tmp: shutil.rmtree(next(
        (tmp / "cache").glob(f"{REPO}/snapshots/*"))), f"cache/{REPO}"),
     "revision 'step0' points to snapshot", 2),
    ("a series revision whose blob is truncated", _import(blob_truncated, f"cache/{REPO}"),
     "revision 'step0': ", 2),
    ("a missing source folder", _import(src="nowhere"), "does not exist", 2),
    ("an import into a training workdir", into_training_workdir, "is a training workdir", 2),
    # exports
    ("an export into a workdir", _export("run", overwrite=True), "is an sbjax workdir", 2),
    ("an export into a non-empty folder", export_into_files,
     "is not empty (1 entries: notes.txt)", 2),
    ("an export of a step that is not saved", _export("out", step=9),
     "step 9 is not checkpointed", 2),
]


@pytest.fixture(scope="module")
def hf_cache(tmp_path_factory, hf_dir):
  """An HF cache holding the tiny export as revision step0 (files are links to blobs)."""
  return write_hf_cache(tmp_path_factory.mktemp("cache"), "org/tiny", {"step0": hf_dir}).parent


def _inputs(tmp, run_dir, hf_dir, hf_cache):
  shutil.copytree(run_dir, tmp / "run")
  shutil.copytree(hf_dir, tmp / "hf")
  shutil.copytree(hf_cache, tmp / "cache", symlinks=True)


@pytest.mark.parametrize("name,setup,expected,code", CONVERT_ROWS,
                         ids=[r[0] for r in CONVERT_ROWS])
def test_convert_refuses(name, setup, expected, code, tmp_path, run_dir, hf_dir, hf_cache):
  _inputs(tmp_path, run_dir, hf_dir, hf_cache)
  action = setup(tmp_path)
  before = snapshot(tmp_path)
  check_line(*refusal(action), expected, code)
  assert_unchanged(tmp_path, before)
  assert not (tmp_path / "new").exists()


def _cli(*args):
  def setup(d, ctx):
    _inputs(d, *ctx)
    return ["experiments.convert", *(a.format(d=d) for a in args)]
  return setup


CONVERT_CLI = [
    ("import without --to", _cli("--from_hf={d}/hf"),
     "error: import needs both --from_hf and --to", 2),
    ("import and export at once", _cli("--from_hf={d}/hf", "--to_hf={d}/x"),
     "error: give either --from_hf=DIR --to=WORKDIR (import) or", 2),
    ("an unknown dtype", _cli("--from_hf={d}/hf", "--to={d}/new", "--dtype=float8"),
     "error: flag --dtype=float8", 2),
    ("an export into a non-empty folder without --overwrite",
     _cli("--from_workdir={d}/run", "--to_hf={d}/hf"), "is not empty", 2),
]


@pytest.fixture(scope="module")
def convert_cli(tmp_path_factory, run_dir, hf_dir, hf_cache):
  return run_table(tmp_path_factory.mktemp("convert_cli"), CONVERT_CLI,
                   (run_dir, hf_dir, hf_cache))


@pytest.mark.e2e  # starts a command-line process
@pytest.mark.parametrize("name,setup,expected,code", CONVERT_CLI, ids=[r[0] for r in CONVERT_CLI])
def test_convert_cli_refuses(name, setup, expected, code, convert_cli):
  result, before, d = convert_cli[name]
  check_cli(result, expected, code)
  assert_unchanged(d, before)
  assert not (d / "new").exists()


def test_an_export_over_links_replaces_them_and_leaves_their_targets(tmp_path, run_dir, hf_dir):
  """``--overwrite`` into a cache snapshot whose config.json, weights and tokenizer files are
  links to shared blobs: each link becomes the exported file; no blob changes."""
  shutil.copytree(run_dir, tmp_path / "run")
  docs = generated_docs(3, 4, 20)
  hf_tokenizer.train_bpe(docs, tmp_path / "run" / "tokenizer.json", vocab_size=64)
  src = tmp_path / "rev"
  shutil.copytree(hf_dir, src)
  for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
    (src / name).write_text(f"{name} of another revision\n")
  repo = write_hf_cache(tmp_path / "cache", "org/tiny", {"step0": src})
  snap = next((repo / "snapshots").iterdir())
  blobs = snapshot(repo / "blobs")
  assert all((snap / n).is_symlink() for n in ("config.json", ST, "tokenizer.json"))
  convert.export_from_workdir(str(tmp_path / "run"), str(snap), overwrite=True)
  assert snapshot(repo / "blobs") == blobs
  for n in ("config.json", ST, "tokenizer.json", "tokenizer_config.json"):
    assert (snap / n).is_file() and not (snap / n).is_symlink(), n
  cfg, _ = import_hf(str(snap))
  assert cfg == ckpt.load_config(tmp_path / "run").model


def test_nonfinite_weights_import_when_asked_for(tmp_path, hf_dir):
  shutil.copytree(hf_dir, tmp_path / "hf")
  _weights(_nan)(tmp_path)
  steps = convert.import_to_workdir(str(tmp_path / "hf"), str(tmp_path / "new"),
                                    allow_nonfinite=True)
  _, params, _ = ckpt.load_params(tmp_path / "new", steps[0])
  assert np.isnan(params["block_0"]["mlp"]["fc_in_kernel"][0, 0])
