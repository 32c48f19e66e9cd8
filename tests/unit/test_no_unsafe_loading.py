"""No unsafe deserialisation in sbjax/ or experiments/: no pickle loads, no torch.load without
weights_only=True, no np.load(allow_pickle=True), no eval/exec (configs are data: preset
names and JSON; ml_collections .py files only when the user names one with --config).

The scan parses every file (ast), so aliases and keyword forms are seen; the scanner is
itself tested on snippets that must and must not be flagged."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("sbjax", "experiments")
PICKLE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "marshal",
                  "shelve", "jsonpickle"}


def _dotted(node) -> str:
  parts = []
  while isinstance(node, ast.Attribute):
    parts.append(node.attr)
    node = node.value
  if isinstance(node, ast.Name):
    parts.append(node.id)
  elif parts:  # a method of a computed value, e.g. jax.jit(f).lower(x).compile(): not a builtin
    parts.append("<expr>")
  return ".".join(reversed(parts))


def _kw(call: ast.Call, name: str):
  for k in call.keywords:
    if k.arg == name:
      return k.value
  return None


def _is_const(node, value) -> bool:
  return isinstance(node, ast.Constant) and node.value is value


def unsafe_calls(source: str, filename: str = "<src>") -> list[str]:
  """'file:line: what' for each unsafe load in ``source``."""
  tree = ast.parse(source, filename)
  alias: dict[str, str] = {}  # local name -> module or module.attr
  found = []

  def hit(node, what):
    found.append(f"{filename}:{node.lineno}: {what}")

  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for a in node.names:
        alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        if a.name.split(".")[0] in PICKLE_MODULES:
          hit(node, f"imports {a.name}")
    elif isinstance(node, ast.ImportFrom) and node.module:
      for a in node.names:
        alias[a.asname or a.name] = f"{node.module}.{a.name}"
        if node.module.split(".")[0] in PICKLE_MODULES:
          hit(node, f"imports {a.name} from {node.module}")
  for node in ast.walk(tree):
    if not isinstance(node, ast.Call):
      continue
    name = _dotted(node.func)
    head, _, rest = name.partition(".")
    full = (alias.get(head, head) + ("." + rest if rest else "")) if name else ""
    mod = full.split(".")[0]
    if name in ("eval", "exec", "compile", "__import__"):
      hit(node, f"calls {name}()")
    elif mod in PICKLE_MODULES and full.split(".")[-1] in ("load", "loads", "Unpickler", "open",
                                                            "decode"):
      hit(node, f"calls {full}()")
    elif full == "torch.load":
      if not _is_const(_kw(node, "weights_only"), True):
        hit(node, "calls torch.load() without weights_only=True")
    elif full in ("numpy.load", "np.load") or (mod in ("numpy", "np") and full.endswith(".load")):
      v = _kw(node, "allow_pickle")
      if v is not None and not _is_const(v, False):
        hit(node, "calls np.load(allow_pickle=...) (pickled object arrays)")
    elif full in ("yaml.load", "yaml.unsafe_load", "yaml.full_load"):
      loader = _kw(node, "Loader")
      if full != "yaml.load" or loader is None or "Safe" not in _dotted(loader):
        hit(node, f"calls {full}() without a SafeLoader")
  return found


BAD = [
    "import pickle\npickle.load(open('x', 'rb'))",
    "import pickle as p\np.loads(b'')",
    "from pickle import load",
    "import torch\ntorch.load('x')",
    "import torch\ntorch.load('x', weights_only=False)",
    "import torch as t\nt.load('x', map_location='cpu')",
    "import numpy as np\nnp.load('x.npy', allow_pickle=True)",
    "import numpy\nnumpy.load('x.npz', allow_pickle=flag)",
    "cfg = eval(open('c.txt').read())",
    "exec(text)",
    "code = compile(src, 'f', 'exec')",
    "import yaml\nyaml.load(s)",
    "import dill\ndill.load(f)",
]
GOOD = [
    "import torch\ntorch.load('x', map_location='cpu', weights_only=True)",
    "import numpy as np\nnp.load('x.npy')\nnp.load('y.npy', allow_pickle=False, mmap_mode='r')",
    "import json\njson.loads(s)",
    "import yaml\nyaml.safe_load(s)\nyaml.load(s, Loader=yaml.SafeLoader)",
    "model.eval()\nx.load('a')",
    "jax.jit(f).lower(x).compile()",
]


@pytest.mark.parametrize("src", BAD)
def test_scanner_flags_unsafe_snippets(src):
  assert unsafe_calls(src), src


@pytest.mark.parametrize("src", GOOD)
def test_scanner_accepts_safe_snippets(src):
  assert unsafe_calls(src) == [], src


def test_package_has_no_unsafe_loading():
  files = [p for d in SCANNED for p in sorted((ROOT / d).rglob("*.py"))]
  assert len(files) > 20, "the scan found too few files; is the layout different?"
  found = []
  for p in files:
    found += unsafe_calls(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))
  assert not found, "unsafe loading:\n" + "\n".join(found)


def test_configs_are_data():
  """JSON configs are parsed as data; only an explicit .py path goes to ml_collections."""
  src = (ROOT / "sbjax" / "configs.py").read_text()
  assert "json.loads" in src
  assert 'endswith(".py")' in src
  from sbjax import configs

  with pytest.raises(ValueError, match="unknown config name"):
    configs.load("__import__('os').system('true')")
