"""The progress reporters (sbjax.progress under the analysis, the loop and the runs): log lines (no carriage returns) when stderr is not a terminal, a
tqdm bar on a terminal, nothing when disabled."""

import io

from sbjax.analysis.progress import CheckpointProgress, fmt_time
from sbjax.studies.progress import RunsProgress, SweepProgress


class _Tty(io.StringIO):
  def isatty(self):
    return True


def test_log_lines_when_not_a_terminal():
  out = io.StringIO()
  p = CheckpointProgress(7, 2, True, "run", stream=out)
  p.update(3, "(step 4)")
  p.update(0)  # a reference-only group
  p.update(2, "(step 16)")
  p.close()
  text = out.getvalue()
  assert "\r" not in text
  lines = text.splitlines()
  assert lines[0] == "[analyze run] 2/7 checkpoints (2 cached)"
  assert lines[1].startswith("[analyze run] 5/7 checkpoints (step 4), elapsed ")
  assert lines[-1].startswith("[analyze run] 7/7 checkpoints (step 16), elapsed ")
  assert all("ETA" in x for x in lines[1:])


def test_bar_on_a_terminal_and_silence_when_disabled():
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


def test_fmt_time():
  assert fmt_time(61) == "1m01s" and fmt_time(3725) == "1h02m05s" and fmt_time(-3) == "0m00s"


def test_runs_progress_lines_off_a_terminal(capsys):
  p = RunsProgress(3, "exp")
  sweep = SweepProgress(p, prefix="r")
  sweep("[1/3] a: training")
  sweep("[2/3] b: done")  # read back as finished: no time counted
  sweep.finish()
  p.close()
  err = capsys.readouterr()
  assert err.out == ""  # stdout carries results only
  lines = err.err.splitlines()
  assert lines[0] == "[exp] run 1/3: ra"
  assert lines[1].startswith("[exp] 1/3 runs done, ETA ") and lines[1].endswith(" s")
  assert lines[2] == "[exp] run 2/3: rb" and lines[3].startswith("[exp] 2/3 runs done")
  assert "\r" not in err.err
