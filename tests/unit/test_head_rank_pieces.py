"""The head-rank experiments' pure pieces (no training): presets and plans, parameter matching,
the monotonicity helpers, the log-log fit, the W-error helpers and bad inputs. The runs end
to end are in tests/e2e/test_head_rank.py."""

import dataclasses
import math

import numpy as np
import pytest

from experiments import head_rank, vocab_threshold, werror_loss
from sbjax.config import Config, ModelConfig
from sbjax.heads import head_param_count
from sbjax.studies import rank_sweep as rs
from sbjax.heads.mos import MoSHead


def test_mos_matching_and_rank_checks():
  v, d = 1024, 64
  mc = ModelConfig(vocab_size=v, d_model=d, n_heads=4)
  lowrank = {r: v * r + r * d for r in rs.rank_grid(d)}
  assert list(lowrank) == [1, 2, 4, 8, 16, 32, 64] and rs.rank_grid(48)[-2:] == (32, 48)
  for m in (1, 2, 4):
    p = head_param_count(dataclasses.replace(mc, head=MoSHead(n_mix=m)))
    assert p == v * d + d * m + m + d * m * d + m * d
    want = min(lowrank, key=lambda r: abs(lowrank[r] - p))
    assert rs.matched_rank(mc, p, list(lowrank)) == (want, pytest.approx(p / lowrank[want]))
  assert rs.non_increasing([3.0, 2.0, 2.0, 1.5]) and not rs.non_increasing([3.0, 2.0, 2.1])
  assert rs.longest_non_increasing([1, 2, 4, 8, 16], [5.0, 4.0, 4.5, 4.4, 4.3]) == [4, 8, 16]


def test_loglog_fit_matches_lstsq():
  rng = np.random.default_rng(0)
  v = np.array([512, 1024, 2048, 4096, 8192])
  r = np.round(3.0 * v ** 0.4 * np.exp(rng.normal(0, 0.2, v.size)))
  fit = vocab_threshold.loglog_fit(v, r)
  a = np.stack([np.log(v), np.ones(v.size)], axis=1)  # y = beta x + c, normal equations
  coef, ssr, *_ = np.linalg.lstsq(a, np.log(r), rcond=None)
  se = math.sqrt(float(ssr[0]) / (v.size - 2) * np.linalg.inv(a.T @ a)[0, 0])
  assert fit["beta"] == pytest.approx(coef[0], rel=1e-10)
  assert fit["log_c"] == pytest.approx(coef[1], rel=1e-10)
  assert fit["beta_se"] == pytest.approx(se, rel=1e-10) and fit["n"] == 5


def test_tpu_presets_validate_without_training(tmp_path):
  corpus = str(tmp_path)  # a plan checks that its corpus exists (sbjax.studies.corpus)
  plan = head_rank.make_plan("tpu", corpus)
  assert isinstance(plan.base, Config) and plan.ranks == tuple(2 ** i for i in range(11))
  specs = rs.specs(plan)
  for s in specs:  # every run's config validates (protocol a with a placeholder trunk)
    cfg = rs.run_config(plan, s, "trunk" if s.protocol == "a" else "")
    Config.from_dict(cfg.to_dict())
  assert {s.protocol for s in specs} == {"full", "a", "b"}
  for v in vocab_threshold.VOCABS["tpu"]:
    p = vocab_threshold.make_plan("tpu", corpus, v)
    assert p.base.data.options.vocab_size == v and max(p.ranks) < p.d_model


def test_bad_inputs_are_refused(tmp_path):
  plan = head_rank.make_plan("quick", str(tmp_path))
  with pytest.raises(ValueError, match=r"ranks \[0\] are outside 1 .. d_model=4"):
    rs.Plan(plan.base, ranks=(0, 4))
  with pytest.raises(ValueError, match="lrs is empty"):
    rs.Plan(plan.base, lrs=())
  with pytest.raises(ValueError, match="unknown head_rank preset 'huge'"):
    head_rank.base_config("huge", "corpus")
  with pytest.raises(FileNotFoundError, match=r"corpus directory not found \(--data=.*missing\); "
                     "pass --data=DIR"):
    head_rank.run(tmp_path / "out", "test", data=str(tmp_path / "missing"))
  with pytest.raises(FileNotFoundError, match="pass --data=DIR"):
    vocab_threshold.run(tmp_path / "vt", "test", data=str(tmp_path / "missing"))
  assert not (tmp_path / "out").exists()  # refused before anything is written



def test_presets_have_test_quick_cpu_tpu_and_test_is_smallest(tmp_path):
  corpus = str(tmp_path)
  for mod in (head_rank, werror_loss, vocab_threshold):
    assert list(mod.PRESETS)[:4] == ["test", "quick", "cpu", "tpu"]
  # issue 32's device preset and its twin, issue 33's bigram r*(V, N) study and its test size
  assert list(vocab_threshold.PRESETS)[4:] == ["gpu", "gpu-test", "cpu-bigram-n", "test-bigram-n"]
  t, q = head_rank.PRESETS["test"], head_rank.PRESETS["quick"]
  assert t.overrides["train.steps"] < q.overrides["train.steps"]
  assert t.knobs.head_steps < q.knobs.head_steps
  n_runs = {k: len(rs.specs(head_rank.make_plan(k, corpus))) for k in ("test", "quick")}
  assert n_runs["test"] <= n_runs["quick"]
  # werror_loss trains (when it must) the head-rank sweep of the same preset
  for name, p in werror_loss.PRESETS.items():
    hr = head_rank.PRESETS[name]
    assert (p.base, p.overrides) == (hr.base, hr.overrides)
  plan = head_rank.make_plan("cpu", corpus)  # the Plan's knobs are the preset's
  assert plan.lrs == (1e-2, 2e-2) and plan.mos_mix == (1, 2) and plan.head_steps == 150
  assert plan.base.data.source == "text" and plan.base.data.options.path == corpus
  assert plan.base.data.options.vocab_size == 1024 and plan.base.train.eval_every == plan.base.train.steps
  vt = vocab_threshold.make_plan("cpu", corpus, 2048, "tfds")
  assert vt.base.data.options.vocab_size == 2048 and vt.base.name == "vocab_threshold-cpu-V2048"
  assert vt.protocols == ("a",) and vt.base.model.d_model == 64 and max(vt.ranks) == 64
  assert vocab_threshold.VOCABS["cpu"] == (256, 512, 1024, 2048)  # issue 18
  assert vt.base.data.options.data_dir == "tfds"


def test_werror_helpers():
  w = np.diag([3.0, 2.0, 1.0]) @ np.eye(3, 5)
  sigma, curve = werror_loss.w_error_curve(w.T)
  np.testing.assert_allclose(sigma, [3, 2, 1], rtol=1e-6)
  np.testing.assert_allclose(curve, [1.0, math.sqrt(5 / 14), math.sqrt(1 / 14), 0.0], atol=1e-6)
  assert werror_loss.rank_at(curve, 0.6) == 1 and werror_loss.rank_at(curve, 0.3) == 2
  assert werror_loss.threshold_rank([4, 1, 2], [2.03, 3.0, 2.01], 2.0) == 2
  assert werror_loss.threshold_rank([1, 2], [3.0, 2.5], 2.0) is None
  assert werror_loss.head_rank_dir("out/werror_loss").as_posix() == "out/head_rank"
