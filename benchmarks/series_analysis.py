"""Analysing a checkpoint series: the authors' way vs sbjax, end to end (NOT a test).

A series of K revisions of a GPT-NeoX model (random weights; default pythia-70m-shaped,
K=16) is saved with transformers in the HF cache layout (``models--org--name/{refs,
snapshots, blobs}``), and a fixed batch of N x T real tokens (the shipped sample corpus
tokenised with a byte-level BPE tokenizer.json trained on it) in an .npy [N, T+1]. Both
sides compute, per revision: eval loss (mean next-token NLL over the N*T targets), the head
spectrum (effective rank and KL(sigma/sum sigma || uniform) of embed_out), last-layer
anisotropy (mean pairwise cosine of the final-norm features at all N*T positions) and
linear CKA (biased HSIC) to the final revision of every block's MLP output and OV-circuit
output (sum_h v_h W_O,h, no attention weighting) at the last position of each sequence:

- ``authors``: the convergence paper's script style: for each revision,
  ``GPTNeoXForCausalLM.from_pretrained(snapshot)`` (on ``--device``: ``cuda`` or ``auto``
  puts the forwards on the GPU that sbjax's side uses), forward hooks on each block's MLP and
  query_key_value, torch forwards in chunks, the loss as torch's float32 cross_entropy (what
  ``labels=`` gives), numpy float64 metrics (SVD, anisotropy, CKA);
- ``sbjax``: ``sbjax.cli.convert.import_to_workdir`` (hashes every revision, writes orbax
  checkpoints) then ``analyze_run`` on the token batch (vmapped groups of checkpoints).

Each side runs in its own process (wall and CPU seconds, peak RSS, imports included); the
values must agree to ``--tol`` (absolute; relative for head_erank, see ``RELATIVE``).

    PYTHONPATH=. python benchmarks/series_analysis.py --small --write_docs   # minutes on 2 CPUs
    PYTHONPATH=. python benchmarks/series_analysis.py                      # K=16 pythia-70m
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
import tempfile
import time
from pathlib import Path

from _bench import emit, machine, peak_rss_mb, table, write_docs

SHAPES = {"pythia-70m": dict(hidden_size=512, num_hidden_layers=6, num_attention_heads=8,
                             intermediate_size=2048, vocab_size=50304),
          "small": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=256, vocab_size=2048)}


def build(root: Path, a) -> None:
  """The series (HF cache layout) and the token batch, once per size (``root`` names it)."""
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
  (root / "series.done").touch()


def _np_cka(x, y):
  import numpy as np
  x = x - x.mean(0)
  y = y - y.mean(0)
  return float(np.linalg.norm(x.T @ y) ** 2 / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)))


def _hooks(m, acts: dict) -> list:
  """Forward hooks that collect each block's MLP output and OV-circuit output at the last
  position of each sequence (float64 numpy) into ``acts``."""
  hooks, n_heads = [], m.config.num_attention_heads
  for i, layer in enumerate(m.gpt_neox.layers):
    hooks.append(layer.mlp.register_forward_hook(
        lambda mod, inp, o, i=i: acts["mlp"][i].append(o[:, -1].double().cpu().numpy())))

    def qkv_hook(mod, inp, o, i=i, layer=layer, h=n_heads):
      b, t, _ = o.shape
      v = o.view(b, t, h, 3, -1)[:, -1, :, 2, :].reshape(b, -1)
      acts["ov"][i].append((v @ layer.attention.dense.weight.T).double().cpu().numpy())
    hooks.append(layer.attention.query_key_value.register_forward_hook(qkv_hook))
  return hooks


def _authors_row(m, toks, a, dev, acts) -> dict:
  """One revision the authors' way: torch forwards in chunks, numpy float64 metrics."""
  import numpy as np
  import torch

  nll, feats = 0.0, []
  with torch.no_grad():
    for c0 in range(0, len(toks), a.chunk):
      x = torch.tensor(toks[c0:c0 + a.chunk], device=dev)
      o = m(x[:, :-1], output_hidden_states=True)
      nll += float(torch.nn.functional.cross_entropy(  # float32, as HF's labels= loss
          o.logits.reshape(-1, o.logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"))
      last = o.hidden_states[-1]
      feats.append(last.double().reshape(-1, last.shape[-1]).cpu().numpy())
  h = np.concatenate(feats)
  u = h / np.linalg.norm(h, axis=1, keepdims=True)
  s_ = u.sum(0)
  sv = np.linalg.svd(m.get_output_embeddings().weight.detach().double().cpu().numpy(),
                     compute_uv=False)
  p = sv / sv.sum()
  ent = -(p * np.log(np.where(p > 0, p, 1))).sum()
  return {"eval_loss": nll / toks[:, 1:].size,
          "anisotropy_last": float((s_ @ s_ - len(u)) / (len(u) * (len(u) - 1))),
          "head_erank": float(np.exp(ent)), "head_kl_uniform": float(np.log(len(p)) - ent)}


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
  out, ref = {}, None
  for r in [revs[-1]] + revs[:-1]:  # the final revision first: the CKA reference
    m = transformers.GPTNeoXForCausalLM.from_pretrained(r.path, dtype=torch.float32).to(dev).eval()
    acts = {"mlp": [[] for _ in m.gpt_neox.layers], "ov": [[] for _ in m.gpt_neox.layers]}
    hooks = _hooks(m, acts)
    row = _authors_row(m, toks, a, dev, acts)
    for hk in hooks:
      hk.remove()
    layer_acts = {k: [np.concatenate(v) for v in vs] for k, vs in acts.items()}
    ref = ref or layer_acts
    for kind, name in (("mlp", "mlp"), ("ov", "attn")):
      for i, x in enumerate(layer_acts[kind]):
        row[f"cka_to_final_{name}_{i}"] = _np_cka(x, ref[kind][i])
    out[r.step] = row
  return out


def side_sbjax(root: Path, a) -> dict:
  """``import_to_workdir`` (hashes every revision, writes orbax checkpoints), then
  ``analyze_run`` on the token batch."""
  from sbjax.analysis import analyze_run
  from sbjax.analysis.settings import Settings
  from sbjax.cli import convert as convert_cli

  work = root / "work"
  shutil.rmtree(work, ignore_errors=True)
  convert_cli.import_to_workdir(str(root / "hub"), str(work))
  rows = analyze_run(work, Settings(
      groups=("loss", "anisotropy", "spectrum", "cka"), tokens=str(root / "tokens.npy"),
      eval_sequences=a.n, cka_sequences=a.n, anisotropy_tokens=0, batch_sequences=a.chunk,
      progress=False, figures=False))
  return {r["step"]: {k: v for k, v in r.items() if k != "step"} for r in rows}


def run_side(name: str, root: Path, a) -> dict:
  """One side in its own process: its values, wall and user+sys CPU seconds (imports
  included) and peak RSS."""
  t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
  args = [f"--{k}={v}" for k, v in vars(a).items() if k not in ("side", "small", "write_docs")]
  p = subprocess.run([sys.executable, __file__, f"--side={name}", *args],
                     capture_output=True, text=True)
  if p.returncode:
    raise SystemExit(f"{name} failed:\n{p.stderr[-4000:]}")
  res = json.loads(p.stdout.strip().splitlines()[-1])
  r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
  res["wall_s"] = round(time.perf_counter() - t0, 2)
  res["cpu_s"] = round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 2)
  print(f"{name}: wall {res['wall_s']} s, cpu {res['cpu_s']} s", file=sys.stderr, flush=True)
  return res


# Compared relatively: head_erank = exp(H) (H the singular entropy), so |d erank| / erank =
# |dH|, the absolute 1e-4 that head_kl_uniform = log n - H is held to. An absolute 1e-4 on
# erank (near d = 512 for these random heads) would ask H to 2e-7, below what a float32 sum of
# 512 terms resolves (sbjax: float32 Gram eigenvalues; authors: float64 SVD).
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


def parse_args(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--k", type=int, default=16)
  ap.add_argument("--n", type=int, default=128, help="sequences of the fixed batch")
  ap.add_argument("--t", type=int, default=256, help="tokens per sequence (T)")
  ap.add_argument("--shape", default="pythia-70m", choices=sorted(SHAPES))
  ap.add_argument("--chunk", type=int, default=32, help="sequences per forward chunk")
  ap.add_argument("--tol", type=float, default=1e-4)
  ap.add_argument("--text", default="", help="corpus directory (default: the shipped sample)")
  ap.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "sbjax_series_bench"),
                  help="where the series and token batch are built once (reused)")
  ap.add_argument("--side", default="", choices=["", "authors", "sbjax"])
  ap.add_argument("--small", action="store_true", help="K=4, small shape, 32x64 tokens")
  ap.add_argument("--device", default="cpu", help="the authors' torch device: cpu | cuda | auto "
                  "(cuda if torch sees one); sbjax's side uses the device jax sees")
  ap.add_argument("--write_docs", action="store_true", help="replace this benchmark's table "
                  "in docs/benchmarks.md")
  a = ap.parse_args(argv)
  if a.small:
    a.k, a.n, a.t, a.shape, a.chunk = 4, 32, 64, "small", 16
  if not a.text:
    from sbjax.data.sample_corpus import sample_corpus_dir
    a.text = str(sample_corpus_dir())
  return a


def main(argv=None):
  a = parse_args(argv)
  root = Path(a.root) / f"{a.shape}-k{a.k}-n{a.n}-t{a.t}"
  if a.side:  # one side, in its own process
    res = (side_authors if a.side == "authors" else side_sbjax)(root, a)
    print(json.dumps({"values": {str(k): v for k, v in res.items()},
                      "peak_rss_mb": round(peak_rss_mb())}))
    return
  root.mkdir(parents=True, exist_ok=True)
  build(root, a)
  res = {s: run_side(s, root, a) for s in ("authors", "sbjax")}
  diffs = compare(res["authors"]["values"], res["sbjax"]["values"])
  rows = [emit({"side": s, "k": a.k, "n": a.n, "t": a.t, "shape": a.shape,
                "wall_s": r["wall_s"], "cpu_s": r["cpu_s"], "peak_rss_mb": r["peak_rss_mb"],
                "speedup": round(res["authors"]["wall_s"] / r["wall_s"], 2),
                "cpu_ratio": round(res["authors"]["cpu_s"] / r["cpu_s"], 2), **machine()})
          for s, r in res.items()]
  worst = max(diffs, key=diffs.get)
  rows[-1].update(max_diff=f"{diffs[worst]:.1e} ({worst})",
                  equal_within_tol=all(v <= a.tol for v in diffs.values()))
  print(json.dumps({k: float(f"{v:.2e}") for k, v in sorted(diffs.items())}))
  cols = ["side", "shape", "k", "n", "t", "wall_s", "cpu_s", "peak_rss_mb", "speedup",
          "cpu_ratio", "max_diff", "equal_within_tol"]
  print(table(cols, rows))
  if a.write_docs:
    write_docs("series_analysis", "Series analysis: sbjax vs the authors' way",
               f"K = {a.k} revisions ({a.shape}), {a.n} × {a.t} tokens; each side in its own "
               "process, imports included; speedup, cpu_ratio: the authors' wall / CPU seconds "
               f"over this side's; max_diff: the largest difference of any metric (tol {a.tol:g})."
               "\n\n" + table(cols, rows), device=a.device)


if __name__ == "__main__":
  main()
