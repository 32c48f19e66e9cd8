r"""A probe of the staged MoS fit (issue 18, must-show 1, the exact-size head): can the free-
feature relaxation find the planted language's W, so that its per-context components align
into the exact-size MoS head?

  PYTHONPATH=. python benchmarks/mos_staged_probe.py [--seeds=0,1 --rounds=3 --restarts=16]

Language: planted_mos V = 64, k = 3, M = 4, α = 8 (uniform gates), as benchmarks/mos_exact_fit.py.
Stages, per seed:
1. the relaxation: W (V×e, e = k+1) shared, a free feature g_{c,m} (e numbers) per context and
   component and free gate logits a_{c,m}; Adam on Σ_c π_c CE(P_c, Σ_m softmax(a_c)_m
   softmax(W g_{c,m})) (it contains every MoS head of component size e);
2. ``rounds`` times: with W fixed, ``restarts`` independent random restarts of (g_c, a_c) per
   context, the best kept per context; then (W, g, a) jointly again;
3. diagnostics: fit − H; how far the learned W's column span is from the true one (relative
   least-squares residual of W_learned on [αY/√k, b], both centred over V: the softmax gauge);
   the alignment (per-context component permutations chosen so that [vec g_c, a_c − mean]
   lies closest to one d-dimensional affine subspace, PCA alternated with the choice of
   permutation, ``--inits`` random starts): the residual share of the total spread;
4. the MoS head built from that subspace (h_c its coordinates, U_m and c_m its basis and mean,
   W learned), fit − H as built and after Adam fine-tuning (3000 steps).
An aligned residual share near 0 and a built head near H would make the staged fit work.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sbjax.config import ModelConfig
from sbjax.data.planted_mos import PlantedMoS
from sbjax.heads.mos import MoSHead
from sbjax.studies import head_fit as hf

V, K, M, D = 64, 3, 4, 4
E = K + 1


def adam(params, loss, steps, lr):
  opt = optax.adam(optax.cosine_decay_schedule(lr, steps, 0.01))

  def body(carry, _):
    p, os = carry
    u, os = opt.update(jax.grad(loss)(p), os, p)
    return (optax.apply_updates(p, u), os), None
  return jax.lax.scan(body, (params, opt.init(params)), None, length=steps)[0][0]


class Relaxation:
  def __init__(self, lang):
    self.p = jnp.asarray(lang.probs, jnp.float32)
    self.pi = jnp.asarray(lang.stationary / lang.stationary.sum(), jnp.float32)
    self.c = self.p.shape[0]

  def per_ctx(self, w, g, a):  # w [V,e], g [C,M,e], a [C,M] -> CE per context [C]
    comp = jax.nn.log_softmax(jnp.einsum("cme,ve->cmv", g, w), -1)
    logq = jax.nn.logsumexp(comp + jax.nn.log_softmax(a, -1)[..., None], axis=1)
    return -jnp.sum(self.p * logq, -1)

  def total(self, w, g, a):
    return jnp.sum(self.pi * self.per_ctx(w, g, a))

  def joint(self, w, g, a):
    return jax.jit(lambda s: adam(s, lambda t: self.total(*t), 3000, 0.05))((w, g, a))

  def restarts(self, w, key, n):
    g0 = jax.random.normal(key, (n, self.c, M, E))

    def one(g):
      g, a = adam((g, jnp.zeros((self.c, M))), lambda t: jnp.sum(self.per_ctx(w, *t)), 1500, 0.1)
      return g, a, self.per_ctx(w, g, a)
    gs, as_, ls = jax.jit(jax.vmap(one))(g0)
    best, idx = jnp.argmin(ls, 0), jnp.arange(self.c)
    return gs[best, idx], as_[best, idx], ls[best, idx]


def align(g, a, d, inits, seed):
  """Per-context permutations + a d-dim affine subspace (PCA alternated with the choice)."""
  a = np.asarray(a, np.float64)
  x = np.concatenate([np.asarray(g, np.float64), (a - a.mean(1, keepdims=True))[..., None]], -1)
  c = x.shape[0]
  perms = np.array(list(itertools.permutations(range(M))))
  xp = x[:, perms].reshape(c, len(perms), -1)
  rng, best = np.random.default_rng(seed), None
  for _ in range(inits):
    choice = rng.integers(len(perms), size=c)
    for _ in range(50):
      y = xp[np.arange(c), choice]
      mu = y.mean(0)
      basis = np.linalg.svd(y - mu, full_matrices=False)[2][:d].T
      z = xp - mu
      res = ((z - (z @ basis) @ basis.T) ** 2).sum(-1)
      new = res.argmin(1)
      if (new == choice).all():
        break
      choice = new
    tot = float(res[np.arange(c), choice].sum())
    if best is None or tot < best[0]:
      best = (tot, choice, mu, basis)
  tot, choice, mu, basis = best
  y = xp[np.arange(c), choice]
  return tot / float(((y - y.mean(0)) ** 2).sum()), mu, basis, (y - mu) @ basis


def build_head(w, mu, basis, h):
  mu, bm = mu.reshape(M, E + 1), basis.reshape(M, E + 1, D)
  p = {"prior_w": bm[:, E, :].T, "prior_b": mu[:, E], "proj_w": np.transpose(bm[:, :E], (2, 0, 1)),
       "proj_b": mu[:, :E], "w": np.asarray(w, np.float64)}
  return {k: jnp.asarray(v, jnp.float32) for k, v in p.items()}, jnp.asarray(h, jnp.float32)


def head_loss(rx, cfg):
  def loss(s):
    return -jnp.sum(rx.pi * jnp.sum(rx.p * hf.head_log_probs(s[0], s[1], cfg), -1))
  return loss


def mos_cfg():
  return ModelConfig(vocab_size=V, d_model=D, n_heads=1, pos="learned",
                     head=MoSHead(n_mix=M, dim=E, act="linear"), init_std=0.2)


def truth_check(lang, seed, inits) -> dict:
  """Stages 3-4 on the language's own (W, g, a), components shuffled per context: the
  alignment must undo the shuffle and the built head must give H (a check of the probe)."""
  rx, mp = Relaxation(lang), lang.mos_parameters()
  rng = np.random.default_rng(seed)
  g = np.transpose(np.asarray(mp["features"], np.float64), (1, 0, 2))  # [C, M, e]
  a = np.asarray(mp["log_gates"], np.float64)
  for c in range(rx.c):
    p = rng.permutation(M)
    g[c], a[c] = g[c][p], a[c][p]
  share, mu, basis, h = align(g, a, D, inits, seed)
  w = np.asarray(mp["w"], np.float64)
  built = build_head(jnp.asarray(w - w.mean(0), jnp.float32), mu, basis, h)
  return {"align_resid": share, "built": float(head_loss(rx, mos_cfg())(built)) - lang.entropy}


def probe(lang, seed, rounds, n_restarts, inits) -> dict:
  rx, key = Relaxation(lang), jax.random.key(seed)
  k1, k2, key = jax.random.split(key, 3)
  w, g, a = rx.joint(0.2 * jax.random.normal(k1, (V, E)), jax.random.normal(k2, (rx.c, M, E)),
                     jnp.zeros((rx.c, M)))
  for _ in range(rounds):
    key, sub = jax.random.split(key)
    g2, a2, ls = rx.restarts(w, sub, n_restarts)
    use = ls < rx.per_ctx(w, g, a)
    g, a = jnp.where(use[:, None, None], g2, g), jnp.where(use[:, None], a2, a)
    w, g, a = rx.joint(w, g, a)
  out = {"relaxed": float(rx.total(w, g, a)) - lang.entropy}
  wt = np.asarray(lang.mos_parameters()["w"], np.float64)
  wl = np.asarray(w, np.float64)
  wt, wl = wt - wt.mean(0), wl - wl.mean(0)
  fit = np.linalg.lstsq(wt, wl, rcond=None)[0]
  out["w_span_resid"] = float(np.linalg.norm(wt @ fit - wl) / np.linalg.norm(wl))
  out["align_resid"], mu, basis, h = align(g, a, D, inits, seed)
  loss = head_loss(rx, mos_cfg())
  state = build_head(jnp.asarray(wl, jnp.float32), mu, basis, h)
  out["built"] = float(loss(state)) - lang.entropy
  out["tuned"] = float(loss(jax.jit(lambda s: adam(s, loss, 3000, 1e-2))(state))) - lang.entropy
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--seeds", default="0,1")
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--restarts", type=int, default=16)
  ap.add_argument("--inits", type=int, default=20)
  a = ap.parse_args(argv)
  lang = PlantedMoS(V, K, alpha=8.0, n_mix=M, seed=0)
  print(f"planted_mos V={V} k={K} M={M}: H = {lang.entropy:.5f}")
  t = truth_check(lang, 0, a.inits)
  print(f"check on the true parameters, components shuffled per context: aligned residual "
        f"share {t['align_resid']:.2e}, built head − H {t['built']:.2e}")
  print("| seed | relaxed fit − H | W span residual | aligned residual share | built head − H "
        "| fine-tuned − H | seconds |")
  print("|---|---|---|---|---|---|---|")
  for s in [int(x) for x in a.seeds.split(",") if x]:
    t0 = time.perf_counter()
    r = probe(lang, s, a.rounds, a.restarts, a.inits)
    print(f"| {s} | {r['relaxed']:.5f} | {r['w_span_resid']:.3f} | {r['align_resid']:.3f} | "
          f"{r['built']:.4f} | {r['tuned']:.5f} | {time.perf_counter() - t0:.0f} |", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
