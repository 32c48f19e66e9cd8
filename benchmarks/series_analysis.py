"""Analysing a checkpoint series: the authors' way vs sbjax, end to end (NOT a test).

A series of K revisions of a GPT-NeoX model (random weights; default pythia-70m-shaped,
K=16) is saved with transformers in the HF cache layout (``models--org--name/{refs,
snapshots, blobs}``), and a fixed batch of N x T real tokens (the development corpus
tokenised with a byte-level BPE tokenizer.json trained on it) in an .npy [N, T+1]. Both
sides compute, per revision: eval loss (mean next-token NLL over the N*T targets), the head
spectrum (effective rank and KL(sigma/sum sigma || uniform) of embed_out), last-layer
anisotropy (mean pairwise cosine of the final-norm features at all N*T positions) and
linear CKA (biased HSIC) to the final revision of every block's MLP output and OV-circuit
output (sum_h v_h W_O,h, no attention weighting) at the last position of each sequence:

- ``authors``: the convergence paper's script style: for each revision,
  ``GPTNeoXForCausalLM.from_pretrained(snapshot)`` (moved to ``--device``: ``cuda`` or
  ``auto`` puts the forwards on the GPU that sbjax's side uses), forward hooks on each block's
  MLP and query_key_value, torch forwards in chunks, the loss as torch's float32 cross_entropy (what
  ``labels=`` gives; session 8 used a float64 log-softmax, a handicap sbjax does not carry),
  numpy/float64 metrics (SVD, anisotropy, CKA);
- ``sbjax``: ``experiments.convert.import_to_workdir`` (hashes every revision, writes orbax
  checkpoints) then ``analyze_run(--tokens)`` (vmapped groups of checkpoints).

Each side runs in its own subprocess (wall time and peak RSS of that process, imports
included); values must agree to ``--tol`` (max abs difference per metric is printed; relative for
head_erank, see ``RELATIVE``). ``--profile`` adds seconds per phase of each side.

    PYTHONPATH=. python benchmarks/series_analysis.py                    # K=16 pythia-70m, 128x256
    PYTHONPATH=. python benchmarks/series_analysis.py --small            # minutes on 2 cores
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import _bench  # noqa: F401 - puts the repository on sys.path
from _bench import emit, machine

SHAPES = {"pythia-70m": dict(hidden_size=512, num_hidden_layers=6, num_attention_heads=8,
                             intermediate_size=2048, vocab_size=50304),
          "small": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=256, vocab_size=2048),
          # device_check.sh --dry-run: seconds, not minutes
          "tiny": dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=64, vocab_size=384)}


def build(root: Path, a) -> None:
  """The series (HF cache layout) and the token batch, once."""
  import numpy as np
  import torch
  import transformers

  from sbjax.data import hf_tokenizer

  shape = SHAPES[a.shape]
  repo = root / "hub" / "models--bench--series"
  if not (root / "tokens.npy").exists():
    texts = [p.read_text(errors="replace") for p in sorted(Path(a.text).rglob("*.txt"))]
    tok = hf_tokenizer.train_bpe(texts, root / "tokenizer.json", shape["vocab_size"] - 64)
    ids = []
    for t in texts:
      ids += tok.encode(t) + [tok.separator_id]
      if len(ids) >= a.n * (a.t + 1):
        break
    np.save(root / "tokens.npy", np.asarray(ids[:a.n * (a.t + 1)], np.uint16).reshape(a.n, a.t + 1))
  if (root / "series.done").exists():
    return
  shutil.rmtree(repo, ignore_errors=True)  # a build cut short is redone, never half-used
  for k in range(a.k):
    torch.manual_seed(k)
    cfg = transformers.GPTNeoXConfig(max_position_embeddings=2048, rotary_pct=0.25,
                                     initializer_range=0.02, **shape)
    d = root / "saved" / f"r{k}"
    transformers.GPTNeoXForCausalLM(cfg).save_pretrained(str(d))
    commit = hashlib.sha1(f"rev{k}".encode()).hexdigest()
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    for f in d.iterdir():
      blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
      blob.parent.mkdir(parents=True, exist_ok=True)
      shutil.move(str(f), blob)
      os.symlink(os.path.relpath(blob, snap), snap / f.name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / f"step{1000 * k}").write_text(commit)
  shutil.rmtree(root / "saved")
  (root / "series.done").write_text(json.dumps({"k": a.k, "shape": a.shape, "n": a.n, "t": a.t}))


class Phases:
  """[wall s, CPU s of the process (all threads), calls] per named phase (``--profile`` for
  sbjax; always for the authors' side): ``wrap(obj, attr, name)`` times every call of
  ``obj.attr`` (blocking on jax results, so asynchronous dispatch is charged to its phase);
  a jitted function's first call (compile + run) is kept apart as ``NAME:first``."""

  def __init__(self):
    self.s: dict = {}
    self.n: dict = {}
    self.cpu: dict = {}

  def add(self, name: str, dt: float, cpu: float = 0.0) -> None:
    self.s[name] = self.s.get(name, 0.0) + dt
    self.n[name] = self.n.get(name, 0) + 1
    self.cpu[name] = self.cpu.get(name, 0.0) + cpu

  def wrap(self, obj, attr: str, name: str, first: bool = False):
    f = getattr(obj, attr)
    seen = []

    def timed(*args, **kw):
      import jax
      t0, c0 = time.perf_counter(), time.process_time()
      out = jax.block_until_ready(f(*args, **kw))
      self.add(f"{name}:first" if first and not seen else name, time.perf_counter() - t0,
               time.process_time() - c0)
      seen.append(1)
      return out
    setattr(obj, attr, timed)
    return timed

  def report(self, side: str) -> None:
    print(f"phases_{side}=" + json.dumps({k: [round(v, 2), round(self.cpu[k], 2), self.n[k]]
                                          for k, v in sorted(self.s.items())}), file=sys.stderr)


def _np_cka(x, y):
  import numpy as np
  x = x - x.mean(0)
  y = y - y.mean(0)
  return float(np.linalg.norm(x.T @ y) ** 2 / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)))


def _now() -> tuple:
  return time.perf_counter(), time.process_time()


def _since(t0: tuple, t1: tuple | None = None) -> tuple:
  """(wall s, CPU s) from ``t0`` to ``t1`` (default: now), both ``_now()``."""
  t1 = t1 or _now()
  return t1[0] - t0[0], t1[1] - t0[1]


def side_authors(root: Path, a) -> dict:
  """Per revision: from_pretrained, hooked torch forwards, numpy metrics."""
  import numpy as np
  import torch
  import transformers

  from sbjax.convert import revisions

  torch.set_num_threads(os.cpu_count() or 1)
  dev = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
  revs = revisions.find(root / "hub")
  toks = np.load(root / "tokens.npy").astype(np.int64)
  out, ref, ph = {}, None, Phases()
  for r in [revs[-1]] + revs[:-1]:  # the final revision first: the CKA reference
    t0 = _now()
    m = transformers.GPTNeoXForCausalLM.from_pretrained(r.path, dtype=torch.float32).to(dev).eval()
    ph.add("load", *_since(t0))
    acts = {"mlp": [[] for _ in m.gpt_neox.layers], "ov": [[] for _ in m.gpt_neox.layers]}
    hooks, n_heads = [], m.config.num_attention_heads
    for i, layer in enumerate(m.gpt_neox.layers):
      hooks.append(layer.mlp.register_forward_hook(
          lambda mod, inp, o, i=i: acts["mlp"][i].append(o[:, -1].double().cpu().numpy())))

      def qkv_hook(mod, inp, o, i=i, layer=layer, h=n_heads):
        b, t, _ = o.shape
        v = o.view(b, t, h, 3, -1)[:, -1, :, 2, :].reshape(b, -1)
        acts["ov"][i].append((v @ layer.attention.dense.weight.T).double().cpu().numpy())
      hooks.append(layer.attention.query_key_value.register_forward_hook(qkv_hook))
    nll, feats = 0.0, []
    with torch.no_grad():
      for c0 in range(0, len(toks), a.chunk):
        x = torch.tensor(toks[c0:c0 + a.chunk], device=dev)
        t0 = _now()
        o = m(x[:, :-1], output_hidden_states=True)
        t1 = _now()
        nll += float(torch.nn.functional.cross_entropy(  # float32, as HF's labels= loss
            o.logits.reshape(-1, o.logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"))
        t2 = _now()
        last = o.hidden_states[-1]
        feats.append(last.double().reshape(-1, last.shape[-1]).cpu().numpy())
        ph.add("forward(+hooks)", *_since(t0, t1))
        ph.add("loss (float32 cross_entropy)", *_since(t1, t2))
        del o
    for hk in hooks:
      hk.remove()
    t0 = _now()
    h = np.concatenate(feats)
    u = h / np.linalg.norm(h, axis=1, keepdims=True)
    s_ = u.sum(0)
    aniso = float((s_ @ s_ - len(u)) / (len(u) * (len(u) - 1)))
    t1 = _now()
    sv = np.linalg.svd(m.get_output_embeddings().weight.detach().double().cpu().numpy(),
                       compute_uv=False)
    p = sv / sv.sum()
    ent = -(p * np.log(np.where(p > 0, p, 1))).sum()
    row = {"eval_loss": nll / toks[:, 1:].size, "anisotropy_last": aniso,
           "head_erank": float(np.exp(ent)), "head_kl_uniform": float(np.log(len(p)) - ent)}
    t2 = _now()
    ph.add("anisotropy", *_since(t0, t1))
    ph.add("head spectrum (float64 SVD)", *_since(t1, t2))
    layer_acts = {k: [np.concatenate(v) for v in vs] for k, vs in acts.items()}
    if ref is None:
      ref = layer_acts
    for kind, name in (("mlp", "mlp"), ("ov", "attn")):
      for i, x in enumerate(layer_acts[kind]):
        row[f"cka_to_final_{name}_{i}"] = _np_cka(x, ref[kind][i])
    out[r.step] = row
    ph.add("cka", *_since(t2))
    del m
  ph.report("authors")
  return out


def _instrument_sbjax(ph: Phases) -> None:
  """Time sbjax's phases from outside (the library is unchanged)."""
  from sbjax.cli import convert as convert_cli
  from sbjax import checkpoint
  from sbjax.analysis import analyze as an
  from sbjax.analysis import forward as fw
  from sbjax.analysis import layerwise

  ph.wrap(convert_cli.integrity, "check_revision", "import: hash+check")
  ph.wrap(convert_cli.hf_import, "import_hf", "import: read safetensors")
  ph.wrap(convert_cli.checkpoint, "write_params", "import: write orbax")
  ph.wrap(checkpoint.ParamsReader, "read", "load (orbax restore)")
  ph.wrap(fw, "stack_params", "load (stack)")
  ph.wrap(an.samples_lib, "build", "samples")
  forward, timed = fw.cached_forward, {}

  def cached_forward(*args):  # one timed wrapper per compiled forward: ":first" = its compile
    f = forward(*args)
    if id(f) not in timed:
      timed[id(f)] = ph.wrap(type("F", (), {"f": staticmethod(f)}), "f", "forward", first=True)
    return timed[id(f)]
  fw.cached_forward = cached_forward
  ph.wrap(fw, "eval_pass", "eval pass (forward + host copies)")
  weights = fw.cached_weight_metrics

  def cached_weight_metrics(*args):
    f, dims = weights(*args)
    holder = type("W", (), {"f": staticmethod(f)})
    return ph.wrap(holder, "f", "weight metrics (head spectra)", first=True), dims
  fw.cached_weight_metrics = cached_weight_metrics
  ph.wrap(layerwise, "cka_to_reference", "cka", first=True)
  ph.wrap(fw, "aniso_layers", "anisotropy (per layer)", first=True)
  ph.wrap(fw, "aniso_last", "anisotropy (last)", first=True)
  ph.wrap(an, "write_outputs", "write outputs")


def side_sbjax(root: Path, a) -> dict:
  from sbjax.cli import convert as convert_cli
  from sbjax.analysis import analyze_run
  from sbjax.analysis.settings import Settings

  ph = Phases()
  if a.profile:
    _instrument_sbjax(ph)
  work = root / "work"
  shutil.rmtree(work, ignore_errors=True)
  t0 = time.perf_counter()
  convert_cli.import_to_workdir(str(root / "hub"), str(work))
  print(f"import_s={time.perf_counter() - t0:.1f}", file=sys.stderr)
  t0 = time.perf_counter()
  rows = analyze_run(work, Settings(
      groups=("loss", "anisotropy", "spectrum", "cka"), tokens=str(root / "tokens.npy"),
      eval_sequences=a.n, cka_sequences=a.n, anisotropy_tokens=0, batch_sequences=a.chunk,
      progress=False, figures=False, use_cache=False))
  print(f"analyze_s={time.perf_counter() - t0:.1f}", file=sys.stderr)
  if a.profile:
    ph.report("sbjax")
  return {r["step"]: {k: v for k, v in r.items() if k != "step"} for r in rows}


def run_side(name: str, root: Path, a) -> dict:
  """Wall time and user+sys CPU time of one side's process (imports included)."""
  t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
  load0, started = os.getloadavg()[0], time.strftime("%H:%M:%S", time.gmtime())
  p = subprocess.run([sys.executable, __file__, f"--side={name}", f"--root={root}",
                      *[f"--{k}={v}" for k, v in vars(a).items()
                        if k not in ("side", "root", "small", "profile", "sides", "reuse")],
                      *(["--profile"] if a.profile else [])],
                     capture_output=True, text=True)
  if p.returncode:
    raise SystemExit(f"{name} failed:\n{p.stderr[-4000:]}")
  res = json.loads(p.stdout.strip().splitlines()[-1])
  res["wall_s"] = round(time.perf_counter() - t0, 2)
  r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
  res["cpu_s"] = round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 2)
  res["phases"] = [ln for ln in p.stderr.splitlines()
                   if ln.startswith(("import_s=", "analyze_s=", "phases_"))]
  res.update(load_1m_start=round(load0, 2), load_1m_end=round(os.getloadavg()[0], 2),
             started_utc=started, args={k: getattr(a, k) for k in ("k", "n", "t", "shape", "chunk")})
  (root / f"result_{name}.json").write_text(json.dumps(res))  # for --reuse
  print(f"{name}: wall {res['wall_s']} s, cpu {res['cpu_s']} s, {res['phases']}", file=sys.stderr,
        flush=True)
  return res


def reused(name: str, root: Path, a) -> dict:
  """A side's result saved by an earlier run at the same sizes (ROOT/result_NAME.json)."""
  res = json.loads((root / f"result_{name}.json").read_text())
  want = {k: getattr(a, k) for k in ("k", "n", "t", "shape", "chunk")}
  if res.get("args") != want:
    raise SystemExit(f"--reuse={name}: {root}/result_{name}.json was run at {res.get('args')}, "
                     f"not {want}")
  print(f"{name}: reused from {res['started_utc']} (load {res['load_1m_start']}-"
        f"{res['load_1m_end']}): wall {res['wall_s']} s, cpu {res['cpu_s']} s", file=sys.stderr)
  return res


# Compared relatively: head_erank = exp(H) (H the singular entropy; erank is near d = 512 for
# these random heads), so
# |d erank| / erank = |dH|, and a relative 1e-4 on erank is the absolute 1e-4 that head_kl_uniform
# = log n - H (the same H) is held to. An absolute 1e-4 on erank would ask H to 2e-7, below what a
# float32 sum of 512 terms resolves (sbjax: float32 Gram eigenvalues; authors: float64 SVD).
RELATIVE = {"head_erank"}


def compare(va: dict, vs: dict) -> dict:
  """{metric (per-layer columns pooled): max |sbjax - authors|} over steps, divided by
  |authors| for the RELATIVE metrics."""
  diffs = {}
  for step, row in va.items():
    for col, v in row.items():
      key = col.rstrip("0123456789").rstrip("_")
      d = abs(float(vs[step][col]) - v) / (abs(v) if key in RELATIVE and v else 1.0)
      diffs[key] = max(diffs.get(key, 0.0), d)
  return diffs


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--k", type=int, default=16)
  ap.add_argument("--n", type=int, default=128, help="sequences of the fixed batch")
  ap.add_argument("--t", type=int, default=256, help="tokens per sequence (T)")
  ap.add_argument("--shape", default="pythia-70m", choices=sorted(SHAPES))
  ap.add_argument("--chunk", type=int, default=32, help="sequences per forward chunk")
  ap.add_argument("--tol", type=float, default=1e-4)
  ap.add_argument("--text", default="", help="corpus directory (default: the development one)")
  ap.add_argument("--root", default="/tmp/sbjax_series_bench")
  ap.add_argument("--side", default="", choices=["", "authors", "sbjax"])
  ap.add_argument("--small", action="store_true", help="K=4, small shape, 32x64 tokens")
  ap.add_argument("--device", default="cpu", help="the authors' torch device: cpu | cuda | auto "
                  "(cuda if torch sees one); sbjax's side uses the device jax sees")
  ap.add_argument("--profile", action="store_true", help="seconds per phase of each side")
  ap.add_argument("--sides", default="authors,sbjax", help="which sides to run (comma list)")
  ap.add_argument("--reuse", default="", help="sides whose saved ROOT/result_SIDE.json is "
                  "compared instead of running them (one side re-run after a code change)")
  a = ap.parse_args()
  root = Path(a.root)
  if a.side:  # one side, in its own process
    res = (side_authors if a.side == "authors" else side_sbjax)(root, a)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"values": {str(k): v for k, v in res.items()}, "peak_rss_mb": round(rss)}))
    return
  if a.small:
    a.k, a.n, a.t, a.shape, a.chunk = 4, 32, 64, "small", 16
  if not a.text:
    from experiments.shared import DEFAULT_TEXT
    a.text = str(DEFAULT_TEXT)
  root.mkdir(parents=True, exist_ok=True)
  build(root, a)
  res = {s: reused(s, root, a) for s in a.reuse.split(",") if s}
  res.update({s: run_side(s, root, a) for s in a.sides.split(",") if s and s not in res})
  if len(res) < 2:
    return
  diffs = compare(res["authors"]["values"], res["sbjax"]["values"])
  rec = emit({"bench": "series_analysis", "k": a.k, "n": a.n, "t": a.t, "shape": a.shape,
              "authors_s": res["authors"]["wall_s"], "sbjax_s": res["sbjax"]["wall_s"],
              "speedup": round(res["authors"]["wall_s"] / res["sbjax"]["wall_s"], 2),
              "authors_cpu_s": res["authors"]["cpu_s"], "sbjax_cpu_s": res["sbjax"]["cpu_s"],
              "cpu_ratio": round(res["authors"]["cpu_s"] / res["sbjax"]["cpu_s"], 2),
              "sbjax_phases": res["sbjax"]["phases"], "authors_phases": res["authors"]["phases"],
              "load_1m": {k: [r["load_1m_start"], r["load_1m_end"]] for k, r in res.items()},
              "started_utc": {k: r["started_utc"] for k, r in res.items()},
              "authors_peak_rss_mb": res["authors"]["peak_rss_mb"],
              "sbjax_peak_rss_mb": res["sbjax"]["peak_rss_mb"],
              "max_diff": {k: float(f"{v:.2e}") for k, v in sorted(diffs.items())},
              "relative": sorted(RELATIVE), "tol": a.tol,
              "equal_within_tol": all(v <= a.tol for v in diffs.values()), **machine()})
  print(json.dumps(rec, indent=1))


if __name__ == "__main__":
  main()
