"""experiments.collapse at its test presets: the pass, the tables, the rule, token files, 32k memory."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as sps

from experiments import collapse
from experiments.collapse import tables as T
from experiments.collapse.ceiling import ceiling_metrics
from experiments.collapse.presets import Rule
from experiments.collapse.stream import collapse_pass, stack
from experiments.common import read_rows
from sbjax import checkpoint as ckpt
from sbjax.config import ModelConfig
from sbjax.data.planted import PlantedLanguage
from sbjax.data.text import DataError
from sbjax.experiment import Context
from sbjax.experiment.runner import run
from sbjax.heads import head_matrix
from sbjax import metrics as C
from sbjax.model import Model
from tests._corpus import chain_tokens, generated_docs, write_corpus
from tests._xla import TEST_XLA_FLAGS

P = collapse.PRESETS["test"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
  root = tmp_path_factory.mktemp("collapse")
  corpus = write_corpus(root / "corpus", generated_docs(7, 6))
  run(collapse.EXPERIMENT, root / "out", "test", str(corpus), verbose=False)
  return root / "out"


@pytest.fixture(scope="module")
def out_e2(tmp_path_factory):
  root = tmp_path_factory.mktemp("collapse_e2")
  corpus = write_corpus(root / "corpus", generated_docs(7, 6))
  run(collapse.EXPERIMENT, root / "out", "test-e2", str(corpus), verbose=False)
  return root / "out"


def _params(mc, m, t=16):
  keys = jax.vmap(jax.random.key)(jnp.arange(m))
  return jax.device_get(jax.jit(jax.vmap(lambda k: Model(mc).init(k, 1, t)))(keys))


def test_pass_matches_direct_computation(out):
  """The stacked pass == collapse_metrics on the features of model.forward and a numpy
  cross-entropy; a model's numbers do not depend on what it is stacked with."""
  mc, t = ckpt.load_config(out / "runs" / "L1-d8" / "member_0").model, 16
  vocab, params = mc.vocab_size, _params(mc, 2, t)
  rng = np.random.default_rng(0)
  tr = rng.integers(0, vocab - 8, (37, t + 1)).astype(np.int32)  # a padded last chunk
  va = rng.integers(0, vocab, (9, t + 1)).astype(np.int32)
  res = collapse_pass(mc, params, tr, va, chunk=16, feature_cache_bytes=0)
  for i in range(2):
    p = jax.tree.map(lambda a, i=i: a[i], params)
    scores, ex = Model(mc).forward(p, jnp.asarray(np.concatenate([tr, va])[:, :-1]), ("h",))
    h = np.asarray(ex["h"]).reshape(-1, 8)
    w = np.asarray(head_matrix(p, mc))
    ref = C.collapse_metrics(h[:37 * t], tr[:, 1:].ravel(), w, h[37 * t:], va[:, 1:].ravel())
    for k, v in ref.to_dict().items():
      assert res[i][1][k] == pytest.approx(v, rel=2e-4, abs=1e-5, nan_ok=True), k
    z = np.asarray(scores, np.float64)[37:]
    nll = np.log(np.exp(z).sum(-1)) - np.take_along_axis(z, va[:, 1:, None], -1)[..., 0]
    assert res[i][1]["val_loss"] == pytest.approx(nll.mean(), rel=1e-5)
  alone = collapse_pass(mc, stack([jax.tree.map(lambda a: a[1], params)]), tr, va, chunk=16)
  for k, v in alone[0][1].items():
    if np.ndim(v) == 0 and not isinstance(v, str):
      assert v == res[1][1][k] or (np.isnan(v) and np.isnan(res[1][1][k])), k


def test_models_and_r2_tables(out):
  k = P.knobs
  rows = read_rows(out / "collapse_models.csv")
  grid = [r for r in rows if r["kind"] == "grid"]
  assert len(grid) == len(k.weight_decays) * len(k.epochs) * len(k.min_counts)
  assert len([r for r in rows if r["kind"] == "seeds"]) == k.seeds * 2 * len(k.min_counts)
  one = {r["model"]: r for r in grid if r["min_count"] == 1}
  for r in grid:
    if r["min_count"] == 20 and r["error"] == "":  # fewer classes, the same models
      assert r["n_classes"] < one[r["model"]]["n_classes"]
      assert r["val_loss"] == one[r["model"]]["val_loss"]
    if r["epochs"] == 1:  # two more epochs lower the loss
      assert one[r["model"].replace("-e1", "-e3")]["val_loss"] < r["val_loss"]
  for t in read_rows(out / "collapse_r2.csv"):
    sel = [r for r in grid if r["min_count"] == t["min_count"] and
           (t["points"] == "all" or r["last_snapshot"] == 1)]
    x, y = T.column(sel, t["metric"]), T.column(sel, "val_loss")
    if np.isfinite(x).all() and np.ptp(x) > 0:
      b, a = np.polyfit(x, y, 1)
      r2 = 1 - np.sum((y - a - b * x) ** 2) / np.sum((y - y.mean()) ** 2)
      assert t["r2"] == pytest.approx(r2, rel=1e-6) and t["n"] == len(sel)
  summary = json.loads((out / "summary.json").read_text())
  assert summary["anchors"] == {f"{r['metric']}@{int(r['min_count'])}": r["ci_verdict"]
                                for r in read_rows(out / "collapse_r2.csv")
                                if r["points"] == "last" and r["metric"] in T.ANCHORS}
  assert summary["decision"] is None  # the test preset has no rule
  md = collapse.report(out, "c")
  assert "](c/fig_collapse_vs_loss.png)" in md and "| seeds-L1-d16 | nc4_agreement |" in md
  assert (out / "fig_collapse_vs_loss.png").stat().st_size > 10_000


def _synthetic(n, loss, metric, n_params, kind="grid", group="L1-d8"):
  return [{"kind": kind, "group": group, "n_layers": 1, "d_model": 8, "min_count": 1,
           "last_snapshot": 1, "val_loss": v, "n_params": p, **{k: np.nan for k in T.METRICS},
           "nc1_log10_mean_cdnv": m, "nc2_norm_cov": m} for v, m, p in zip(loss, metric, n_params)]


def test_interval_verdicts_against_scipy():
  """r, its interval and the verdicts follow scipy's pearsonr interval, for a +, a - and no
  relation, in the R² table and in the seed table."""
  rng = np.random.default_rng(0)
  loss = 4.0 + 0.2 * rng.normal(size=16)
  for metric, want, want0 in ((2 * loss + 0.05 * rng.normal(size=16), "supported", "refuted"),
                              (-loss, "refuted", "refuted"),
                              (rng.normal(size=16), "undecided", None)):
    rows = _synthetic(16, loss, metric, np.exp(rng.uniform(7, 12, 16)))
    an = {r["metric"]: r for r in T.r2_rows(rows, (1,)) if r["points"] == "last"}
    ci = sps.pearsonr(metric, loss).confidence_interval(0.95)
    a = an["nc1_log10_mean_cdnv"]
    assert (a["ci_lo"], a["ci_hi"]) == pytest.approx((ci.low, ci.high), abs=1e-9)
    assert a["ci_verdict"] == want
    if want0:
      assert an["nc2_norm_cov"]["ci_verdict"] == want0
    seeds = {r["metric"]: r for r in T.seed_rows(_synthetic(16, loss, metric, [1e4] * 16,
                                                            "seeds", "s"), (1,), 200)}
    s = seeds["nc1_log10_mean_cdnv"]
    assert s["ci_verdict"] == ("r > 0" if ci.low > 0 else "r < 0" if ci.high < 0
                               else "sign undecided")
    assert s["val_loss_sd"] == pytest.approx(np.std(loss, ddof=1)) and 0 < s["p_perm"] <= 1


def test_rule_end_to_end(out_e2):
  """test-e2 (L 1 x d {8, 16} x λ {0, .05, .1} at V 64): summary.json holds the rule's 12 intervals
  and decide()'s verdict, the within-shape r its numpy value; the report prints both."""
  s = json.loads((out_e2 / "summary.json").read_text())
  iv = T.rule_intervals(read_rows(out_e2 / "collapse_r2.csv"), Rule())
  np.testing.assert_equal(s["rule"]["intervals"], iv)
  assert len(iv) == 12 and s["decision"] == T.decide(iv, Rule())
  grid = [r for r in read_rows(out_e2 / "collapse_models.csv") if r["kind"] == "grid"]
  shapes = [(1, 8), (1, 16)]
  assert {(r["n_layers"], r["d_model"], r["epochs"], r["weight_decay"], r["vocab_size"])
          for r in grid} == {(*ab, e, w, 64) for ab in shapes for e in (1, 3) for w in (0, .05, .1)}
  for t in read_rows(out_e2 / "collapse_r2.csv"):  # the within-shape r: after shape dummies
    sel = [r for r in grid if r["min_count"] == t["min_count"] and
           (t["points"] == "all" or r["last_snapshot"] == 1)]
    x, y = T.column(sel, t["metric"]), T.column(sel, "val_loss")
    d = np.asarray([[(r["n_layers"], r["d_model"]) == ab for ab in shapes] for r in sel], float)
    if np.isfinite(x).all():
      res = [v - d @ np.linalg.lstsq(d, v, rcond=None)[0] for v in (x, y)]
      if np.ptp(res[0]) > 1e-9:  # else constant within shapes: no r
        assert t["within_r"] == pytest.approx(np.corrcoef(*res)[0, 1], abs=1e-9, nan_ok=True)
  md = collapse.report(out_e2, ".")
  assert s["rule"]["text"] in md and f"**Verdict: {s['decision']['verdict']}**" in md


def test_ceiling(out):
  k = P.knobs
  ceil = read_rows(out / "collapse_ceiling.csv")
  want = ceiling_metrics(PlantedLanguage(vocab=k.ceiling[0], rank=k.ceiling[1], seed=0))
  assert [r["variant"] for r in ceil] == ["balanced", "planted"]
  assert ceil[0]["nc4_agreement"] == pytest.approx(want["nc4_agreement"], rel=1e-9)
  trained = read_rows(out / "collapse_ceiling_trained.csv")
  assert [r["step"] for r in trained] == [s for s in k.ceiling_steps for _ in k.weight_decays]
  for r in trained:  # a 24-step model is far from the Bayes-optimal one
    assert r["gap"] == pytest.approx(r["val_loss"] - r["val_true_nll"]) and r["gap"] > 0


def test_token_files(tmp_path):
  """The token-file presets: without VAL the last tenth is validation; an id out of range or
  a text folder is one line naming the fix; the grid twin runs end to end on token files."""
  ids = chain_tokens(tmp_path / "train.uint16.bin", 4096, 64, 1)
  chain_tokens(tmp_path / "val.uint16.bin", 1024, 64, 2)
  tr, va = collapse.token_file_corpus(str(tmp_path / "train.uint16.bin"), 64)
  np.testing.assert_array_equal(np.concatenate([tr, va]), ids)
  assert len(va) == len(ids) // 10  # the last tenth
  with pytest.raises(DataError, match=r"token id \d+ at index \d+ is outside \[0, "):
    collapse.token_file_corpus(str(tmp_path / "train.uint16.bin"), 8)
  with pytest.raises(ValueError, match=r"pass --data=TRAIN.bin\[,VAL.bin\]"):
    collapse.token_file_corpus(str(tmp_path), 64)
  out = tmp_path / "out"
  run(collapse.EXPERIMENT, out, "gpu-grid-test", f"{tmp_path / 'train.uint16.bin'},"
      f"{tmp_path / 'val.uint16.bin'}", verbose=False)
  rows = read_rows(out / "collapse_models.csv")
  assert {r["kind"] for r in rows} == {"grid"} and not (out / "collapse_seeds.csv").exists()
  assert {r["train_tokens"] for r in rows} == {1024}  # the first epoch_tokens of TRAIN


def test_token_presets_plan_valid_runs(tmp_path):
  """The token-file presets' groups build (configs validated, no training): tpu's grid of 30
  shapes and its seed group of 16 on the GPT-Neo vocabulary."""
  t = tmp_path / "t.uint16.bin"
  (np.arange(40_000) % 64).astype(np.uint16).tofile(t)
  plans = {}
  for name, p in collapse.PRESETS.items():
    if p.overrides["data.source"] != "tokens":
      continue
    groups = plans[name] = list(collapse.plan(Context(tmp_path / name, name, p, f"{t},{t}")))
    k = p.knobs
    n_seed = (1 + len(k.extra_seed_archs)) * bool(k.seeds)
    assert len(groups) == len(k.depths) * len(k.widths) + n_seed, name
    vocab = {c.model.vocab_size for g in groups for c in g.configs}
    assert vocab == {p.overrides["data.options.vocab_size"]}
    assert all(c.model.head.kind == "tied" and c.train.seq_len <= c.model.max_len
               for g in groups for c in g.configs)
  assert len(plans["tpu"]) == 31 and len(plans["tpu"][0].configs) == 16


def _pass_memory() -> dict:
  """V = 32,000 classes, d = 8, every class seen: peak RSS growth of the whole pass."""
  v, t = 32_000, 64
  mc = ModelConfig(vocab_size=v, d_model=8, n_layers=1, n_heads=1, max_len=t, head="tied")
  params = stack([jax.tree.map(lambda a: a[0], _params(mc, 1, t))])
  rng = np.random.default_rng(0)
  labels = np.concatenate([rng.permutation(v), rng.integers(0, v, 8 * t * 2 + 1)])
  n = (labels.size - 1) // t
  tr = labels[np.arange(n)[:, None] * t + np.arange(t + 1)].astype(np.int32)
  def kib(field):
    with open("/proc/self/status") as f:
      return int(next(x for x in f if x.startswith(field)).split()[1])

  with open("/proc/self/clear_refs", "w") as f:  # VmHWM from here
    f.write("5")
  base = kib("VmRSS")
  res = collapse_pass(mc, params, tr, tr[:8], chunk=2)
  return {"k": int(res[0][1]["n_classes"]), "delta_mib": (kib("VmHWM") - base) / 1024}


def test_32k_class_pass_stays_far_below_a_k_by_k_grid():
  """In a fresh interpreter at XLA's default flags, the streamed pass at K = 32,000 grows the RSS
  by < 1 GiB, a quarter of one K x K float32 grid."""
  env = {**os.environ, "PYTHONPATH": str(ROOT), "XLA_FLAGS": " ".join(
      f for f in os.environ.get("XLA_FLAGS", "").split() if f not in TEST_XLA_FLAGS.split())}
  got = subprocess.run([sys.executable, __file__], env=env, cwd=ROOT, check=True,
                       capture_output=True, text=True, timeout=900).stdout
  m = json.loads(got.strip().splitlines()[-1])
  assert m["k"] >= 31_000 and m["delta_mib"] < 1024, m


if __name__ == "__main__":
  print(json.dumps(_pass_memory()))
