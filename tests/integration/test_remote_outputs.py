"""Outputs and inputs beyond the workdir on a non-local etils.epath backend (``gs://`` served
by fsspec's in-memory file system, tests/_fake_gcs.py): the experiment runner's output folder
(``sbjax.cli.reproduce.Suite``) and the experiments' writers (``experiments.shared``), a text
corpus and its tokenizer.json read from ``gs://``, lm-eval results joined from ``gs://``, and
Hugging Face imports from and exports to ``gs://``. Each is compared with the same call on
local disk, and no local ``gs:`` folder appears. An experiment's whole folder (the saturation
experiment's test preset), a convert round trip and orbax on a real GCS server:
tests/e2e/test_remote_outputs_gcs.py."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import jax
import numpy as np
import pytest

from experiments import shared
from sbjax import checkpoint, paths
from sbjax.analysis import evals
from sbjax.cli import convert as convert_cli
from sbjax.cli.reproduce import Suite
from sbjax.config import DataConfig, ModelConfig
from sbjax.data import hf_tokenizer, make_dataset
from sbjax.data.text import scan_text_dir
from sbjax.studies import convergence, corpus, rank_sweep
from tests._corpus import generated_docs, write_corpus
from tests._fake_gcs import fake_gcs
from tests._hf_cache import exported_neox

B = "gs://bkt"
MC = ModelConfig(vocab_size=48, d_model=16, n_layers=1, n_heads=2, max_len=32)


@pytest.fixture
def store(tmp_path, monkeypatch):
  cwd = tmp_path / "cwd"
  cwd.mkdir()
  monkeypatch.chdir(cwd)  # a pathlib bug would write ./gs:/bkt/... here
  monkeypatch.setenv("SBJAX_DATA_CACHE", str(tmp_path / "cache"))
  with fake_gcs() as s:
    yield s
  assert os.listdir(cwd) == [], "a local folder was written for a gs:// path"


def _upload(local: Path, url: str) -> None:
  """Every file under ``local`` as objects under ``url``."""
  for f in sorted(p for p in local.rglob("*") if p.is_file()):
    dst = paths.upath(url) / f.relative_to(local).as_posix()
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(f.read_bytes())


def _objects(store, prefix: str) -> dict:
  """{name relative to ``prefix``: bytes} of the store's objects under ``prefix``."""
  return {k[len(prefix) + 1:]: bytes(v.getvalue()) for k, v in store.items()
          if k.startswith(prefix + "/")}


def _files(root: Path) -> dict:
  return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


# ------------------------------------------------------------------ the experiment runner

PRESETS = {"test": {}}  # this module is the toy experiment of the Suite below


def run(out, preset, *, data=None):
  """A toy experiment through experiments.shared's writers: a CSV, a JSON, an npz, a figure."""
  import matplotlib.pyplot as plt  # deferred: only this test draws
  out = shared.upath(out)
  out.mkdir(parents=True, exist_ok=True)
  shared.write_rows(out / "toy.csv", [{"step": 0, "loss": 2.5}, {"step": 8, "loss": 1 / 3}])
  shared.write_json(out / "toy.json", {"preset": preset, "data": data})
  shared.save_npz(out / "toy.npz", w=np.arange(6, dtype=np.float32).reshape(2, 3))
  fig, ax = plt.subplots(figsize=(2, 2))
  ax.plot([0, 8], [2.5, 1 / 3])
  shared.save_figure(fig, out / "toy.png", dpi=50)
  plt.close(fig)


def report_section(out, rel):
  out = shared.upath(out)
  rows = shared.read_rows(out / "toy.csv")
  with shared.load_np(out / "toy.npz") as z:
    total = float(z["w"].sum())
  return f"## toy\n\nlast loss {rows[-1]['loss']:.4f}; w sums to {total:g}; ![]({rel}/toy.png)\n"


def test_the_runner_writes_its_report_and_an_experiments_files_to_the_store(store, tmp_path):
  suite = Suite({"toy": __name__}, ("toy",))
  timings = suite.run_all(f"{B}/out", ["toy"], "test", verbose=False, data="gs://bkt/corpus")
  assert timings["toy"]["status"] == "ok", timings
  suite.run_all(tmp_path / "local", ["toy"], "test", verbose=False, data="gs://bkt/corpus")
  remote, local = _objects(store, f"{B}/out"), _files(tmp_path / "local")
  assert sorted(remote) == sorted(local) == ["report.md", "timings.json", "toy/toy.csv",
                                             "toy/toy.json", "toy/toy.npz", "toy/toy.png"]
  for name in ("toy/toy.csv", "toy/toy.json"):
    assert remote[name] == local[name]
  assert remote["toy/toy.png"][:4] == b"\x89PNG"
  np.testing.assert_array_equal(np.load(io.BytesIO(remote["toy/toy.npz"]))["w"],
                                np.arange(6).reshape(2, 3))
  report = remote["report.md"].decode()
  assert "last loss 0.3333; w sums to 15; ![](toy/toy.png)" in report
  assert json.loads(remote["timings.json"])["toy"]["status"] == "ok"
  # a rerun with another selection reads the remote timings back and keeps the section
  suite.write_report(f"{B}/out")
  assert "## toy" in _objects(store, f"{B}/out")["report.md"].decode()


# ------------------------------------------------------------------ a text corpus on gs://

def test_a_text_corpus_on_the_store_reads_as_its_local_copy(store, tmp_path):
  docs = generated_docs(3, 6, n_lines=20)
  local = write_corpus(tmp_path / "corpus", docs)
  write_corpus(local / "more", docs[:2], prefix="sub")
  (local / "notes.md").write_text("not a .txt file")
  _upload(local, f"{B}/corpus")
  remote, here = scan_text_dir(f"{B}/corpus"), scan_text_dir(local)
  assert remote.docs == here.docs and remote.identity == here.identity
  assert [n for n, _ in remote.docs][-2:] == ["more/sub00.txt", "more/sub01.txt"]
  assert corpus.corpus_overrides("text", f"{B}/corpus") == {"data.source": "text",
                                                              "data.options.path": f"{B}/corpus"}
  with pytest.raises(FileNotFoundError, match="corpus directory not found"):
    corpus.text_corpus(f"{B}/nothing")
  tok = hf_tokenizer.train_bpe(docs, tmp_path / "tok" / "tokenizer.json", vocab_size=300)
  _upload(tmp_path / "tok", f"{B}/tok")
  ds = {}  # the corpus and its tokenizer.json (data.options.tokenizer): both on the store or here
  for key, path, tj in (("gs", f"{B}/corpus", f"{B}/tok/tokenizer.json"),
                        ("local", str(local), tok.path)):
    cfg = DataConfig(source="text", options=dict(path=path, tokenizer=str(tj), val_fraction=0.25))
    ds[key] = make_dataset(cfg, seq_len=16, global_batch_size=4, workdir=str(tmp_path / key),
                           process_index=0, process_count=1)
  assert ds["gs"].vocab_size == ds["local"].vocab_size == 300
  assert (tmp_path / "gs" / "tokenizer.json").read_bytes() == tok.serialized()
  np.testing.assert_array_equal(np.asarray(ds["gs"].val_tokens), np.asarray(ds["local"].val_tokens))


# ------------------------------------------------------------------ lm-eval results on gs://

def _lmeval(acc: float, revision: str | None = None) -> str:
  args = "pretrained=x" + (f",revision={revision}" if revision else "")
  return json.dumps({"results": {"lambada": {"acc,none": acc, "alias": "lambada"}},
                     "config": {"model_args": args}})


def test_evaluations_are_joined_from_the_store(store, tmp_path):
  files = {"step1000/results_2026-01-01.json": _lmeval(0.25),
           "any/name.json": _lmeval(0.5, "step2000-tokens4B")}
  for name, text in files.items():
    (tmp_path / "ev" / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "ev" / name).write_text(text)
  _upload(tmp_path / "ev", f"{B}/ev")
  got = evals.read_all(f"{B}/ev")
  assert got == evals.read_all(tmp_path / "ev") == {1000: {"lmeval_lambada_acc": 0.25},
                                                    2000: {"lmeval_lambada_acc": 0.5}}
  assert evals.read_all(f"{B}/ev/step1000/results_2026-01-01.json") == {1000: got[1000]}
  with pytest.raises(FileNotFoundError, match="--join_evals=gs://bkt/none does not exist"):
    evals.read_all(f"{B}/none")


# ------------------------------------------------------------------ Hugging Face directories

@pytest.fixture(scope="module")
def hf(tmp_path_factory):
  """Two revisions of a tiny GPT-NeoX written by sbjax's exporter (no torch)."""
  d = tmp_path_factory.mktemp("hf")
  for s in (1, 2):
    exported_neox(MC, d / "series" / f"step{s * 1000}", seed=s)
  return d / "series"


def _params_equal(a: str, b: str, step: int) -> None:
  pa, pb = checkpoint.load_params(a, step)[1], checkpoint.load_params(b, step)[1]
  jax.tree.map(np.testing.assert_array_equal, pa, pb)


def test_import_from_the_store_equals_the_local_import(store, tmp_path, hf):
  _upload(hf, f"{B}/series")
  assert convert_cli.import_to_workdir(f"{B}/series/step1000", str(tmp_path / "a")) == [1000]
  assert convert_cli.import_to_workdir(str(hf / "step1000"), str(tmp_path / "b")) == [1000]
  _params_equal(str(tmp_path / "a"), str(tmp_path / "b"), 1000)
  rec = json.loads((tmp_path / "a" / "import.json").read_text())
  assert rec["source"] == f"{B}/series/step1000" and rec["revisions"][0]["name"] == "step1000"
  local = json.loads((tmp_path / "b" / "import.json").read_text())["revisions"][0]
  assert rec["revisions"][0]["weights_sha256"] == local["weights_sha256"]
  # a series of revisions on the store: every step, and the convergence study's source
  assert convert_cli.import_to_workdir(f"{B}/series", str(tmp_path / "s")) == [1000, 2000]
  _params_equal(str(tmp_path / "s"), str(tmp_path / "b"), 1000)
  src = convergence.series_source(f"{B}/series")
  assert (src.name, src.steps) == ("series", [1000, 2000])
  with pytest.raises(FileNotFoundError, match="--from_hf=gs://bkt/nope does not exist"):
    convert_cli.import_to_workdir(f"{B}/nope", str(tmp_path / "c"))


def test_export_to_the_store_equals_the_local_export(store, tmp_path, hf):
  wd = str(tmp_path / "wd")
  convert_cli.import_to_workdir(str(hf / "step2000"), wd)
  assert convert_cli.export_from_workdir(wd, f"{B}/export") == 2000
  convert_cli.export_from_workdir(wd, str(tmp_path / "export"))
  assert _objects(store, f"{B}/export") == _files(tmp_path / "export")
  assert sorted(_files(tmp_path / "export")) == ["config.json", "model.safetensors"]
  with pytest.raises(ValueError, match=r"--to_hf=gs://bkt/export is not empty \(2 entries"):
    convert_cli.export_from_workdir(wd, f"{B}/export")
  paths.upath(f"{B}/run/metrics.jsonl").write_text("{}\n")
  with pytest.raises(ValueError, match=r"--to_hf=gs://bkt/run is an sbjax workdir \(it holds "
                                       r"metrics.jsonl\)"):
    convert_cli.export_from_workdir(wd, f"{B}/run", overwrite=True)
  # the head_rank sweep's full head (np.save through epath) from this workdir's params
  w = rank_sweep.save_full_head(paths.upath(f"{B}/sweep"), Path(wd))
  np.testing.assert_array_equal(shared.load_np(f"{B}/sweep/{rank_sweep.FULL_HEAD}"), w)
  assert w.shape == (MC.vocab_size, MC.d_model)



# ------------------------------------------------------------------ sbjax.paths' folder helpers

def test_local_dir_copies_a_tree_once_and_staged_dir_uploads_only_on_success(store, tmp_path):
  root = paths.upath(f"{B}/tree")
  (root / "sub").mkdir(parents=True, exist_ok=True)
  (root / "a.txt").write_text("a")
  (root / "sub" / "b.bin").write_bytes(b"\0\1")
  first = Path(paths.local_dir(f"{B}/tree"))
  assert _files(first) == {"a.txt": b"a", "sub/b.bin": b"\0\1"} and first.name == "tree"
  (first / "a.txt").write_text("kept")  # a second call reuses the copy: nothing is fetched
  assert paths.local_dir(f"{B}/tree") == str(first) and (first / "a.txt").read_text() == "kept"
  (root / "a.txt").write_text("changed")  # another size: another copy
  again = Path(paths.local_dir(f"{B}/tree"))
  assert again != first and (again / "a.txt").read_text() == "changed"
  only = Path(paths.local_dir(f"{B}/tree", names=("a.txt", "missing.json")))
  assert _files(only) == {"a.txt": b"changed"}
  assert paths.local_dir(tmp_path) == str(tmp_path)  # local: the folder itself
  with pytest.raises(FileNotFoundError, match="no such folder: gs://bkt/none"):
    paths.local_dir(f"{B}/none")
  with pytest.raises(RuntimeError, match="cut short"):
    with paths.staged_dir(f"{B}/staged") as d:
      Path(d, "x.json").write_text("{}")
      raise RuntimeError("cut short")
  assert not _objects(store, f"{B}/staged")
  with paths.staged_dir(f"{B}/staged") as d:
    Path(d, "q").mkdir()
    Path(d, "q", "y.txt").write_text("y")
  assert _objects(store, f"{B}/staged") == {"q/y.txt": b"y"}
