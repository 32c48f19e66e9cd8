"""An independent optimiser for the exact-floor tests: Adam on the factors (X, Y) of the logit
matrix L = X Yᵀ from a random start, written plainly in numpy (nothing from sbjax.studies.floor).
The floor is the minimum over rank-r matrices, so no such fit may end below it."""

import numpy as np


def xent(L, p, pi):
  """Σ_c π_c CE(P_c, softmax(L_c)) written directly."""
  L = L - L.max(1, keepdims=True)
  logq = L - np.log(np.exp(L).sum(1, keepdims=True))
  return float(-(pi * (p * logq).sum(1)).sum())


def adam_fit(p, pi, r, seed=0, steps=3000, lr=0.05, scale=0.5):
  """The value Adam reaches on (X, Y) ∈ R^{C×r} × R^{V×r} from N(0, scale²) entries."""
  C, V = p.shape
  rng = np.random.default_rng(seed)
  x, y = rng.normal(0, scale, (C, r)), rng.normal(0, scale, (V, r))
  mx, vx, my, vy = [np.zeros_like(a) for a in (x, x, y, y)]
  for t in range(1, steps + 1):
    L = x @ y.T
    q = np.exp(L - L.max(1, keepdims=True))
    q /= q.sum(1, keepdims=True)
    g = pi[:, None] * (q - p)
    gx, gy = g @ y, g.T @ x
    for a, gr, m, v in ((x, gx, mx, vx), (y, gy, my, vy)):
      m *= 0.9
      m += 0.1 * gr
      v *= 0.999
      v += 0.001 * gr * gr
      a -= lr * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-12)
  return xent(x @ y.T, p, pi)


def adam_best(p, pi, r, seeds=3, steps=3000, lr=0.05):
  """The best value over ``seeds`` random starts."""
  return min(adam_fit(p, pi, r, seed=s, steps=steps, lr=lr) for s in range(seeds))


def adam_ranks(p, pi, ranks, seed=0, steps=800, lr=0.05, scale=0.5):
  """Adam on every rank of ``ranks`` at once (jax, float32, one jitted scan): the factors of
  all ranks are padded to R = max(ranks) columns and masked, X: [n, C, R], Y: [n, V, R],
  entries N(0, scale²) from ``numpy.random.default_rng(seed)``; the same update as
  ``adam_fit``. Returns the float64 value (``xent``) each rank reaches, [n]."""
  import jax  # deferred: the numpy reference above must not need jax
  import jax.numpy as jnp  # deferred: as above
  R, C, V, n = max(ranks), p.shape[0], p.shape[1], len(ranks)
  mask = (np.arange(R)[None, :] < np.asarray(ranks)[:, None]).astype(np.float32)[:, None, :]
  rng = np.random.default_rng(seed)
  x0 = rng.normal(0, scale, (n, C, R)) * mask
  y0 = rng.normal(0, scale, (n, V, R)) * mask
  P, PI = jnp.asarray(p, jnp.float32), jnp.asarray(pi / pi.sum(), jnp.float32)

  def loss(xy):
    logq = jax.nn.log_softmax(jnp.einsum("ncr,nvr->ncv", xy[0] * mask, xy[1] * mask), -1)
    return -jnp.einsum("c,cv,ncv->", PI, P, logq)

  def step(carry, t):
    xy, m, v = carry
    g = jax.grad(loss)(xy)
    m = [0.9 * a + 0.1 * b for a, b in zip(m, g)]
    v = [0.999 * a + 0.001 * b * b for a, b in zip(v, g)]
    xy = [a - lr * (mm / (1 - 0.9 ** t)) / (jnp.sqrt(vv / (1 - 0.999 ** t)) + 1e-12)
          for a, mm, vv in zip(xy, m, v)]
    return (xy, m, v), None

  @jax.jit
  def run(xy):
    z = [jnp.zeros_like(a) for a in xy]
    ts = jnp.arange(1, steps + 1, dtype=jnp.float32)
    return jax.lax.scan(step, (xy, z, z), ts)[0][0]

  x, y = (np.asarray(a, np.float64) * mask for a in run([jnp.asarray(x0, jnp.float32),
                                                          jnp.asarray(y0, jnp.float32)]))
  return np.array([xent(x[i] @ y[i].T, p, pi / pi.sum()) for i in range(n)])
