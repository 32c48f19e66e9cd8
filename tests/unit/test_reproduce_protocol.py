"""The ``Experiment`` protocol of ``sbjax.cli.reproduce``: every registered experiment's ``run``
takes ``data`` as a keyword (None = its default), and ``Suite.run_all`` passes ``--data`` to
every experiment the same way (no signature sniffing)."""

from __future__ import annotations

import importlib
import inspect
import json
import textwrap

import pytest

from experiments import reproduce
from sbjax.cli.reproduce import Suite

WITH_DATA = '''
import json
from pathlib import Path

PRESETS = {"test": None}


def run(out, preset, *, data=None):
  Path(out).mkdir(parents=True, exist_ok=True)
  (Path(out) / "got.json").write_text(json.dumps({"preset": preset, "data": data}))


def report_section(out, rel):
  return "## " + rel + "\\n\\n" + (Path(out) / "got.json").read_text()
'''
# an experiment written before the protocol: run takes no data keyword
WITHOUT_DATA = '''
PRESETS = {"test": None}


def run(out, preset):
  pass


def report_section(out, rel):
  return "## " + rel
'''


@pytest.mark.parametrize("name", list(reproduce.EXPERIMENTS))
def test_every_registered_run_takes_data_as_a_keyword(name):
  run = importlib.import_module(reproduce.EXPERIMENTS[name]).run
  data = inspect.signature(run).parameters.get("data")
  assert data is not None, f"{name}.run has no data parameter"
  assert data.kind is inspect.Parameter.KEYWORD_ONLY and data.default is None, (name, data)
  # any other parameter beyond (out, preset) has a default (callers pass only the protocol's)
  rest = list(inspect.signature(run).parameters.values())[2:]
  assert all(p.default is not inspect.Parameter.empty or p.kind is p.VAR_KEYWORD for p in rest)


@pytest.fixture
def suite(tmp_path, monkeypatch):
  pkg = tmp_path / "mods"
  pkg.mkdir()
  (pkg / "h3_exp_with_data.py").write_text(textwrap.dedent(WITH_DATA))
  (pkg / "h3_exp_without_data.py").write_text(textwrap.dedent(WITHOUT_DATA))
  monkeypatch.syspath_prepend(str(pkg))
  return Suite({"with": "h3_exp_with_data", "without": "h3_exp_without_data"}, ("with",))


@pytest.mark.parametrize("given, passed", [(None, None), ("", None), ("corpus_dir", "corpus_dir")])
def test_run_all_passes_data_to_every_experiment(suite, tmp_path, given, passed):
  out = tmp_path / "out"
  timings = suite.run_all(out, ["with"], "test", verbose=False, data=given)
  assert timings["with"]["status"] == "ok", timings
  assert json.loads((out / "with" / "got.json").read_text()) == {"preset": "test",
                                                                 "data": passed}
  assert "## with" in (out / "report.md").read_text()


def test_a_run_without_the_data_keyword_is_reported_failed(suite, tmp_path):
  """The suite calls the protocol as it is written; an experiment that does not follow it
  fails by name (the others go on), it is not silently called another way."""
  out = tmp_path / "out"
  timings = suite.run_all(out, ["with", "without"], "test", verbose=False)
  assert timings["with"]["status"] == "ok"
  assert timings["without"]["status"] == "failed"
  assert "data" in timings["without"]["error"], timings["without"]
  assert "Failed: `TypeError" in (out / "report.md").read_text()
