"""The trained heads at each head lr, side by side (issue 33, item 3), from constructed
runs.csv / vocab_threshold.csv rows: r*_lr follows each lr's own losses (an lr that
under-trains small ranks gets a larger r*_lr), the winner per rank is named, and one head lr
prints nothing."""

from experiments.vocab_threshold.head_lrs import head_lr_reading, head_lr_rows, head_lr_section

TABLE = [{"V": 256, "d_model": 8, "tol_token": 0.01}]


def runs(losses_by_lr):
  return [{"V": 256, "protocol": "a", "head": "lowrank", "rank": r, "lr": lr, "eval_loss": l}
          for lr, losses in losses_by_lr.items() for r, l in losses.items()] + [
      {"V": 256, "protocol": "full", "head": "dense", "rank": 8, "lr": 3e-3, "eval_loss": 3.0}]


def test_rstar_per_lr_follows_its_own_losses():
  slow = {2: 3.50, 4: 3.30, 8: 3.10}  # 1e-2: small ranks under-trained, r* = 8
  fast = {2: 3.20, 4: 3.105, 8: 3.10}  # 3e-2: r = 4 within 0.01 of its rank-8 head
  rows = head_lr_rows(runs({1e-2: slow, 3e-2: fast}), TABLE)
  by = {r["lr"]: r for r in rows}
  assert by[1e-2]["r_star"] == 8 and by[3e-2]["r_star"] == 4
  assert by[3e-2]["wins"] == [2, 4, 8] and by[1e-2]["wins"] == [8]  # tie at r = 8
  text = "\n".join(head_lr_section(runs({1e-2: slow, 3e-2: fast}), TABLE))
  assert "| 256 | 0.01 | 3.5000 | 3.3000 | 3.1000 | 8 | 8 |" in text
  assert "| 256 | 0.03 | 3.2000 | 3.1050 | 3.1000 | 4 | 2, 4, 8 |" in text
  # the other way round: swap which lr trains small ranks well
  rows = head_lr_rows(runs({1e-2: fast, 3e-2: slow}), TABLE)
  assert {r["lr"]: r["r_star"] for r in rows} == {1e-2: 4, 3e-2: 8}


def test_one_head_lr_prints_nothing():
  assert head_lr_section(runs({1e-2: {2: 3.5, 8: 3.1}}), TABLE) == []


TABLE2 = [{"V": 256, "d_model": 8, "tol_token": 0.01}, {"V": 512, "d_model": 8, "tol_token": 0.01}]


def runs2(by_v):
  """{V: {lr: {rank: loss}}} -> runs.csv rows."""
  return [{"V": v, "protocol": "a", "head": "lowrank", "rank": r, "lr": lr, "eval_loss": l}
          for v, by_lr in by_v.items() for lr, losses in by_lr.items()
          for r, l in losses.items()]


SLOW = {2: 3.50, 4: 3.30, 8: 3.10}  # r*_lr = 8
FAST = {2: 3.20, 4: 3.105, 8: 3.10}  # r*_lr = 4


def test_reading_flat_at_each_lr_with_levels_that_differ():
  rows = head_lr_rows(runs2({256: {1e-2: SLOW, 3e-2: FAST}, 512: {1e-2: SLOW, 3e-2: FAST}}),
                      TABLE2)
  text = head_lr_reading(rows)
  assert "lr 0.01: 8, 8 (the same at every V); lr 0.03: 4, 4 (the same at every V)" in text
  assert "it holds at every head lr run here" in text
  assert "Its level does depend on the head lr" in text
  assert text in "\n".join(head_lr_section(
      runs2({256: {1e-2: SLOW, 3e-2: FAST}, 512: {1e-2: SLOW, 3e-2: FAST}}), TABLE2))


def test_reading_not_flat_at_one_lr_is_undecided_and_equal_levels_agree():
  # lr 3e-2: r* 4 at V 256, 8 at V 512 -> not flat; lr 1e-2 flat at 8
  rows = head_lr_rows(runs2({256: {1e-2: SLOW, 3e-2: FAST}, 512: {1e-2: SLOW, 3e-2: SLOW}}),
                      TABLE2)
  text = head_lr_reading(rows)
  assert "lr 0.03: 4, 8 (not the same at every V)" in text
  assert "not flat at lr 0.03): undecided" in text and "holds at every head lr" not in text
  rows = head_lr_rows(runs2({256: {1e-2: SLOW, 3e-2: SLOW}, 512: {1e-2: SLOW, 3e-2: SLOW}}),
                      TABLE2)
  text = head_lr_reading(rows)
  assert "The head lrs agree on its level." in text and "does depend" not in text
