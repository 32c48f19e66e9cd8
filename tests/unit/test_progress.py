"""sbjax.progress and its users over an analysis's checkpoints and an experiment's runs: log
lines (no carriage returns) on stderr off a terminal, a bar on a terminal, nothing when
disabled. (The training loop's progress: test_loop.py.)"""

import io

from sbjax.analysis.progress import CheckpointProgress
from sbjax.progress import fmt_time
from sbjax.studies.progress import RunsProgress, SweepProgress


class _Tty(io.StringIO):
  def isatty(self):
    return True


def test_log_lines_off_a_terminal(capsys):
  out = io.StringIO()
  p = CheckpointProgress(7, 2, True, "run", stream=out)
  for n, note in ((3, "(step 4)"), (0, ""), (2, "(step 16)")):  # 0: a reference-only group
    p.update(n, note)
  p.close()
  lines = out.getvalue().splitlines()
  assert lines[0] == "[analyze run] 2/7 checkpoints (2 cached)"
  assert lines[1].startswith("[analyze run] 5/7 checkpoints (step 4), elapsed ")
  assert lines[-1].startswith("[analyze run] 7/7 checkpoints (step 16), elapsed ")
  assert all("ETA" in x for x in lines[1:]) and "\r" not in out.getvalue()
  runs = RunsProgress(3, "exp")
  sweep = SweepProgress(runs, prefix="r")
  sweep("[1/3] a: training")
  sweep("[2/3] b: done")  # read back as finished: no time counted
  sweep.finish()
  runs.close()
  err = capsys.readouterr()
  assert err.out == ""  # stdout carries results only
  lines = err.err.splitlines()
  assert lines[0] == "[exp] run 1/3: ra" and lines[2] == "[exp] run 2/3: rb"
  assert lines[1].startswith("[exp] 1/3 runs done, ETA ") and lines[1].endswith(" s")
  assert lines[3].startswith("[exp] 2/3 runs done") and "\r" not in err.err
  assert fmt_time(61) == "1m01s" and fmt_time(3725) == "1h02m05s" and fmt_time(-3) == "0m00s"


def test_a_bar_on_a_terminal_and_silence_when_disabled():
  tty = _Tty()
  p = CheckpointProgress(4, 0, True, "run", stream=tty)
  p.update(4, "(step 8)")
  p.close()
  assert "\r" in tty.getvalue() and "4/4" in tty.getvalue()
  for stream in (io.StringIO(), _Tty()):
    p = CheckpointProgress(4, 0, False, "run", stream=stream)
    p.update(4)
    p.close()
    assert stream.getvalue() == ""
