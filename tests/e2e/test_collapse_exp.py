"""experiments/collapse (Wu & Papyan 2024) end to end at the `test` preset on generated text:
the vmapped pass against a direct computation, the CSVs and tables, the report, a rerun, the
CLI, the like-for-like anchor table, min_count 1 and 20, one point per run, and the
collapse ceiling of a planted language. (Statistics and presets: tests/unit/test_collapse_stats.py; the 32k-class memory bound:
tests/integration/test_collapse_pass_memory.py.)"""

import csv
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import collapse
from experiments.shared import REPO
from sbjax.data.planted import PlantedLanguage
from sbjax import metrics as C
from sbjax.model import Model
from sbjax.studies import collapse_ceiling as CC
from sbjax.studies import collapse_grid as cg
from tests._corpus import generated_docs, write_corpus

P = collapse.PRESETS["test"]


@pytest.fixture(scope="module")
def test_out(tmp_path_factory):
  root = tmp_path_factory.mktemp("collapse")
  corpus = write_corpus(root / "corpus", generated_docs(7, 6))
  out = root / "out"
  collapse.run(out, "test", data=str(corpus), verbose=False)
  return out


def _stacked_random_params(mc, m, t=16):
  model = Model(mc)
  keys = jax.vmap(jax.random.key)(jnp.arange(m))
  return jax.jit(jax.vmap(lambda k: model.init(k, 1, t)))(keys)


def test_collapse_pass_matches_direct_computation(test_out):
  """The vmapped three-pass pipeline == collapse_metrics on features from model.apply,
  and the validation loss == a numpy log-softmax cross-entropy. (The test preset's
  L1-d8 config, chunk and member count: its compiled functions are reused.)"""
  vocab = json.loads((test_out / "collapse_meta.json").read_text())["vocab_size"]
  n_layers, d = P.knobs.seed_arch
  mc = collapse.model_config(P, n_layers, d, vocab)
  t = P.overrides["train.seq_len"]
  params = _stacked_random_params(mc, len(P.knobs.weight_decays), t)
  rng = np.random.default_rng(0)
  tr = rng.integers(0, vocab - 8, (37, t + 1)).astype(np.int32)  # a padded last chunk
  va = rng.integers(0, vocab, (9, t + 1)).astype(np.int32)
  res = cg.collapse_pass(mc, jax.device_get(params), tr, va, chunk=P.knobs.chunk,
                         feature_cache_bytes=0)  # pass 2 recomputes the forward
  model = Model(mc)
  apply = jax.jit(lambda p, x: model.forward(p, x, ("h",)))
  d = mc.d_model
  for i in range(2):
    p_i = jax.tree.map(lambda a: a[i], params)
    s_all, ex = apply(p_i, jnp.asarray(np.concatenate([tr, va])[:, :-1]))  # one compile
    h_all = np.asarray(ex["h"]).reshape(-1, d)
    sv = np.asarray(s_all)[37:]
    w = np.asarray(p_i["embed"])  # tied head: W = the token embedding
    ref = C.collapse_metrics(h_all[:37 * t], tr[:, 1:].ravel(), w, h_all[37 * t:],
                             va[:, 1:].ravel())
    for k, v in ref.to_dict().items():  # (UNC3 guarded is NaN where the mean cos is unresolved)
      assert res[i][k] == pytest.approx(v, rel=2e-4, abs=1e-5, nan_ok=True), k
    z = np.asarray(sv, np.float64)
    lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
    nll = lse - np.take_along_axis(z, va[:, 1:, None], -1)[..., 0]
    assert res[i]["val_loss"] == pytest.approx(nll.mean(), rel=1e-5)
    assert res[i]["train_tokens"] == 37 * t and res[i]["val_tokens"] == 9 * t
  assert res[0]["nc1_cdnv"] != pytest.approx(res[1]["nc1_cdnv"], rel=1e-3)  # members differ


def _read(path):
  with open(path) as f:
    return list(csv.DictReader(f))


def test_preset_end_to_end(test_out):
  p = P.knobs
  rows = _read(test_out / "collapse_models.csv")
  n_mc = len(p.min_counts)
  grid = [r for r in rows if r["kind"] == "grid"]
  seeds = [r for r in rows if r["kind"] == "seeds"]
  n_grid = len(p.depths) * len(p.widths) * len(p.weight_decays) * len(p.epochs)
  shapes = collapse.presets.seed_shapes(p)  # two shapes of p.seeds seeds each
  assert len(shapes) == 2
  assert len(grid) == n_grid * n_mc and len(seeds) == p.seeds * n_mc * len(shapes)
  assert {(int(r["n_layers"]), int(r["d_model"])) for r in seeds} == set(shapes)
  assert len({(r["model"], r["min_count"]) for r in rows}) == len(rows)  # one row per model
  keys = set(collapse.METRICS) | set(collapse.COUNT_KEYS) | set(collapse.SETTINGS) | {
      "val_loss", "n_layers", "d_model", "weight_decay", "epochs", "data_seed", "min_count",
      "run", "last_snapshot", "unc3_reason"}
  for r in rows:
    assert keys <= set(r), keys - set(r)
    assert int(r["min_count"]) in p.min_counts and float(r["cdnv_exponent"]) == 2.0
    assert int(r["last_snapshot"]) == (int(r["epochs"]) == max(p.epochs))
  assert len({r["data_seed"] for r in seeds}) == p.seeds
  # min_count 20 analyses fewer classes than min_count 1, on the same models
  g1 = {r["model"]: r for r in grid if r["min_count"] == "1"}
  for r in grid:
    if r["min_count"] == "20" and not r["error"]:
      assert int(r["n_classes"]) < int(g1[r["model"]]["n_classes"])
      assert float(r["val_loss"]) == float(g1[r["model"]]["val_loss"])
  # 3 epochs of training lower the loss of every member
  for r in g1.values():
    if r["epochs"] == "1":
      r3 = next(q for q in g1.values() if q["run"] == r["run"] and q["epochs"] == "3")
      assert float(r3["val_loss"]) < float(r["val_loss"])
  # R² table == numpy on the CSV, for every (min_count, points) selection
  table = {(r["min_count"], r["points"], r["metric"]): r for r in _read(test_out / "collapse_r2.csv")}
  assert {(k[0], k[1]) for k in table} == {(str(m), pt) for m in p.min_counts for pt in ("last", "all")}
  for (mcount, pts, k), t in table.items():
    sel = [r for r in grid if r["min_count"] == mcount and (pts == "all" or r["last_snapshot"] == "1")]
    assert int(t["n"]) <= len(sel) == len(grid) // n_mc // (1 if pts == "all" else len(p.epochs))
    x = np.array([float(r[k]) for r in sel])
    y = np.array([float(r["val_loss"]) for r in sel])
    ok = np.isfinite(x)
    if ok.sum() < 3 or np.ptp(x[ok]) == 0:
      continue
    b, a = np.polyfit(x[ok], y[ok], 1)
    r2 = 1 - np.sum((y[ok] - a - b * x[ok]) ** 2) / np.sum((y[ok] - y[ok].mean()) ** 2)
    assert float(t["r2"]) == pytest.approx(r2, rel=1e-6, abs=1e-9), k
    assert float(t["pearson_r"]) == pytest.approx(np.corrcoef(x[ok], y[ok])[0, 1],
                                                  rel=1e-6, abs=1e-9)
  # the anchor table: ours (one point per run) against the authors', labelled as computed
  an = _read(test_out / "collapse_anchors.csv")
  assert {r["metric"] for r in an} == set(collapse.ANCHORS) and len(an) == len(collapse.ANCHORS) * n_mc
  for r in an:
    t = table[(r["min_count"], "last", r["metric"])]
    assert r["r2"] == t["r2"] and int(r["n_runs"]) == int(t["n"])
    assert r["r2_all_snapshots"] == table[(r["min_count"], "all", r["metric"])]["r2"]
    a = collapse.ANCHORS[r["metric"]][0]
    assert (r["authors_source"] == "computed from the authors' results") == (a is not None)
  sd = _read(test_out / "collapse_seeds.csv")
  assert all(0 < float(r["p_perm"]) <= 1 for r in sd if r["p_perm"] not in ("", "nan"))
  # the per-shape seed test: r of each seed group alone (numpy on the CSV), one group per shape
  assert {r["group"] for r in sd} == {f"seeds-L{a}-d{b}" for a, b in shapes}
  for t in sd:
    sel = [r for r in seeds if r["group"] == t["group"] and r["min_count"] == t["min_count"]]
    x, y = (np.array([float(r[c]) for r in sel]) for c in (t["metric"], "val_loss"))
    if t["pearson_r"] not in ("", "nan") and np.isfinite(x).all():
      assert float(t["pearson_r"]) == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-9)
    assert t["ci_verdict"].startswith("undefined")  # 3 seeds: n - 3 = 0, no interval
  tok = _read(test_out / "collapse_tokens.csv")
  counts = [float(r["count"]) for r in tok[:-1]]
  assert counts == sorted(counts, reverse=True) and tok[-1]["rank"] == "average"
  md = collapse.report_section(test_out, "collapse")  # draws the figure
  assert (test_out / "fig_collapse_vs_loss.png").stat().st_size > 10_000
  meta = json.loads((test_out / "collapse_meta.json").read_text())
  assert meta["preset"] == "test" and meta["n_permutations"] == p.n_perm
  assert meta["min_counts"] == list(p.min_counts) and "gamma" in meta["weight_decay"]
  assert f"{p.n_perm} permutations" in md and "computed from the authors' results" in md
  assert md.startswith("## ") and "](collapse/fig_collapse_vs_loss.png)" in md
  assert "min_count 20, 1 point/run" in md and "all snapshots" in md
  assert f"{float(table[('1', 'last', 'nc1_log10_mean_cdnv')]['r2']):.3g}" in md
  # the findings in words, from the same tables (their logic: tests/unit/test_collapse_findings.py)
  assert "bias-corrected norm CoV" in md and "Counting every snapshot as a model" in md
  assert f"Among {p.seeds} data-order seeds of each of 2 shape(s)" in md
  assert "| seeds-L1-d16 | nc4_agreement |" in md
  # the collapse ceiling of the planted language, and models trained towards it
  ceil = _read(test_out / "collapse_ceiling.csv")
  assert [r["variant"] for r in ceil] == ["balanced", "planted"]
  lang = PlantedLanguage(vocab=p.ceiling[0], rank=p.ceiling[1], seed=0)
  want = CC.ceiling_metrics(lang, "balanced")
  assert float(ceil[0]["nc1_log10_mean_cdnv"]) == pytest.approx(want["nc1_log10_mean_cdnv"], rel=1e-6)
  assert float(ceil[0]["nc4_agreement"]) == pytest.approx(want["nc4_agreement"], rel=1e-9)
  assert float(ceil[0]["entropy"]) == pytest.approx(lang.entropy)
  tr = _read(test_out / "collapse_ceiling_trained.csv")
  assert len(tr) == len(p.ceiling_steps) * len(p.weight_decays)
  assert {int(r["step"]) for r in tr} == set(p.ceiling_steps)
  for r in tr:
    assert float(r["gap"]) == pytest.approx(float(r["val_loss"]) - float(r["val_true_nll"]))
    assert float(r["gap"]) > 0  # a 24-step model is far from the Bayes-optimal one
  assert "### The collapse ceiling of a planted language" in md
  assert "As the gap to H falls" in md
  assert (test_out / "fig_collapse_ceiling.png").stat().st_size > 10_000


def test_rerun_skips_finished_groups(test_out):
  """A rerun re-reads finished groups from OUT/groups/ instead of training again."""
  p = P
  before = {q.name: q.stat().st_mtime_ns for q in (test_out / "groups").glob("*.json")}
  assert len(before) == len(collapse.groups(p)) + 1  # + _experiment.json
  rows = []
  for g in collapse.groups(p):  # data arrays are never touched for a finished group
    rows += collapse.run_group(p, g, None, None, 0, test_out, verbose=False)
  after = {q.name: q.stat().st_mtime_ns for q in (test_out / "groups").glob("*.json")}
  assert before == after
  with pytest.raises(ValueError, match="another collapse experiment"):
    collapse.check_same_experiment(test_out, {"preset": "cpu"})
  assert [r["model"] for r in rows] == [r["model"] for r in _read(test_out /
                                                                  "collapse_models.csv")]


def test_missing_corpus_is_one_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="--data=DIR"):
    collapse.run(tmp_path / "out", "test", data=str(tmp_path / "no_such_dir"))


def test_cli_rerun_writes_the_section(test_out):
  """python -m experiments.collapse on the finished output: every group is read back, the
  section is printed and written."""
  corpus = test_out.parent / "corpus"
  r = subprocess.run([sys.executable, "-m", "experiments.collapse", "--preset=test",
                      f"--out={test_out}", f"--data={corpus}"], cwd=REPO, capture_output=True,
                     text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stdout.startswith("## Linguistic collapse")
  assert (test_out / "section.md").read_text().startswith("## Linguistic collapse")
