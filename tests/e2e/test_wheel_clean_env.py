"""The built wheel in a clean venv (no checkout, nothing downloaded): base install and ``[train]``."""

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

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


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


def test_sbjax_reproduce_target_rank_at_the_test_preset(venv):
  _, bin_, env, cwd = venv
  out = cwd / "out"
  r = _run([bin_ / "sbjax-reproduce", "--preset=test", "--only=target_rank", f"--out={out}",
            "--fig_format=pdf"], cwd, env, timeout=600)
  res = json.loads(r.stdout.strip().splitlines()[-1])
  assert res["failed"] == [] and res["report"] == str(out / "report.md")
  md = (out / "report.md").read_text()
  assert "| target_rank | test | ok |" in md and "## target_rank" in md
  assert re.search(r"^Command: `python \S*sbjax-reproduce --preset=test --only=target_rank --out=",
                   md, re.M), md[:600]
  figures = re.findall(r"!\[[^\]]*\]\((target_rank/[^)]+\.pdf)\)", md)
  assert figures and all((out / f).read_bytes()[:4] == b"%PDF" for f in figures), figures
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
print(json.dumps(sorted(d.metadata["Name"] for d in importlib.metadata.distributions())))
"""


def test_the_base_install_is_light_and_runs_the_docs_example(wheel):
  """A venv that sees the wheel and its base requirements' closure only: at most 12
  distributions, and the docs example runs (its numbers against numpy: tests/unit/test_metrics_*)."""
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
  r = subprocess.run([py, "-c", "import sbjax.train"], cwd=cwd, env=env, capture_output=True,
                     text=True, timeout=60)  # a module of the [train] extra: one line naming it
  assert r.returncode == 1 and "sbjax.train needs the [train] extra" in r.stderr.splitlines()[-1]
  assert "pip install 'sbjax[train]'" in r.stderr
