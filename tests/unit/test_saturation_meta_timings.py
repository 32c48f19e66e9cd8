"""saturation_meta.json's times across reruns (experiments/saturation/timings.py): a rerun
that reads finished widths back keeps the times of the call that trained them, and records
its own under last_call. (The real rerun: tests/e2e/test_saturation.py.)"""

import json

from experiments.saturation.timings import merge

FIRST = {8: {"train_s": 120.0, "analyze_s": 30.0}, 32: {"train_s": 600.0, "analyze_s": 45.0}}
READ = {8: {"train_s": 0.4, "analyze_s": 0.2}, 32: {"train_s": 0.5, "analyze_s": 0.3}}


def _written(times: dict) -> dict:
  """As the meta reads back from disk (JSON: the widths become strings)."""
  return json.loads(json.dumps(times))


def test_a_first_run_records_its_own_times():
  m = merge({}, FIRST, {8, 32}, 800.0)
  assert m["timings"] == FIRST and m["seconds"] == 800.0
  assert m["last_call"] == {"seconds": 800.0, "timings": FIRST, "trained": [8, 32]}


def test_a_cached_rerun_keeps_the_first_times():
  first = _written(merge({}, FIRST, {8, 32}, 800.0))
  m = merge(first, READ, set(), 2.5)
  assert m["timings"] == FIRST and m["seconds"] == 800.0
  assert m["last_call"] == {"seconds": 2.5, "timings": READ, "trained": []}
  again = merge(_written(m), READ, set(), 1.9)  # and a third call still has them
  assert again["timings"] == FIRST and again["seconds"] == 800.0


def test_a_resumed_run_adds_what_it_trained():
  # d8 finished by an earlier call, d32 trained now: d8's first times, both calls' seconds
  first = _written(merge({}, {8: FIRST[8]}, {8}, 160.0))
  m = merge(first, {8: READ[8], 32: FIRST[32]}, {32}, 650.0)
  assert m["timings"] == FIRST and m["seconds"] == 810.0
  assert m["last_call"]["trained"] == [32]


def test_a_read_back_width_with_no_earlier_record_is_marked():
  m = merge({}, READ, set(), 2.5)  # the meta was deleted: no real time is known
  assert m["timings"] == {w: {**t, "read_back": True} for w, t in READ.items()}
  assert m["seconds"] == 2.5
  later = merge(_written(m), READ, {32}, 700.0)  # a marked time is never kept as a real one
  assert later["timings"][8]["read_back"] and later["timings"][32] == READ[32]
  assert later["seconds"] == 700.0
