"""head_rank and werror_loss at their test presets: tables, frozen trunk, W-errors, every preset."""

import dataclasses
import json
import math
import re

import jax
import numpy as np
import pytest

from experiments import head_rank, werror_loss
from experiments.common import read_rows
from sbjax import checkpoint as ckpt
from sbjax.config import Config, ModelConfig
from sbjax.experiment.context import Context
from sbjax.experiment.runner import run
from sbjax.heads import head_param_count
from sbjax.heads.mos import MoSHead
from sbjax.studies import head_rank as hr
from tests._corpus import generated_docs, write_corpus
from tests._metrics_reference import ref_w_error

K = head_rank.PRESETS["test"].knobs
TEXT = ("protocol", "head", "run")


@pytest.fixture(scope="module")
def outs(tmp_path_factory):
  root = tmp_path_factory.mktemp("head_rank")
  corpus = write_corpus(root / "corpus", generated_docs(0, 12))
  run(head_rank.EXPERIMENT, root / "head_rank", "test", str(corpus), verbose=False)
  run(werror_loss.EXPERIMENT, root / "werror_loss", "test", str(corpus), verbose=False)
  return root, corpus


def test_sweep_csv_best_lr_and_params(outs):
  out = outs[0] / "head_rank"
  rows = read_rows(out / head_rank.CSV, TEXT)
  assert list(rows[0]) == list(hr.COLUMNS)
  v, d = len(np.load(out / head_rank.FULL_HEAD)), head_rank.PRESETS["test"].overrides[
      "model.d_model"]
  for p, grid in (("full", K.lrs), ("b", K.lrs), ("a", K.head_lrs)):
    for rank in [d] if p == "full" else K.ranks:
      sel = [r for r in rows if r["protocol"] == p and int(r["rank"]) == rank]
      assert [r["lr"] for r in sel] == list(grid)
      losses = [r["eval_loss"] for r in sel]
      assert [int(r["best"]) for r in sel] == [int(i == np.argmin(losses)) for i in range(len(sel))]
      for r in sel:  # the CSV loss is the run's own last evaluation on disk
        recs = [json.loads(x) for x in (out / "runs" / r["run"] / "metrics.jsonl").open()]
        assert r["eval_loss"] == [x for x in recs if "eval_loss" in x][-1]["eval_loss"]
  for r in rows:  # head parameter counts, written out by hand
    assert r["params"] == {"dense": v * d, "lowrank": v * r["rank"] + r["rank"] * d}[r["head"]]
  s = json.loads((out / head_rank.SUMMARY).read_text())
  assert s["b"]["eval_loss"] == [r["eval_loss"] for r in hr.best_rows(rows, "b")]


def test_frozen_trunk_is_the_best_full_runs_trunk(outs):
  out = outs[0] / "head_rank"
  rows = read_rows(out / head_rank.CSV, TEXT)
  best = min((r for r in rows if r["protocol"] == "full"), key=lambda r: r["eval_loss"])
  _, src, _ = ckpt.load_params(out / "runs" / best["run"])
  for r in (r for r in rows if r["protocol"] == "a"):
    cfg, p, step = ckpt.load_params(out / "runs" / r["run"])
    assert cfg.train.freeze_trunk and step == cfg.train.steps == K.head_steps
    for k in (k for k in src if k != "head"):
      jax.tree.map(np.testing.assert_array_equal, p[k], src[k])


def test_werror_against_numpy_svd_of_the_checkpointed_head(outs):
  root = outs[0]
  rows = read_rows(root / "head_rank" / head_rank.CSV, TEXT)
  best = min((r for r in rows if r["protocol"] == "full"), key=lambda r: r["eval_loss"])
  _, params, _ = ckpt.load_params(root / "head_rank" / "runs" / best["run"])
  w = np.asarray(params["head"]["w"], np.float64)  # the dense head, V x d
  np.testing.assert_array_equal(np.load(root / "head_rank" / head_rank.FULL_HEAD), w)
  s = np.linalg.svd(w, compute_uv=False)
  table = read_rows(root / "werror_loss" / werror_loss.CSV, ("protocol", "head"))
  assert [r["protocol"] for r in table] == ["full", "a", "b"]
  for r in table:
    assert r["w_error"] == pytest.approx(ref_w_error(s, int(r["rank"])), abs=2e-5)
    ref = [x for x in rows if x["protocol"] == r["protocol"] and x["head"] != "mos"
           and x["rank"] == r["rank"] and int(x["best"])]
    assert r["eval_loss"] == ref[0]["eval_loss"]
    assert r["rel_excess"] == pytest.approx(r["eval_loss"] / table[0]["eval_loss"] - 1, abs=1e-12)
  summary = json.loads((root / "werror_loss" / werror_loss.SUMMARY).read_text())
  assert summary["rank_at_werror_0.6"] == min(k for k in range(len(s) + 1)
                                              if ref_w_error(s, k) <= 0.6)
  assert summary["head_rank_dir"] == str(root / "head_rank")
  assert not (root / "werror_loss" / "runs").exists()  # it read head_rank's sweep


def test_werror_loss_alone_trains_the_same_sweep(outs, tmp_path):
  root, corpus = outs
  run(werror_loss.EXPERIMENT, tmp_path / "werror_loss", "test", str(corpus), verbose=False)
  assert (tmp_path / "werror_loss" / "runs").is_dir()
  for name in (werror_loss.CSV, werror_loss.CURVE):
    assert (tmp_path / "werror_loss" / name).read_text() == (root / "werror_loss" / name
                                                              ).read_text()


def test_report_table_is_the_csvs(outs):
  out = outs[0] / "head_rank"
  section = head_rank.report(out, "hr")
  assert "![head rank](hr/fig_head_rank.png)" in section
  assert (out / "fig_head_rank.png").stat().st_size > 1000
  rows = read_rows(out / head_rank.CSV, TEXT)
  best = {(r["protocol"], int(r["rank"])): r["eval_loss"] for r in rows
          if int(r["best"]) and r["head"] == "lowrank"}
  table = [line for line in section.splitlines() if re.match(r"^\| \d+ \|", line)]
  assert len(table) == len({k for _, k in best})
  for line in table:
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert float(cells[1]) == pytest.approx(best[("a", int(cells[0]))], abs=6e-5)
    assert float(cells[4]) == pytest.approx(best[("b", int(cells[0]))], abs=6e-5)


def test_mos_heads_match_the_nearest_lowrank_count():
  v, d = 1024, 64
  mc = ModelConfig(vocab_size=v, d_model=d, n_heads=4)
  lowrank = {r: v * r + r * d for r in hr.rank_grid(d)}
  assert list(lowrank) == [1, 2, 4, 8, 16, 32, 64] and hr.rank_grid(48)[-2:] == (32, 48)
  for m in (1, 2, 4):
    p = head_param_count(dataclasses.replace(mc, head=MoSHead(n_mix=m)))
    assert p == v * d + d * m + m + d * m * d + m * d
    want = min(lowrank, key=lambda r: abs(lowrank[r] - p))
    assert hr.matched_rank(mc, p, list(lowrank)) == (want, pytest.approx(p / lowrank[want]))


def test_every_preset_builds(tmp_path, monkeypatch):
  monkeypatch.setattr(hr, "trunk", lambda *a: hr.Trunk("trunk", -1, math.nan))
  for name, p in head_rank.PRESETS.items():
    ctx = Context(tmp_path, name, p, str(tmp_path))
    groups = list(head_rank.plan(ctx))
    k, d = p.knobs, p.overrides["model.d_model"]
    n = len(hr.ranks(k, d))
    mos = {q: len(k.mos_mix) * (q in k.mos_protocols) for q in "ab"}
    assert len(groups) == (1 + (n + mos["b"]) * ("b" in k.protocols)
                           + (n * ("a" in k.protocols) + mos["a"]) * len(k.head_lrs))
    for g in groups:
      for c in g.configs:
        assert Config.from_dict(c.to_dict()) == c
        assert c.train.freeze_trunk == (g.labels[0]["protocol"] == "a")
