"""The built wheel in a clean environment (issue 22, must-show 1): no checkout, no ``shared/``.

A wheel is built from a copy of the sources (``pip wheel --no-deps --no-build-isolation``, no
download) and installed with ``--no-deps --no-index`` into a fresh venv made without pip.
The venv sees the third-party packages of this interpreter through a ``deps.pth`` whose lines
are this interpreter's site-packages directories (path lines only: the ``.pth`` files inside
them, such as a checkout's editable-install finder, are not processed), so nothing is
downloaded and the repository is not on the path. Every command runs from an empty directory
outside the repository. Then:

- ``import experiments`` fails (the wheel installs the experiments as ``sbjax_experiments``),
  ``import sbjax.metrics`` works from the venv, the sample corpus is package data there, and
  ``sbjax-reproduce --helpshort`` lists its flags;
- ``sbjax-train --config=tiny`` trains a few steps on the sample corpus (text, a
  sentencepiece tokenizer trained into the workdir) and writes its checkpoint and log;
- ``sbjax-reproduce --preset=test --only=target_rank`` runs an experiment from the installed
  ``sbjax_experiments`` (target_rank: the cheapest at its test preset, ~6 CPU-s against the
  planted experiment's ~60; the planted one runs from the checkout in tests/e2e/test_reproduce.py)
  and writes ``report.md``, whose row and section are read back with the figures they name.
"""

import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("sbjax", "experiments", "setup.py", "pyproject.toml", "README.md", "LICENSE")


def _run(cmd, cwd, env, timeout=300):
  r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                     timeout=timeout)
  assert r.returncode == 0, (cmd, r.stdout[-3000:], r.stderr[-4000:])
  return r


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
  """(venv python, venv bin dir, environment, empty cwd) with only the wheel installed."""
  root = tmp_path_factory.mktemp("wheel")
  src = root / "src"
  for name in SOURCES:
    p = REPO / name
    if p.is_dir():
      shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
      shutil.copy2(p, src / name)
  env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
  env["JAX_PLATFORMS"] = "cpu"
  _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
        "--no-index", "-w", root / "dist", src], root, env)
  wheels = sorted((root / "dist").glob("sbjax-*.whl"))
  assert len(wheels) == 1, wheels
  v = root / "venv"
  _run([sys.executable, "-m", "venv", "--without-pip", v], root, env)
  py = v / "bin" / "python"
  # the wheel first, while the venv sees nothing else (pip must not find, let alone touch,
  # this interpreter's sbjax)
  _run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index",
        wheels[0]], root, env)
  purelib = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                      root, env).stdout.strip())
  dirs = [d for d in {*site.getsitepackages(), sysconfig.get_path("purelib"),
                      sysconfig.get_path("platlib")} if Path(d).is_dir()]
  (purelib / "deps.pth").write_text("\n".join(sorted(dirs)) + "\n")
  cwd = root / "cwd"
  cwd.mkdir()
  return py, v / "bin", env, cwd


def test_wheel_installs_sbjax_and_no_experiments_module(venv):
  py, _, env, cwd = venv
  code = ("import importlib.util, json, sbjax, sbjax.metrics, sbjax_experiments\n"
          "from sbjax.data.sample_corpus import sample_files\n"
          "print(json.dumps({'experiments': importlib.util.find_spec('experiments') is not None,"
          " 'sbjax': sbjax.__file__, 'exp': sbjax_experiments.__file__,"
          " 'sample': [str(p) for p in sample_files()]}))")
  got = json.loads(_run([py, "-c", code], cwd, env).stdout.strip().splitlines()[-1])
  venv_root = py.parent.parent.resolve()
  assert got["experiments"] is False
  for key in ("sbjax", "exp"):
    assert Path(got[key]).resolve().is_relative_to(venv_root), got[key]
    assert not Path(got[key]).resolve().is_relative_to(REPO), got[key]
  assert [Path(p).name for p in got["sample"]] == [
      "hamlet.txt", "julius_caesar.txt", "macbeth.txt", "midsummer_nights_dream.txt",
      "tempest.txt"]
  assert all(Path(p).resolve().is_relative_to(venv_root) for p in got["sample"])
  r = subprocess.run([py, "-c", "import experiments"], cwd=cwd, env=env, capture_output=True,
                     text=True, timeout=60)
  assert r.returncode != 0 and "No module named 'experiments'" in r.stderr
  # the console script's own flags are its --helpshort (absl lists those of sys.argv[0])
  r = subprocess.run([py.parent / "sbjax-reproduce", "--helpshort"], cwd=cwd, env=env,
                     capture_output=True, text=True, timeout=60)
  assert "--only" in r.stdout and "--data" in r.stdout and "--quick" in r.stdout, r.stdout


def test_sbjax_train_on_the_sample_corpus(venv):
  py, bin_, env, cwd = venv
  sample = _run([py, "-c", "from sbjax.data.sample_corpus import sample_corpus_dir as d; "
                 "print(d())"], cwd, env).stdout.strip()
  wd = cwd / "runs" / "tiny"
  _run([bin_ / "sbjax-train", "--config=tiny", f"--workdir={wd}", "--config.train.steps=4",
        "--config.train.eval_every=4", "--config.train.ckpt_every=4", "--config.train.log_every=2",
        "--config.data.source=text", f"--config.data.options.path={sample}",
        "--config.data.options.vocab_size=128", "--config.model.vocab_size=0"], cwd, env)
  logged = [json.loads(line) for line in (wd / "metrics.jsonl").read_text().splitlines()]
  assert max(r["step"] for r in logged) == 4
  assert json.loads((wd / "config.json").read_text())["data"]["options"]["path"] == sample
  assert (wd / "tokenizer.model").is_file() and (wd / "checkpoints" / "4").is_dir()


def test_sbjax_reproduce_target_rank_at_the_test_preset(venv):
  _, bin_, env, cwd = venv
  out = cwd / "out"
  r = _run([bin_ / "sbjax-reproduce", "--preset=test", "--only=target_rank", f"--out={out}"],
           cwd, env, timeout=600)
  res = json.loads(r.stdout.strip().splitlines()[-1])
  assert res["failed"] == [] and list(res["seconds"]) == ["target_rank"]
  md = (out / "report.md").read_text()
  assert "| target_rank | test | ok |" in md and "## target_rank" in md
  figures = re.findall(r"!\[[^\]]*\]\((target_rank/[^)]+\.png)\)", md)
  assert figures and all((out / f).is_file() for f in figures), figures
  assert (out / "target_rank" / "target_rank.csv").is_file()
