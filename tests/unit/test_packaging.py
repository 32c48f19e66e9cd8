"""What the wheel is made of, checked on the source tree (no build; the built wheel
in a clean venv is tests/e2e/test_wheel_clean_env.py):

- the experiments import each other relatively (the wheel installs ``experiments/`` as
  ``sbjax_experiments``; an absolute ``from experiments.X import`` would break it);
- setup.py ships every package of ``sbjax/`` and ``experiments/`` (no top-level
  ``experiments``), and the console scripts point at functions that exist;
- nothing in ``sbjax/`` or ``experiments/`` refers to ``../shared``; the sample corpus is
  package data; LICENSE, CITATION.cff and CHANGELOG.md exist.
"""

import ast
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _py(top: str) -> list[Path]:
  return sorted(p for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts)


def _setup_packages() -> list[str]:
  """setup.py's package list: its module body without the ``setup(...)`` call."""
  tree = ast.parse((REPO / "setup.py").read_text())
  tree.body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                                            and getattr(n.value.func, "id", "") == "setup")]
  ns = {"__file__": str(REPO / "setup.py")}
  exec(compile(tree, "setup.py", "exec"), ns)  # noqa: S102 - the project's own build script
  return ns["SBJAX"] + ns["EXPERIMENTS"]


def test_experiments_import_each_other_relatively():
  bad = []
  for p in _py("experiments"):
    for node in ast.walk(ast.parse(p.read_text())):
      if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
          node.module == "experiments" or node.module.startswith("experiments.")):
        bad.append(f"{p.relative_to(REPO)}:{node.lineno} from {node.module} import ...")
      if isinstance(node, ast.Import):
        bad += [f"{p.relative_to(REPO)}:{node.lineno} import {a.name}" for a in node.names
                if a.name == "experiments" or a.name.startswith("experiments.")]
  assert bad == [], "use relative imports inside experiments/ (the wheel ships it as " \
                    "sbjax_experiments):\n" + "\n".join(bad)


def test_setup_py_ships_every_package_and_no_top_level_experiments():
  pkgs = _setup_packages()
  want = {".".join(p.parent.relative_to(REPO).parts) for top in ("sbjax", "experiments")
          for p in _py(top) if p.name == "__init__.py"}
  assert {p.replace("sbjax_experiments", "experiments", 1) for p in pkgs} == want
  assert "experiments" not in pkgs and "sbjax_experiments" in pkgs and "sbjax" in pkgs


def test_console_scripts_and_extras():
  proj = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
  scripts = proj["scripts"]
  assert set(scripts) == {"sbjax-train", "sbjax-analyze", "sbjax-convert", "sbjax-reproduce"}
  for target in scripts.values():
    mod, func = target.split(":")
    assert mod.startswith(("sbjax_experiments.", "sbjax.cli.")), target
    top, rest = mod.split(".", 1) if mod.startswith("sbjax_experiments.") else mod.rsplit(".", 1)
    folder = REPO / ("experiments" if top == "sbjax_experiments" else top.replace(".", "/"))
    path = folder / (rest.replace(".", "/") + ".py")
    funcs = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}
    assert func in funcs, (target, sorted(funcs))
  assert scripts["sbjax-train"] == "sbjax.cli.train:cli"  # the tools are the library's
  assert not any(re.match(r"torch\b", r) for r in proj["optional-dependencies"]["hf"])


def test_no_shared_path_and_the_files_a_library_ships():
  hits = [f"{p.relative_to(REPO)}:{i}" for top in ("sbjax", "experiments") for p in _py(top)
          for i, line in enumerate(p.read_text().splitlines(), 1) if "../shared" in line]
  assert hits == []
  for name in ("LICENSE", "CITATION.cff", "CHANGELOG.md"):
    assert (REPO / name).is_file(), name
  assert "Apache License" in (REPO / "LICENSE").read_text()[:200]
  cff = (REPO / "CITATION.cff").read_text()
  for title in ("Why do small language models underperform?", "Linguistic Collapse",
                "Tending Towards Stability"):
    assert title in cff
  data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
  sample = sorted((REPO / "sbjax" / "data" / "sample_text").glob("*.txt"))
  assert "sample_text/*.txt" in data["sbjax.data"] and len(sample) == 5
  assert 300_000 < sum(p.stat().st_size for p in sample) < 1_000_000
