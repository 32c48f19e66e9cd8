"""The built wheel in a clean environment: no checkout, no ``shared/``.

The base install (no extras) is what ``sbjax.metrics`` needs: the wheel's requirements pull
at most 12 distributions (their closure, read from this interpreter's metadata), and a venv
that sees only those runs the "use it in your code" example of docs/metrics.md, whose numbers
match the float64 numpy references of ``tests/_metrics_reference.py``.

For the tools (the ``[train]`` extra): the wheel, built from a copy of the sources (``pip
wheel --no-deps --no-build-isolation``, no download), is installed with ``--no-deps
--no-index`` into a fresh venv made without pip. The venv sees the third-party packages of
this interpreter through a ``deps.pth`` whose lines are this interpreter's site-packages
directories (path lines only: the ``.pth`` files inside them, such as a checkout's
editable-install finder, are not processed), so nothing is
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

import email.parser
import importlib.metadata
import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests import _metrics_reference as R

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("sbjax", "experiments", "setup.py", "pyproject.toml", "README.md", "LICENSE")


def _run(cmd, cwd, env, timeout=300):
  r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                     timeout=timeout)
  assert r.returncode == 0, (cmd, r.stdout[-3000:], r.stderr[-4000:])
  return r


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
  """(the wheel built from a copy of the sources, its folder, the environment)."""
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
  return wheels[0], root, env


@pytest.fixture(scope="module")
def venv(wheel):
  """(venv python, venv bin dir, environment, empty cwd) with only the wheel installed, and
  this interpreter's third-party packages (the [train] extra and more) on its path."""
  whl, root, env = wheel
  v = root / "venv"
  _run([sys.executable, "-m", "venv", "--without-pip", v], root, env)
  py = v / "bin" / "python"
  # the wheel first, while the venv sees nothing else (pip must not find, let alone touch,
  # this interpreter's sbjax)
  _run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index",
        whl], root, env)
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
  assert "--only" in r.stdout and "--data" in r.stdout and "--[no]quick" in r.stdout, r.stdout


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
  assert res["failed"] == [] and res["report"] == str(out / "report.md")
  md = (out / "report.md").read_text()
  assert "| target_rank | test | ok |" in md and "## target_rank" in md
  figures = re.findall(r"!\[[^\]]*\]\((target_rank/[^)]+\.png)\)", md)
  assert figures and all((out / f).is_file() for f in figures), figures
  assert (out / "target_rank" / "target_rank.csv").is_file()


def _base_closure(whl: Path) -> dict:
  """{name: distribution} that the wheel's requirements without extras pull (recursively, by
  the metadata of this interpreter's installed distributions)."""
  with zipfile.ZipFile(whl) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    todo = email.parser.Parser().parsestr(z.read(meta).decode()).get_all("Requires-Dist") or []
  found = {}
  while todo:
    req = Requirement(todo.pop())
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
      continue
    if canonicalize_name(req.name) not in found:
      dist = importlib.metadata.distribution(req.name)
      found[canonicalize_name(req.name)] = dist
      todo += dist.requires or []
  return found


def _docs_example() -> str:
  text = (REPO / "docs" / "metrics.md").read_text()
  section = text[text.index("## Use it in your code"):]
  return re.search(r"^```python\n(.*?)^```", section, re.M | re.S).group(1)


_DUMP = """
import importlib.metadata
np.savez("out.npz", feats=feats, heads=heads, labels=labels, erank=spectrum.effective_rank,
         kl=spectrum.kl_to_uniform, w_error=spectrum.w_error, cka=cka, cdnv=nc.nc1_log10_mean_cdnv,
         etf=nc.etf_error, nc3=nc.nc3_cos_mean)
print(json.dumps(sorted(d.metadata["Name"] for d in importlib.metadata.distributions())))
"""


def test_the_base_install_is_light_and_runs_the_docs_example(wheel):
  """A venv that sees the wheel and its base requirements' closure only: at most 12
  distributions, and the docs example's table matches numpy."""
  whl, root, env = wheel
  closure = _base_closure(whl)
  assert "jax" in closure and "flax" not in closure and len(closure) + 1 <= 12, sorted(closure)
  v, libs = root / "base", root / "base_libs"
  _run([sys.executable, "-m", "venv", "--without-pip", v], root, env)
  py = v / "bin" / "python"
  libs.mkdir()
  for dist in closure.values():  # each distribution's own top-level folders and files
    for top in {f.parts[0] for f in dist.files if f.parts[0] != ".."}:
      (libs / top).symlink_to(Path(dist.locate_file(top)))
  _run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index", whl],
       root, env)
  purelib = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], root,
                      env).stdout.strip())
  (purelib / "base.pth").write_text(f"{libs}\n")
  cwd = root / "base_cwd"
  cwd.mkdir()
  r = _run([py, "-c", "import json\n" + _docs_example() + _DUMP], cwd, env)
  names = json.loads(r.stdout.strip().splitlines()[-1])
  assert {canonicalize_name(n) for n in names} == {"sbjax", *closure}, names
  assert "| 7 |" in r.stdout  # the table
  z = np.load(cwd / "out.npz")
  feats, heads, labels = z["feats"], z["heads"], z["labels"]
  for k in range(len(heads)):
    s = R.ref_spectrum(heads[k])
    np.testing.assert_allclose([z["erank"][k], z["kl"][k], z["w_error"][k]],
                               [R.ref_erank(s), R.ref_kl(s), R.ref_w_error(s, 4)], rtol=1e-4, atol=1e-5)
    assert z["cka"][k] == pytest.approx(R.ref_cka_biased(feats[k], feats[-1]), rel=1e-4)
    means, var, counts = R.ref_stats(feats[k], labels, heads.shape[1])
    want = R.ref_from_stats(means, var, counts, heads[k], min_count=2)
    np.testing.assert_allclose([z["cdnv"][k], z["etf"][k], z["nc3"][k]],
                               [want["nc1_log10_mean_cdnv"], want["etf_error"], want["nc3_cos_mean"]],
                               rtol=2e-4, atol=2e-5)
  r = subprocess.run([py, "-c", "import sbjax.train"], cwd=cwd, env=env, capture_output=True,
                     text=True, timeout=60)  # a module of the [train] extra: one line naming it
  assert r.returncode == 1 and "sbjax.train needs the [train] extra" in r.stderr.splitlines()[-1]
  assert "pip install 'sbjax[train]'" in r.stderr
