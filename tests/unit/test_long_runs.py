"""A long run costs nothing to schedule: checkpoint steps tested, not listed; Γ summed by chunks."""

import itertools

import pytest

from sbjax import checkpoint as ckpt
from sbjax import optim
from sbjax.config import TrainConfig
from sbjax.errors import STEP_MAX


def listed(tc) -> list[int]:
  """The schedule by its definition: 0, the powers of two up to 512 (log-spaced), every
  ``ckpt_every`` steps and the last step."""
  logs = {2**k for k in range(10)} if tc.ckpt_log_spaced else set()
  every = set(range(tc.ckpt_every, tc.steps + 1, tc.ckpt_every))
  return sorted(s for s in {0, tc.steps} | logs | every if s <= tc.steps)


@pytest.mark.parametrize("steps,every,log", [(1, 1, True), (7, 3, True), (600, 200, True),
                                             (513, 64, True), (1000, 128, False), (5, 7, False)])
def test_the_schedule_is_its_definition(steps, every, log):
  tc = TrainConfig(steps=steps, ckpt_every=every, ckpt_log_spaced=log, warmup_steps=0)
  s, want = ckpt.checkpoint_steps(tc), listed(tc)
  assert list(s) == want and len(s) == len(want)
  assert [x for x in range(-1, steps + 2) if x in s] == want
  assert ckpt.log_spaced_steps(tc) == [x for x in want if x <= 512 and (x & (x - 1)) == 0]


def test_the_longest_run_is_scheduled_without_listing_it():
  tc = TrainConfig(steps=STEP_MAX, ckpt_every=1000, warmup_steps=0)
  s = ckpt.checkpoint_steps(tc)
  assert len(s) == 11 + STEP_MAX // 1000 + 1 and STEP_MAX in s and 2000 in s and 2001 not in s
  assert list(itertools.islice(s, 13)) == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 2000]


def test_gamma_by_chunks_equals_the_table():
  tc = TrainConfig(steps=300, warmup_steps=20, weight_decay=0.3, lr=1e-2)
  table, by_chunks = optim.gamma_schedule(tc), optim.gamma_fn(tc, chunk=7)
  for s in (350, 0, 1, 6, 7, 8, 20, 299, 300, 123):  # in any order, past the end too
    assert by_chunks(s) == optim.gamma_at(tc, s, table)
