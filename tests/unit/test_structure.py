"""The layout rules of the restructure (issue 16), checked on the source tree:

- no import cycle in ``sbjax/`` (static graph of the imports, and every module imported alone
  in a fresh process: a fork of an interpreter that has loaded only third-party packages);
- no function in ``sbjax/`` or ``experiments/`` over 80 lines (file size is not checked: a file
  holds one idea, a review rule in the README's "Contributing" section, not a line cap);
- imports at the top of files: a function-local import must say why with a ``deferred:``
  comment on its line (JAX must start after absl flag parsing or ``jax.distributed``);
- no ``cfg.head == ...`` switch outside the head registry;
- no two test files of the same name in tests/ (pytest imports each by its basename).
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_FUNCTION_LINES = 80


def _py_files(*tops: str) -> list[Path]:
  return sorted(p for top in tops for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts)


@functools.lru_cache(maxsize=None)
def _parsed(path: Path) -> tuple[ast.Module, list[str]]:
  """(syntax tree, lines) of a source file, parsed once per session: three checks read the
  same files (parsing them is most of those checks' time)."""
  text = path.read_text()
  return ast.parse(text), text.splitlines()


@pytest.fixture(scope="module", autouse=True)
def _free_parsed():
  """The trees (~60 MB) are dropped when this file's tests are done."""
  yield
  _parsed.cache_clear()


def _module_name(path: Path) -> str:
  parts = list(path.relative_to(ROOT).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts = parts[:-1]
  return ".".join(parts)


def _imports(path: Path, known: set[str]) -> set[str]:
  """The project modules that ``path`` imports (anywhere in the file)."""
  tree = _parsed(path)[0]
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
               for a in node.names]
    else:
      continue
    out.update(n for n in names if n in known)
  return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """Strongly connected components with more than one module (or a self-loop): Tarjan."""
  index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

  def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in sorted(graph[v]):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop()
        on.discard(w)
        comp.append(w)
        if w == v:
          break
      if len(comp) > 1 or v in graph[v]:
        comps.append(sorted(comp))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return comps


def test_no_static_import_cycle_in_sbjax():
  files = _py_files("sbjax")
  known = {_module_name(p) for p in files}
  graph = {_module_name(p): _imports(p, known) - {_module_name(p)} for p in files}
  assert _cycles(graph) == []


def test_cycle_detector_finds_a_planted_cycle():
  assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
  assert _cycles({"a": {"b"}, "b": set()}) == []


def _import_alone(root: Path, mods: list[str]) -> subprocess.CompletedProcess:
  script = Path(__file__).with_name("_import_alone.py")
  return subprocess.run([sys.executable, str(script), str(root), *mods], capture_output=True,
                        text=True, timeout=600, cwd=root)


@pytest.mark.skipif(sys.platform == "win32", reason="needs fork")
def test_every_sbjax_module_imports_alone_in_a_fresh_process():
  """Each module is imported first, on its own, in a forked child of an interpreter that has
  loaded only third-party packages (jax, flax, optax, orbax, ...), so an order-dependent
  import cycle fails here even when the test suite's import order hides it."""
  mods = [_module_name(p) for p in _py_files("sbjax")]
  r = _import_alone(ROOT, mods)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  assert f"imported {len(mods)} modules alone" in r.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="needs fork")
def test_import_alone_finds_a_planted_order_dependent_cycle(tmp_path):
  """``sbjax.a`` imports alone, ``sbjax.b`` does not (it imports ``a``, which takes a name
  from the half-initialised ``b``), and a module that raises is reported too."""
  pkg = tmp_path / "sbjax"
  pkg.mkdir()
  (pkg / "__init__.py").write_text("")
  (pkg / "a.py").write_text("X = 1\nfrom sbjax.b import Y\n")
  (pkg / "b.py").write_text("from sbjax import a\nY = a.X\n")
  (pkg / "c.py").write_text("raise ValueError('broken on purpose')\n")
  r = _import_alone(tmp_path, ["sbjax.a", "sbjax.b", "sbjax.c"])
  assert r.returncode == 1
  failed = [line for line in r.stdout.splitlines() if line.startswith("FAILED")]
  assert len(failed) == 2 and "imported 1 modules alone, 2 failed" in r.stdout, r.stdout
  assert failed[0].startswith("FAILED sbjax.b: ImportError") and "Y" in failed[0]
  assert failed[1] == "FAILED sbjax.c: ValueError: broken on purpose"


def _too_long(paths) -> list[str]:
  funcs = []
  for p in paths:
    for node in ast.walk(_parsed(p)[0]):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        length = node.end_lineno - node.lineno + 1
        if length > MAX_FUNCTION_LINES:
          funcs.append(f"{p.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines")
  return funcs


def test_no_function_over_80_lines():
  funcs = _too_long(_py_files("sbjax", "experiments"))
  assert funcs == [], funcs


def test_length_check_finds_a_planted_long_function(tmp_path, monkeypatch):
  monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
  body = "".join(f"  x{i} = {i}\n" for i in range(80))
  (tmp_path / "m.py").write_text(f"def short():\n  return 1\n\n\ndef long():\n{body}")
  assert _too_long([tmp_path / "m.py"]) == ["m.py:5 long: 81 lines"]


def _same_basename(files) -> dict:
  """Test modules that share a file name (pytest's default import mode imports each by its
  basename: the second of two is a collection error, 'import file mismatch')."""
  seen: dict = {}
  for f in files:
    seen.setdefault(f.name, []).append(str(f.relative_to(ROOT)))
  return {k: v for k, v in seen.items() if len(v) > 1}


def test_test_file_names_are_unique_across_the_layers():
  tests = [p for p in _py_files("tests") if p.name.startswith("test_")]
  assert len(tests) > 100 and _same_basename(tests) == {}, _same_basename(tests)
  planted = [ROOT / "tests/unit/test_x.py", ROOT / "tests/e2e/test_x.py"]
  assert _same_basename(planted) == {"test_x.py": ["tests/unit/test_x.py", "tests/e2e/test_x.py"]}


def test_imports_at_the_top_of_files():
  """A function-local import needs a ``deferred:`` comment saying why (e.g. JAX must start
  after absl flag parsing or jax.distributed.initialize)."""
  bad = []
  for p in _py_files("sbjax", "experiments"):
    tree, lines = _parsed(p)
    for node in ast.walk(tree):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for sub in ast.walk(node):
          if isinstance(sub, (ast.Import, ast.ImportFrom)):
            if "deferred:" not in lines[sub.lineno - 1]:
              bad.append(f"{p.relative_to(ROOT)}:{sub.lineno}: {lines[sub.lineno - 1].strip()}")
  assert bad == [], "\n".join(bad)


HEAD_SWITCH = re.compile(r"cfg\.head ==|\.head == \"|\.head == '|\.head in \(|\.head != ")


def test_no_head_switch_outside_the_registry():
  """``grep -rn 'cfg.head ==\\|.head == "' sbjax experiments`` finds nothing outside the
  head registry (``sbjax/heads/``): every other module asks the registry."""
  hits = []
  for p in _py_files("sbjax", "experiments"):
    if "heads" in p.relative_to(ROOT).parts[:2]:
      continue
    for i, line in enumerate(p.read_text().splitlines(), 1):
      if HEAD_SWITCH.search(line):
        hits.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
  assert hits == [], "\n".join(hits)
