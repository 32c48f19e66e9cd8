"""The exact Fig. 8's trained dense head: ``experiments.planted.fig8`` on a real 3-step run of the
planted test preset's rank-d config; its W-errors equal an independent computation (the model
on the same windows in one batch, a per-context mean by a numpy loop, numpy SVD)."""

import dataclasses

import jax
import numpy as np

from experiments.planted import PRESETS, fig8
from experiments.planted.configs import knee_configs
from sbjax import checkpoint as ckpt
from sbjax.data import make_dataset
from sbjax.model import Model
from sbjax.train import train_once


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


def test_dense_head_werror_against_numpy(tmp_path):
  p = PRESETS["test"]
  d = p.overrides["model.d_model"]
  (cfg,) = [c for r, c in knee_configs(p) if r == d]
  cfg = cfg.replace(train=dataclasses.replace(cfg.train, steps=3, eval_every=3, ckpt_every=3,
                                              warmup_steps=1))
  train_once(cfg, tmp_path / f"r{d}")
  lang = make_dataset(cfg.data, seq_len=cfg.train.seq_len, global_batch_size=8, seed=0,
                      workdir=None).planted
  floors = [{"rank": k, "floor_gap": g} for k, g in ((1, 0.9), (2, 0.3), (4, 0.01), (d, 0.0))]
  rs = fig8.rows({"language": (lang, floors)}, tmp_path / f"r{d}", {1: 0.5})
  ref, n_seen = _reference(tmp_path / f"r{d}", lang, [r["rank"] for r in floors])
  for v in ("raw", "centred", "weighted"):
    np.testing.assert_allclose([r[f"head_werror_{v}"] for r in rs], ref[v], rtol=2e-4, atol=2e-5)
  assert rs[0]["head_contexts_seen"] == n_seen and rs[0]["trained_gap"] == 0.5
  assert rs[-1]["head_werror_centred"] < 1e-5  # rank ≥ d: a width-d model's logits, W-error 0
  assert all(np.isnan(r["head_werror_raw"]) for r in fig8.rows({"language": (lang, floors)},
                                                                None, {}))
