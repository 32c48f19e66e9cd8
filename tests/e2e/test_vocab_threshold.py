"""vocab_threshold at its test presets: r*(V), the bigram r*(V, N), the E5 rule, the token-file twin."""

import itertools
import json
import math
import shutil
from collections import Counter

import numpy as np
import pytest

from experiments import vocab_threshold as vt
from experiments.common import read_rows
from experiments.vocab_threshold.rule import decide
from sbjax.config import Config
from sbjax.data.tokenizer import Tokenizer
from sbjax.experiment.context import Context
from sbjax.experiment.runner import run
from sbjax.studies import head_rank as hr
from sbjax.train import read_metrics
from tests._corpus import generated_docs, write_corpus
from tests._metrics_reference import ref_w_error

TEXT = ("protocol", "head", "run", "reference", "ranks", "trunk", "dtype")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  return write_corpus(tmp_path_factory.mktemp("vt_corpus"), generated_docs(3, 10))


@pytest.fixture(scope="module")
def out(tmp_path_factory, corpus):
  out = tmp_path_factory.mktemp("vt") / "out"
  run(vt.EXPERIMENT, out, "test", str(corpus), verbose=False)
  return out


def test_rstar_margins_r06_and_beta(out):
  runs, table = read_rows(out / vt.RUNS, TEXT), read_rows(out / vt.TABLE, TEXT)
  s = json.loads((out / vt.SUMMARY).read_text())
  assert [int(t["V"]) for t in table] == list(vt.PRESETS["test"].knobs.vocabs)
  for t, m in zip(table, s["margins"]):
    v = int(t["V"])
    sub = [r for r in runs if r["V"] == v]
    assert read_rows(out / f"V{v}" / "head_rank.csv", TEXT) == [
        {k: x for k, x in r.items() if k not in ("V", "seed")} for r in sub]
    lf, d = min(r["eval_loss"] for r in sub if r["protocol"] == "full"), int(sub[0]["rank"])
    best = {d: lf}  # the test plan has protocol b only: the reference is the dense head
    for r in (r for r in sub if r["protocol"] == "b"):
      best[int(r["rank"])] = min(best.get(int(r["rank"]), np.inf), r["eval_loss"])
    assert t["reference"] == "dense" and t["chars_per_token"] > 1
    tol = t["tol_token"]
    assert tol == pytest.approx(vt.TOL_CHAR * t["chars_per_token"], rel=1e-12)
    rstar = min(k for k, x in best.items() if x <= lf + tol)
    below = max((k for k in best if k < rstar), default=None)
    assert (int(t["r_star"]), int(t["censored"]), m["r_below"]) == (rstar, int(rstar == d), below)
    assert m["margin_at_r_star"] == pytest.approx(lf + tol - best[rstar], abs=1e-12)
    assert m["margin_below"] == pytest.approx(best[below] - lf - tol, abs=1e-12)
    w = np.load(out / f"V{v}" / "full_head.npy").astype(np.float64)
    assert len(w) == v  # the tokenizer has exactly V pieces
    s_c = np.linalg.svd(w - w.mean(0), compute_uv=False)  # the centred head
    assert int(t["r_werror06"]) == min(k for k in range(len(s_c) + 1) if ref_w_error(s_c, k) <= 0.6)
  vs, ys = [int(t["V"]) for t in table], [int(t["r_star"]) for t in table]
  assert s["r_star"]["beta"] == pytest.approx(np.log(ys[1] / ys[0]) / np.log(vs[1] / vs[0]),
                                              abs=1e-9)
  assert math.isnan(s["r_star"]["beta_se"]) and s["r_star"]["n"] == 2
  assert f"beta = {s['r_star']['beta']:.3f}" in vt.report(out, "vt")


def _val_full(blocks, val, vocab, k):
  """−mean log P_k(v|c) over validation pairs whose context was seen in training."""
  pairs, nc = Counter(), Counter()
  for b in blocks:
    pairs.update(zip(b[:-1].tolist(), b[1:].tolist()))
    nc.update(b[:-1].tolist())
  val = val.tolist()
  lp = [math.log((pairs[(c, v)] + k) / (nc[c] + k * vocab)) for c, v in itertools.pairwise(val)
        if nc[c] > 0]
  return -sum(lp) / len(lp)


def test_bigram_n_cells_follow_the_counts_the_rule_and_the_start_check(tmp_path, corpus):
  out, preset = tmp_path / "bn", vt.PRESETS["test-bigram-n"]
  run(vt.EXPERIMENT, out, "test-bigram-n", str(corpus), verbose=False)
  cells, fits, checks = (read_rows(out / n, ("start", "evaluated", "start_check", "check_starts"))
                         for n in (vt.CELLS, vt.FITS, vt.CHECKS))
  k = preset.knobs.bigram_n
  ctx = Context(out, "test-bigram-n", preset, str(corpus))
  for c in cells:
    v, f = int(c["V"]), c["fraction"]
    ds = vt.dataset(ctx, vt.config(ctx, v), v)
    tr = np.asarray(ds.train_tokens)
    blocks = [tr[s:s + k.block] for i, s in enumerate(range(0, len(tr), k.block))
              if i % k.period < round(f * k.period)]
    assert c["train_tokens"] == sum(len(b) for b in blocks)
    assert c["val_full"] == pytest.approx(_val_full(blocks, np.asarray(ds.val_tokens), v,
                                                    k.add_k), rel=1e-9)
    first = {int(r["rank"]): r for r in fits if (r["V"], r["fraction"]) == (v, f)}
    tol, rs, lo = c["tol_token"], int(c["r_star"]), int(c["lo"])
    assert all(r["ok"] == int(r["val_excess"] <= tol) for r in first.values())
    assert (not any(r["ok"] for r in first.values()) if c["censored"] else
            first[rs]["ok"] == 1 and (lo == 0 or first[lo]["ok"] == 0))
    dec = [r for r in (lo, None if c["censored"] else rs) if r in first]
    want = min(dec, key=lambda r: (abs(first[r]["val_excess"] - tol), r))
    (second,) = [r for r in checks if (r["V"], r["fraction"]) == (v, f)]
    assert int(second["rank"]) == want
    assert second["start"] == ("random" if first[want]["start"] == "svd" else "svd")
    flips = second["converged"] and second["ok"] != first[want]["ok"]
    assert c["start_check"] == ("flips" if flips else "agrees" if second["converged"]
                                else "unconverged")
    assert c["start_moved"] == pytest.approx(abs(second["val_excess"] - first[want]["val_excess"]))
    margins = ([(c["margin_at_r_star"], c["se_at_r_star"])] * (not c["censored"])
               + [(c["margin_at_lo"], c["se_at_lo"])] * (lo > 0))
    assert c["reliable"] == int(c["check_ok"] and all(m > max(2 * se, c["moved"])
                                                      for m, se in margins))
  assert cells[0]["moved"] == max(c["start_moved"] for c in cells)


def test_e5_cells_rest_on_the_window_losses_and_the_second_trunk_seed(tmp_path, corpus):
  out, k = tmp_path / "e5", vt.PRESETS["test-e5"].knobs
  run(vt.EXPERIMENT, out, "test-e5", str(corpus), verbose=False)
  runs, cells = read_rows(out / vt.RUNS, TEXT), read_rows(out / vt.RULE_CELLS, ("why",))
  per = k.rule.block_tokens // vt.PRESETS["test-e5"].overrides["train.seq_len"]  # windows/block
  excess = {}
  for c in cells:
    v, seed, tol = int(c["V"]), int(c["seed"]), c["tol_token"]
    best = {}  # rank -> its best-lr protocol-(a) run
    for r in (r for r in runs if (r["V"], r["seed"], r["protocol"]) == (v, seed, "a")):
      best[int(r["rank"])] = min(best.get(int(r["rank"]), r), r, key=lambda x: x["eval_loss"])

    def windows(r, pre=vt.prefix(v, seed)):
      memo = out / "memo" / f"windows-{(pre + r['run']).replace('/', '-')}.json"
      w = np.asarray(json.loads(memo.read_text())["value"])
      assert w.mean() == pytest.approx(r["eval_loss"], rel=1e-5)  # the eval's own windows
      return w

    def se(rank, ref=best[max(k.plan.ranks)]):
      d = windows(best[rank]) - windows(ref)
      means = d[:len(d) // per * per].reshape(-1, per).mean(1)
      return means.std() / math.sqrt(len(means))

    excess[v, seed] = {r: x["eval_loss"] - best[max(best)]["eval_loss"] for r, x in best.items()}
    rs = min(r for r, x in excess[v, seed].items() if x <= tol)
    assert (c["r_star"], c["margin_at_r_star"]) == (rs, pytest.approx(tol - excess[v, seed][rs]))
    assert c["se_at_r_star"] == pytest.approx(se(rs), abs=1e-12)
    if c["r_below"]:
      assert c["se_below"] == pytest.approx(se(int(c["r_below"])), abs=1e-12)
  (v,) = k.reseed
  ranks = {int(c[x]) for c in cells if c["V"] == v for x in ("r_star", "r_below")} - {0}
  moved = max(abs(excess[v, 1][r] - excess[v, 0][r]) for r in ranks)
  d = json.loads((out / vt.SUMMARY).read_text())["decision"]
  assert d["moved"] == pytest.approx(moved) and all(c["moved"] == d["moved"] for c in cells)
  for c in cells:
    margins = ([(c["margin_at_r_star"], c["se_at_r_star"])] * (not c["censored"])
               + [(c["margin_below"], c["se_below"])] * (c["r_below"] > 0))
    assert c["reliable"] == int(all(m > max(2 * se, moved) for m, se in margins))
  assert d["verdict"] == decide(cells, k.rule)["verdict"]
  assert f"**{d['verdict']}**" in vt.report(out, "e5")


@pytest.fixture(scope="module")
def tokens(tmp_path_factory, corpus):
  """Token files of the twin's V (DIR/V<V>/{train,val}.uint16.bin, tokenizer.model)."""
  root = tmp_path_factory.mktemp("vt_tokens")
  ctx = Context(root / "build", "test", vt.PRESETS["test"], str(corpus))
  for v in vt.PRESETS["gpu-test"].knobs.vocabs:
    ds, d = vt.dataset(ctx, vt.config(ctx, v), v), root / f"V{v}"
    d.mkdir()
    np.asarray(ds.train_tokens, np.uint16).tofile(d / "train.uint16.bin")
    np.asarray(ds.val_tokens, np.uint16).tofile(d / "val.uint16.bin")
    shutil.copy(ds.tokenizer_path, d / "tokenizer.model")
  return root


def test_token_file_twin_trains_padded_heads_on_the_best_trunk(tmp_path, tokens):
  k, out = vt.PRESETS["gpu-test"].knobs, tmp_path / "twin"
  run(vt.EXPERIMENT, out, "gpu-test", str(tokens), verbose=False)
  table, runs = read_rows(out / vt.TABLE, TEXT), read_rows(out / vt.RUNS, TEXT)
  for t in table:
    v = int(t["V"])
    assert t["reference"] == "a-r=d" and int(t["d_model"]) == max(k.plan.ranks)
    tr = np.fromfile(tokens / f"V{v}" / "train.uint16.bin", np.uint16)
    va = np.fromfile(tokens / f"V{v}" / "val.uint16.bin", np.uint16)
    assert t["train_tokens"] == tr.size
    assert t["types_under_50"] == int((np.bincount(tr, minlength=v) < 50).sum())
    text = Tokenizer(tokens / f"V{v}" / "tokenizer.model").decode([int(x) for x in va])
    assert t["chars_per_token"] == pytest.approx(len(text) / va.size, rel=1e-12)
    heads = [r for r in runs if r["V"] == v and r["protocol"] == "a"]
    assert [r["run"] for r in heads] == [f"a-lowrank-pad4/member_{j}" for j in range(4)]
    assert [(int(r["rank"]), r["lr"]) for r in heads] == [
        (r, lr) for r in k.plan.ranks for lr in k.plan.head_lrs]
    full = min((r for r in runs if r["V"] == v and r["protocol"] == "full"),
               key=lambda r: r["eval_loss"])
    evals = {r["step"]: r["eval_loss"] for r in read_metrics(out / "runs" / f"V{v}" / full["run"])
             if "eval_loss" in r}
    best = min((s for s in evals if s > 0), key=lambda s: (evals[s], s))  # every eval saved
    assert (t["trunk"], t["trunk_step"], t["trunk_eval_loss"]) == ("best", best, evals[best])


def test_every_preset_builds(tmp_path, monkeypatch):
  monkeypatch.setattr(hr, "trunk", lambda *a: hr.Trunk("trunk", -1, math.nan))
  for name, p in vt.PRESETS.items():
    ctx, k = Context(tmp_path, name, p, str(tmp_path)), p.knobs
    for v, seed in vt.sweeps(k):
      cfg = vt.config(ctx, v, seed)
      assert cfg.name == f"vocab_threshold-{name}-V{v}" + (f"-seed{seed}" if seed else "")
      assert (cfg.train.seed, cfg.train.data_seed) == (seed, seed)
      groups = list(hr.sweep(ctx, cfg, k.plan, vt.prefix(v, seed), {"V": v}))
      pads = [g for g in groups if "-pad" in g.name]
      assert len(pads) == int(k.plan.head_population)
      for c in (c for g in groups for c in g.configs):
        assert Config.from_dict(c.to_dict()) == c
        assert c.data.options.to_dict().get("vocab", c.data.options.to_dict().get(
            "vocab_size")) == v
