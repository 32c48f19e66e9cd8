"""experiments/collapse.py (Wu & Papyan 2024): statistics, the 32k-class pass, quick preset."""

import csv
import itertools
import math
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as sps

from sbjax.studies import collapse_grid as cg
from sbjax.studies import stats
from sbjax.config import ModelConfig
from sbjax.metrics import collapse as C
from sbjax.model import Model
from tests._corpus import generated_docs, write_corpus


# ------------------------------------------------------------------------------ statistics
def test_pearson_r2_match_scipy():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(5, 12))
  y = 0.7 * x + rng.normal(size=(5, 12))
  r, r2 = stats.pearson(x, y), stats.r_squared(x, y)
  for i in range(5):
    lr = sps.linregress(x[i], y[i])
    assert r[i] == pytest.approx(sps.pearsonr(x[i], y[i])[0], abs=1e-12)
    assert r2[i] == pytest.approx(lr.rvalue ** 2, abs=1e-12)
  xf, yf = stats.finite_pairs([1.0, np.nan, 3.0, 4.0, 5.0], [2.0, 1.0, np.inf, 3.0, 7.0])
  np.testing.assert_array_equal(xf, [1.0, 4.0, 5.0])
  assert math.isnan(float(stats.pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])))


def test_permutation_pvalue_exact_small_n():
  """Monte-Carlo p vs the exact p enumerated over all 7! permutations."""
  rng = np.random.default_rng(1)
  x = rng.normal(size=7)
  y = 0.5 * x + rng.normal(size=7)
  r0 = abs(sps.pearsonr(x, y)[0])
  rs = np.array([abs(np.corrcoef(x, np.asarray(y)[list(p)])[0, 1])
                 for p in itertools.permutations(range(7))])
  p_exact = np.mean(rs >= r0 - 1e-12)
  n = 10_000
  p = float(stats.permutation_pvalue(x, y, n, seed=3))
  assert abs(p - p_exact) < 4 * math.sqrt(p_exact * (1 - p_exact) / n) + 2 / n


def test_permutation_uniform_under_null_and_small_for_strong_correlation():
  rng = np.random.default_rng(2)
  x = rng.normal(size=(400, 10))
  y = rng.normal(size=(400, 10))  # independent: the null holds
  p = stats.permutation_pvalue(x, y, n_perm=199, seed=4)
  assert p.shape == (400,)
  assert sps.kstest(p, "uniform").pvalue > 0.01
  assert 0.4 < p.mean() < 0.6
  y_strong = x[:8] + 0.1 * rng.normal(size=(8, 10))
  p_strong = stats.permutation_pvalue(x[:8], y_strong, n_perm=10_000, seed=5)
  assert np.all(p_strong <= 2e-3)


# ------------------------------------------------------------------------------ the pass
def _stacked_random_params(mc, m, t=16):
  model = Model(mc)
  keys = jax.vmap(jax.random.key)(jnp.arange(m))
  return jax.jit(jax.vmap(lambda k: model.init(k, 1, t)))(keys)


def test_collapse_pass_matches_direct_computation(quick_out):
  """The vmapped three-pass pipeline == collapse_metrics on features from model.apply,
  and the validation loss == a numpy log-softmax cross-entropy. (The quick preset's
  L1-d16 config, chunk and member count: its compiled functions are reused.)"""
  import json

  from experiments import collapse

  p = collapse.PRESETS["quick"]
  vocab = json.loads((quick_out / "collapse_meta.json").read_text())["vocab_size"]
  mc = collapse.model_config(p, 1, 16, vocab)
  t = p.seq_len
  params = _stacked_random_params(mc, len(p.weight_decays), t)
  rng = np.random.default_rng(0)
  tr = rng.integers(0, vocab - 8, (37, t + 1)).astype(np.int32)  # a padded last chunk
  va = rng.integers(0, vocab, (9, t + 1)).astype(np.int32)
  res = cg.collapse_pass(mc, jax.device_get(params), tr, va, chunk=p.chunk,
                         feature_cache_bytes=0)  # pass 2 recomputes the forward
  model = Model(mc)
  apply = jax.jit(lambda p, x: model.apply(p, x, ("h",)))
  d = mc.d_model
  for i in range(2):
    p_i = jax.tree.map(lambda a: a[i], params)
    s_all, ex = apply(p_i, jnp.asarray(np.concatenate([tr, va])[:, :-1]))  # one compile
    h_all = np.asarray(ex["h"]).reshape(-1, d)
    sv = np.asarray(s_all)[37:]
    w = np.asarray(p_i["embed"])  # tied head: W = the token embedding
    ref = C.collapse_metrics(h_all[:37 * t], tr[:, 1:].ravel(), w, h_all[37 * t:],
                             va[:, 1:].ravel())
    for k, v in ref.items():
      assert res[i][k] == pytest.approx(v, rel=2e-4, abs=1e-5), k
    z = np.asarray(sv, np.float64)
    lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
    nll = lse - np.take_along_axis(z, va[:, 1:, None], -1)[..., 0]
    assert res[i]["val_loss"] == pytest.approx(nll.mean(), rel=1e-5)
    assert res[i]["train_tokens"] == 37 * t and res[i]["val_tokens"] == 9 * t
  assert res[0]["nc1_cdnv"] != pytest.approx(res[1]["nc1_cdnv"], rel=1e-3)  # members differ


def _rss_kib(field="VmRSS"):
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1])
  raise RuntimeError(f"{field} not in /proc/self/status")


def _peak_rss_delta_mib(fn):
  """Peak resident memory during fn() minus the resident memory before it (MiB): the
  kernel's high-water mark reset via /proc/self/clear_refs, else a 2 ms sampler."""
  base = _rss_kib()
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
    out = fn()
    return out, (_rss_kib("VmHWM") - base) / 1024
  except OSError:
    peak, stop = [base], threading.Event()

    def sample():
      while not stop.is_set():
        peak[0] = max(peak[0], _rss_kib())
        time.sleep(0.002)

    th = threading.Thread(target=sample)
    th.start()
    try:
      out = fn()
    finally:
      stop.set()
      th.join()
    return out, (peak[0] - base) / 1024


def test_32k_class_pass_memory_bound():
  """V = 32,000 classes, d = 8, every class seen: the whole pass (forward chunks, the three
  passes, 5.1e8 class pairs) must stay far below one K x K float32 grid.

  Bound: K^2 * 4 B = 4096 MB for the grid; the streamed pass holds the model (V d), the
  per-class accumulators (V d + 3 V, a few MB), a forward chunk's logits
  (2 windows * 64 tokens * V * 4 B = 16 MB, a few copies through log-softmax), one
  512 x 512 pair tile with ~30 temporaries (~30 MB) and XLA's compile-time working
  memory (~100-300 MB on CPU). 1024 MB = a quarter of the grid leaves room for the
  compiler while any K x K intermediate (4096 MB) would fail it."""
  v, d, t = 32_000, 8, 64
  mc = ModelConfig(vocab_size=v, d_model=d, n_layers=1, n_heads=1, max_len=t, head="tied")
  params = jax.device_get(_stacked_random_params(mc, 1))
  rng = np.random.default_rng(0)
  labels = np.concatenate([rng.permutation(v), rng.integers(0, v, 8 * t * 2 + 1)])
  n_win = (labels.size - 1) // t
  tr = labels[np.arange(n_win)[:, None] * t + np.arange(t + 1)].astype(np.int32)
  va = tr[:8]
  res, delta = _peak_rss_delta_mib(lambda: cg.collapse_pass(mc, params, tr, va, chunk=2,
                                                            block_size=512))
  k = res[0]["n_classes"]
  assert k >= 31_000  # (nearly) every class analysed: the pair pass is K ~ 32k
  grid_mib = k * k * 4 / 2 ** 20
  print(f"32k pass: K={k}, peak RSS delta {delta:.0f} MiB; a K x K f32 grid: {grid_mib:.0f} MiB")
  assert delta < 1024, f"peak RSS grew by {delta:.0f} MiB"
  assert np.isfinite(res[0]["nc1_log10_cdnv"]) and 0.0 <= res[0]["nc4_agreement"] <= 1.0


# ------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def quick_out(tmp_path_factory):
  from experiments import collapse

  root = tmp_path_factory.mktemp("collapse")
  corpus = write_corpus(root / "corpus", generated_docs(7, 12))
  out = root / "out"
  collapse.run(out, "quick", data=str(corpus), verbose=False)
  return out


def _read(path):
  with open(path) as f:
    return list(csv.DictReader(f))


def test_quick_preset_end_to_end(quick_out):
  from experiments import collapse

  p = collapse.PRESETS["quick"]
  rows = _read(quick_out / "collapse_models.csv")
  grid = [r for r in rows if r["kind"] == "grid"]
  seeds = [r for r in rows if r["kind"] == "seeds"]
  n_grid = len(p.depths) * len(p.widths) * len(p.weight_decays) * len(p.epochs)
  assert len(grid) == n_grid and len(seeds) == p.seeds
  assert len({r["model"] for r in rows}) == len(rows)  # one row per model
  keys = set(collapse.METRICS) | set(collapse.COUNT_KEYS) | set(collapse.SETTINGS) | {
      "val_loss", "n_layers", "d_model", "weight_decay", "epochs", "data_seed"}
  for r in rows:
    assert keys <= set(r), keys - set(r)
    assert r["min_count"] == "1" and float(r["cdnv_exponent"]) == 2.0
  assert len({r["data_seed"] for r in seeds}) == p.seeds
  # 3 epochs of training lower the loss of every member
  for r in grid:
    if r["epochs"] == "1":
      r3 = next(q for q in grid if q["group"] == r["group"] and q["epochs"] == "3"
                and q["weight_decay"] == r["weight_decay"])
      assert float(r3["val_loss"]) < float(r["val_loss"])
  # R² table == numpy on the CSV
  y = np.array([float(r["val_loss"]) for r in grid])
  table = {r["metric"]: r for r in _read(quick_out / "collapse_r2.csv")}
  for k in collapse.METRICS:
    x = np.array([float(r[k]) for r in grid])
    ok = np.isfinite(x)
    b, a = np.polyfit(x[ok], y[ok], 1)
    r2 = 1 - np.sum((y[ok] - a - b * x[ok]) ** 2) / np.sum((y[ok] - y[ok].mean()) ** 2)
    assert float(table[k]["r2"]) == pytest.approx(r2, rel=1e-6, abs=1e-9), k
    assert float(table[k]["pearson_r"]) == pytest.approx(np.corrcoef(x[ok], y[ok])[0, 1],
                                                         rel=1e-6, abs=1e-9)
  sd = _read(quick_out / "collapse_seeds.csv")
  assert all(0 < float(r["p_perm"]) <= 1 for r in sd)
  tok = _read(quick_out / "collapse_tokens.csv")
  counts = [float(r["count"]) for r in tok[:-1]]
  assert counts == sorted(counts, reverse=True) and tok[-1]["rank"] == "average"
  assert (quick_out / "fig_collapse_vs_loss.png").stat().st_size > 10_000
  md = collapse.report_section(quick_out, "collapse")
  assert md.startswith("## ") and "](collapse/fig_collapse_vs_loss.png)" in md
  assert f"{float(table['nc1_log10_cdnv']['r2']):.3g}" in md


def test_quick_rerun_skips_finished_groups(quick_out):
  """A rerun re-reads finished groups from OUT/groups/ instead of training again."""
  from experiments import collapse

  p = collapse.PRESETS["quick"]
  before = {q.name: q.stat().st_mtime_ns for q in (quick_out / "groups").glob("*.json")}
  assert len(before) == len(collapse.groups(p)) + 1  # + _experiment.json
  rows = []
  for g in collapse.groups(p):  # data arrays are never touched for a finished group
    rows += collapse.run_group(p, g, None, None, 0, quick_out, verbose=False)
  after = {q.name: q.stat().st_mtime_ns for q in (quick_out / "groups").glob("*.json")}
  assert before == after
  with pytest.raises(ValueError, match="another collapse experiment"):
    collapse._check_same_experiment(quick_out, {"preset": "cpu"})
  assert [r["model"] for r in rows] == [r["model"] for r in _read(quick_out /
                                                                  "collapse_models.csv")]


def test_tpu_preset_configs_validate():
  from experiments import collapse

  p = collapse.PRESETS["tpu"]
  assert p.depths == (1, 2, 4, 8, 12) and p.widths[0] == 64 and p.widths[-1] == 1024
  cfgs = collapse.validate(p)
  assert len(cfgs) == len(p.depths) * len(p.widths) + 1
  for mc, tc in cfgs:
    assert mc.vocab_size == 50257 and mc.head == "tied" and tc.seq_len <= mc.max_len
  with pytest.raises(ValueError, match="unknown --preset"):
    collapse.get_preset("gpu")


def test_missing_corpus_is_one_clear_error(tmp_path):
  from experiments import collapse

  with pytest.raises(FileNotFoundError, match="--data=DIR"):
    collapse.run(tmp_path / "out", "quick", data=str(tmp_path / "no_such_dir"))
