"""The exact Fig. 8's trained dense head (issue 33 item 2): ``experiments.planted.fig8`` reads
the knee language's rank-d run (runs/r<d>, a real 3-step training of the planted test preset's
config), and its W-errors equal an independent computation (the model applied to the same
windows in one batch, a per-context mean by a numpy loop, numpy SVD); the sentence says where
the gap opens against the head's W-error, and says so when no dense run is there."""

import dataclasses
import json
import shutil

import jax
import numpy as np
import pytest

from experiments.planted import PRESETS, fig8, knee_configs
from experiments.shared import write_rows
from sbjax import checkpoint as ckpt
from sbjax.data.sources import language_of
from sbjax.model import Model
from sbjax.train import train_once


@pytest.fixture(scope="module")
def out(tmp_path_factory):
  out = tmp_path_factory.mktemp("fig8")
  p = PRESETS["test"]
  d = p.overrides["model.d_model"]
  (r, cfg), = [(r, c) for r, c in knee_configs(p) if r == d]
  cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=3, eval_every=3,
                                                           ckpt_every=3, warmup_steps=1))
  train_once(cfg, out / "runs" / f"r{d}")
  info = dict(cfg.data.options.stream_params())
  (out / "planted_meta.json").write_text(json.dumps(
      {"settings": {"d_model": d, "ranks": [1, d], "tol": 0.05}, "language": info}))
  write_rows(out / "planted_floor.csv", [{"rank": k, "floor_gap": g}
                                         for k, g in ((1, 0.9), (2, 0.3), (4, 0.01), (d, 0.0))])
  return out


def _reference(wd, lang, ranks):
  cfg, params, _ = ckpt.load_params(wd)
  x = np.asarray(lang.sample(np.random.default_rng([lang.seed, 7]),
                             (fig8.HEAD_WINDOWS, cfg.train.seq_len)))
  lq = np.asarray(jax.nn.log_softmax(Model(cfg.model).apply(params, x), -1), np.float64)
  lq, ctx = lq.reshape(-1, lang.vocab), x.reshape(-1)  # context 1: the current token
  seen = np.unique(ctx)
  m = np.stack([lq[ctx == c].mean(0) for c in seen])
  pi = lang.stationary[seen] / lang.stationary[seen].sum()
  cen = m - m.mean(1, keepdims=True)
  out = {}
  for v, a in (("raw", m), ("centred", cen), ("weighted", np.sqrt(pi)[:, None] * cen)):
    s = np.linalg.svd(a, compute_uv=False)
    out[v] = [np.sqrt(np.sum(s[r:] ** 2)) / np.linalg.norm(a) for r in ranks]
  return out, seen.size


def test_dense_head_werror_and_sentence(out):
  meta = json.loads((out / "planted_meta.json").read_text())
  lang = language_of(meta["language"])
  assert lang.context == 1
  rs = fig8.write(out)
  ranks = [r["rank"] for r in rs]
  d = meta["settings"]["d_model"]
  ref, n_seen = _reference(out / "runs" / f"r{d}", lang, ranks)
  for v in ("raw", "centred", "weighted"):
    np.testing.assert_allclose([r[f"head_werror_{v}"] for r in rs], ref[v], rtol=2e-4, atol=2e-5)
  assert {r["head_run"] for r in rs} == {f"r{d}"} and rs[0]["head_contexts_seen"] == n_seen
  assert rs[-1]["head_werror_centred"] < 1e-5  # rank ≥ d: a width-d model's logits, W-error 0
  s = fig8.sentence(rs, 0.05)
  closed = max(r["head_werror_weighted"] for r in rs if r["floor_gap"] <= 0.05)
  opened = min(r["head_werror_weighted"] for r in rs if r["floor_gap"] > 0.05)
  assert (f"trained dense head (r{d}, mean log-probs over {n_seen} contexts): the gap opens "
          "between W-error") in s
  assert f"{closed:.3f} and {opened:.3f} (weighted)" in s.split("trained dense head (")[1]
  md = "\n".join(fig8.lines(out, "pl", 0.05))
  assert f"| language | 1 | 0.9000 | – | {rs[0]['werror_raw']:.4f}" in md
  assert f"{rs[0]['head_werror_weighted']:.4f} |" in md
  # without the dense run: no head columns, and the sentence says so
  shutil.move(out / "runs", out / "runs_aside")
  try:
    rs2 = fig8.write(out)
    assert all(np.isnan(r["head_werror_raw"]) for r in rs2)
    assert "no trained dense head measured for it" in fig8.sentence(rs2, 0.05)
    assert "trained dense head (" not in fig8.sentence(rs2, 0.05)
  finally:
    shutil.move(out / "runs_aside", out / "runs")
