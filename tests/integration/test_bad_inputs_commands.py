"""Bad inputs of ``sweep`` and of the experiments' commands, in-process and as the commands."""

import json

import pytest

from experiments.reproduce import REGISTRY
from sbjax import sweep
from sbjax.experiment import runner, suite
from tests.integration.test_bad_inputs import (assert_unchanged, check_cli, check_line, refusal,
                                               run_table, snapshot)


def _grid(content):
  """A sweep of the grid file ``content`` (a dict, or the file's text) into ``tmp/sweep``."""
  def setup(tmp):
    text = content if isinstance(content, str) else json.dumps(content)
    (tmp / "grid.json").write_text(text)
    return lambda: sweep.run_sweep(str(tmp / "grid.json"), tmp / "sweep")
  return setup


def _tiny_grid(**grid):
  return _grid({"base": "tiny", "overrides": {"train.steps": 2}, "grid": grid})


SWEEP_ROWS = [  # name, setup, the error line holds, exit status
    ("a missing grid file", lambda tmp: (lambda: sweep.run_sweep(str(tmp / "no.json"), tmp / "s")),
     "no.json: No such file or directory", 2),
    ("a grid file that is no JSON", _grid("{"), "grid.json is not valid JSON", 2),
    ("a grid file that is a list", _grid("[]"), "expected a JSON object", 2),
    ("an unknown grid key", _grid({"base": "tiny", "gird": {}}), "unknown top-level keys ['gird']",
     2),
    ("an empty axis", _tiny_grid(**{"train.lr": []}), "non-empty lists of values", 2),
    ("a NaN learning rate in the grid", _grid('{"base": "tiny", "grid": {"train.lr": [NaN]}}'),
     "run 'lr=nan': invalid config: train.lr=nan", 2),
    ("an unknown config key", _tiny_grid(**{"train.stepz": [1]}),
     "invalid config key 'train.stepz'", 2),
    ("an unknown base config", _grid({"base": "pythia-7b"}), "unknown config name 'pythia-7b'", 2),
    ("a host index beyond the hosts",
     lambda tmp: (lambda: sweep.run_sweep({"base": "tiny"}, tmp / "s", host_index=3, num_hosts=2)),
     "--host_index=3 must be in [0, --num_hosts=2)", 2),
]


@pytest.mark.parametrize("name,setup,expected,code", SWEEP_ROWS, ids=[r[0] for r in SWEEP_ROWS])
def test_sweep_refuses(name, setup, expected, code, tmp_path):
  action = setup(tmp_path)
  before = snapshot(tmp_path)
  check_line(*refusal(action), expected, code)
  assert_unchanged(tmp_path, before)
  assert not (tmp_path / "sweep").exists()


def _experiment(name, preset="test", data=None):
  return lambda tmp: (lambda: runner.run(suite.load(REGISTRY, name), tmp / "out", preset, data))


EXPERIMENT_ROWS = [
    ("an unknown experiment", lambda tmp: (lambda: suite.load(REGISTRY, "nope")),
     "unknown experiment 'nope'; known: planted, ", 2),
    ("an unknown preset", lambda tmp: (lambda: suite.run_suite(REGISTRY, ["planted"], tmp / "out",
                                                               "huge")),
     "unknown planted preset 'huge'; known: test, ", 2),
    ("a missing corpus", _experiment("mos_text", data="nowhere"),
     "corpus directory not found (--data=nowhere)", 2),
]


@pytest.mark.parametrize("name,setup,expected,code", EXPERIMENT_ROWS,
                         ids=[r[0] for r in EXPERIMENT_ROWS])
def test_experiments_refuse(name, setup, expected, code, tmp_path):
  action = setup(tmp_path)
  before = snapshot(tmp_path)
  check_line(*refusal(action), expected, code)
  assert_unchanged(tmp_path, before)
  assert not (tmp_path / "out").exists()


def _sweep_cli(*args):
  def setup(d, _):
    (d / "grid.json").write_text('{"base": "tiny", "grid": {"train.lr": [NaN]}}')
    return ["experiments.sweep", f"--grid={d}/grid.json", f"--sweep_dir={d}/sweep", *args]
  return setup


def _reproduce(module, *args):
  def setup(d, _):
    (d / "a_file").write_text("not a folder\n")
    return [module, *(a.format(d=d) for a in args)]
  return setup


CLI = [  # "PREFIX: name" (the command experiments.PREFIX), setup, the error line holds, status
    ("sweep: hosts that are no number", _sweep_cli("--num_hosts=two"),
     "error: --num_hosts='two': an integer >= 1 or 'auto'", 2),
    ("reproduce: a negative budget", _reproduce("experiments.reproduce", "--out={d}/o",
                                                "--budget_s=-1"), "error: flag --budget_s=-1", 2),
    ("mos_text: a missing corpus", _reproduce("experiments.mos_text", "--out={d}/o",
                                              "--preset=test", "--data={d}/nowhere"),
     "--data is not a folder; give a folder of UTF-8 .txt files", 2),
    ("planted: an output folder under a file",
     _reproduce("experiments.planted", "--out={d}/a_file/o", "--preset=test"),
     "a_file/o: Not a directory", 2),
]


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
  """Each command's rows (``experiments.PREFIX``, the row's name's prefix) in one interpreter:
  absl's flags are global, one command per interpreter."""
  out = {}
  for prefix in dict.fromkeys(r[0].split(":")[0] for r in CLI):
    rows = [r for r in CLI if r[0].startswith(prefix + ":")]
    out.update(run_table(tmp_path_factory.mktemp(prefix), rows, None))
  return out


@pytest.mark.e2e  # starts command-line processes
@pytest.mark.parametrize("name,setup,expected,code", CLI, ids=[r[0] for r in CLI])
def test_commands_refuse(name, setup, expected, code, cli):
  result, before, d = cli[name]
  check_cli(result, expected, code)
  assert_unchanged(d, before)
  assert not (d / "o").exists() and not (d / "sweep").exists()
