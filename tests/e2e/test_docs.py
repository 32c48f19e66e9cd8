"""Every ```python / ```bash block of docs/*.md runs, in order: the pages in one fresh ``python -I``
(JAX starts once), each page in its own namespace, the next page run after a failure."""

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
TIMEOUT_S = 600

# The driver runs in the child process: pages arrive as a list of (doc, [(lang, line, source)]).
DRIVER = textwrap.dedent("""
  import json, os, subprocess, sys, time, traceback
  root, pages = sys.argv[1], json.loads(sys.stdin.read())
  inside = [p for p in sys.path if os.path.realpath(p or ".") == os.path.realpath(root)]
  if inside or os.environ.get("PYTHONPATH"):
    print(f"DOCS-FAILED: the checkout is on sys.path ({inside}) or PYTHONPATH is set", flush=True)
    sys.exit(1)
  for doc, blocks in pages:
    print(f"=== PAGE {doc}", flush=True)
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
        traceback.print_exc(file=sys.stdout)
        break
      print(f"--- {time.perf_counter() - t0:.1f} s wall, {time.process_time() - c0:.1f} s CPU", flush=True)
    else:
      print(f"DOCS-OK {doc}", flush=True)
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


def run_pages(pages: list, cwd: Path) -> tuple[dict, str]:
  """Run ``pages`` [(name, blocks)] in one fresh ``python -I`` interpreter in ``cwd``, with the
  installed packages: ({name: its stdout}, all output)."""
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env.update(MPLBACKEND="Agg", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
  r = subprocess.run([sys.executable, "-I", "-c", DRIVER, str(ROOT)], cwd=cwd, env=env,
                     input=json.dumps(pages), text=True, capture_output=True, timeout=TIMEOUT_S)
  return dict(p.split("\n", 1) for p in r.stdout.split("=== PAGE ")[1:]), r.stdout + r.stderr


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
  return run_pages([(str(p.relative_to(ROOT)), code_blocks(p.read_text(encoding="utf-8")))
                    for p in WALKTHROUGHS], tmp_path_factory.mktemp("docs"))


def test_a_broken_block_names_file_block_and_error(tmp_path):
  md = "```python\nimport textwrap\n```\n\n```python\ntextwrap.no_such_name(x)\n```\n"
  out, _ = run_pages([("docs/probe.md", code_blocks(md)), ("docs/next.md", code_blocks(md)[:1])],
                     tmp_path)
  assert "DOCS-FAILED: docs/probe.md block 2 (python, line 6): AttributeError" in out["docs/probe.md"]
  assert "no_such_name" in out["docs/probe.md"] and "DOCS-OK" not in out["docs/probe.md"]
  assert "DOCS-OK docs/next.md" in out["docs/next.md"]  # the next page still runs


@pytest.mark.parametrize("path", WALKTHROUGHS, ids=[p.name for p in WALKTHROUGHS])
def test_walkthrough_runs(path, pages):
  name = str(path.relative_to(ROOT))
  out, err = pages[0].get(name, ""), pages[1]
  if f"DOCS-OK {name}" not in out:
    failed = [ln for ln in out.splitlines() if ln.startswith("DOCS-FAILED")]
    pytest.fail(f"{name}: {failed[0] if failed else 'no DOCS-OK line'}\n"
                f"--- its output (tail)\n{out[-3000:]}\n--- all output (tail)\n{err[-3000:]}",
                pytrace=False)
