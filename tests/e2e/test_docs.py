"""Every ```python / ```bash block of docs/*.md runs, in order, in one fresh ``python -I`` per page."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
RUNNABLE = ("python", "bash")
TIMEOUT_S = 300

# The driver runs in the child process: blocks arrive as a list of (lang, line, source).
DRIVER = textwrap.dedent("""
  import json, os, subprocess, sys, time, traceback
  doc, root, blocks = sys.argv[1], sys.argv[2], json.loads(sys.stdin.read())
  inside = [p for p in sys.path if os.path.realpath(p or ".") == os.path.realpath(root)]
  if inside or os.environ.get("PYTHONPATH"):
    print(f"DOCS-FAILED: the checkout is on sys.path ({inside}) or PYTHONPATH is set", flush=True)
    sys.exit(1)
  ns = {"__name__": "__main__"}
  for i, (lang, line, src) in enumerate(blocks, 1):
    where = f"{doc} block {i} ({lang}, line {line})"
    print(f"--- {where}", flush=True)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
      if lang == "python":
        exec(compile(src, f"{doc}:block{i}:line{line}", "exec"), ns)
      else:
        subprocess.run(["bash", "-euo", "pipefail", "-c", src], check=True)
    except BaseException as e:
      print(f"DOCS-FAILED: {where}: {type(e).__name__}: {e}", flush=True)
      traceback.print_exc()
      sys.exit(1)
    print(f"--- {time.perf_counter() - t0:.1f} s wall, {time.process_time() - c0:.1f} s CPU", flush=True)
  print("DOCS-OK", flush=True)
""")


def code_blocks(text: str) -> list:
  """[(lang, first line number, source)] of the runnable fenced blocks of a markdown text."""
  out = []
  for m in FENCE.finditer(text):
    if m.group(1) in RUNNABLE:
      out.append((m.group(1), text.count("\n", 0, m.start()) + 2, m.group(2)))
  return out


# the pages with a runnable block (a page without one, e.g. a reference, has nothing to run)
WALKTHROUGHS = [p for p in sorted((ROOT / "docs").glob("*.md"))
                if code_blocks(p.read_text(encoding="utf-8"))]


def run_blocks(name: str, blocks: list, cwd: Path) -> subprocess.CompletedProcess:
  """Run ``blocks`` in one fresh ``python -I`` interpreter in ``cwd``, with the installed packages."""
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env.update(MPLBACKEND="Agg", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.run([sys.executable, "-I", "-c", DRIVER, name, str(ROOT)], cwd=cwd, env=env,
                        input=json.dumps(blocks), text=True, capture_output=True,
                        timeout=TIMEOUT_S)


def test_a_broken_block_names_file_block_and_error(tmp_path):
  md = "```python\nimport textwrap\n```\n\n```python\ntextwrap.no_such_name(x)\n```\n"
  r = run_blocks("docs/probe.md", code_blocks(md), tmp_path)
  assert r.returncode == 1
  assert "DOCS-FAILED: docs/probe.md block 2 (python, line 6): AttributeError" in r.stdout
  assert "no_such_name" in r.stdout and "DOCS-OK" not in r.stdout


@pytest.mark.parametrize("path", WALKTHROUGHS, ids=[p.name for p in WALKTHROUGHS])
def test_walkthrough_runs(path, tmp_path):
  r = run_blocks(str(path.relative_to(ROOT)), code_blocks(path.read_text(encoding="utf-8")),
                 tmp_path)
  if r.returncode != 0 or "DOCS-OK" not in r.stdout:
    failed = [ln for ln in r.stdout.splitlines() if ln.startswith("DOCS-FAILED")]
    pytest.fail(f"{path.relative_to(ROOT)}: {failed[0] if failed else 'exit ' + str(r.returncode)}\n"
                f"--- stdout (tail)\n{r.stdout[-3000:]}\n--- stderr (tail)\n{r.stderr[-3000:]}",
                pytrace=False)
