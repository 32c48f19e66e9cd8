"""Measurements of the planted arms: per checkpoint, per validation window, and the per-arm
readout (rise with its paired-bootstrap CI, coincidence, gap to the floor, Γ at the rise).

Per checkpoint s of an arm, on the FIXED validation windows x_w (w = 1..W, seq_len + 1
tokens each, the same for every checkpoint and every arm):

* ``L[s, w]`` = mean over the positions t of window w of Σ_v P(v | c_t) (−log q_t(v)), the
  Rao-Blackwellised expected loss (P = the language's exact next-token distribution, q the
  model's); E[L] − H is the mean KL(P ‖ q). ``expected_loss`` = mean_w L[s, w];
  ``eval_loss`` = the sampled next-token loss of the same windows.
* ``anisotropy_last``: mean pairwise cosine of the final-norm features h over all positions;
* head spectra (``sbjax.metrics.head_spectra``, singular values by SVD, exact at
  these sizes): ``kl_raw``, ``erank_raw`` of W and ``kl_centred``, ``erank_centred`` of
  (I − 11ᵀ/V) W;
* ``w_error_raw_<r>``, ``w_error_centred_<r>`` (r ∈ ``W_ERROR_DIMS``): W-error(r) =
  sqrt(Σ_{i>r} σ_i²) / sqrt(Σ σ_i²) of W and of (I − 11ᵀ/V) W (0 when r ≥ d);
* ``ln_f_bias_norm``: ‖b‖₂ of the final LayerNorm bias; ``gamma`` = λ Σ_{t<s} η_t;
* the head's row norms ‖W_w‖₂ (W the V x d head matrix): ``rare_row_norm`` = their mean over
  the ``n_rare(V)`` = max(1, V // 128) rarest tokens (smallest stationary marginal
  q_w = Σ_{c: last token w} π_c, ``sbjax.data.planted_tail.token_marginal``),
  ``frequent_row_norm`` over the n_rare most frequent, ``row_norm_mean`` over all V.

Each checkpoint is measured once: its row and L[s, ·] are kept in ``<workdir>/
planted_measure.json`` (``CACHE_FILE``, rewritten atomically after each checkpoint measured,
so a cut-off mid-arm keeps the ones done) and read back, bit for bit, by a later call, as long
as everything that determines them is unchanged: the cache's ``key`` (``cache_key``:
``MEASURE_VERSION``, the validation windows' SHA-256 with their shape and dtype, the
language's ``info()`` and the SHA-256 of its exact probabilities, the run's config, the jax
version and backend) and, per step, the checkpoint's identity (``checkpoint_identity``: the
SHA-256 of its checksum manifest, i.e. of every file's size and digest; the files' sizes and
mtimes for a step without one), so a step set aside and saved again is measured again. A
mismatch measures again and overwrites; an unreadable cache warns in one line and measures
every checkpoint again.

A probe (``probe_arm``, the budget clock's, ``planted_budget``) measures a few checkpoints of a
run while it still trains, through the same measurer into the same cache, timing the
measurer's set-up (per member) and each checkpoint (the first one includes the compile of the
measurement for this shape). It reads only finalized steps (``finalized_steps``: committed and
sealed with their checksum manifest, which is written once, so their identity does not change
afterwards): the run's measurement after training reads them back from the cache. A probed
checkpoint that cannot be read (a file that fails its checksum, a truncated file) ends the
probe with one warning naming it: the probe is only a projection aid, so the training goes on
and the time estimate falls back to the slowest-rate rule; the probe leaves the step where it
is, and the measurement after training meets it as any damaged step (below).

A damaged checkpoint met by the measurement after training (``measure_arm``: its params fail
to read, e.g. a file that fails its checksum or a truncated array file) is set aside as the
analysis sets one aside (``sbjax.analysis.damaged``: moved to the member's
``checkpoints_bad/`` with one warning line naming the workdir, the step and the reason; left
in place and skipped when the workdir is read-only), and the other checkpoints are measured:
the arm's rows and L[K, ·] are those of the steps that read. The set-aside steps and their
reasons are kept in the cache file (``set_aside``, whatever its key) and returned
(``Measured.set_aside``), so a later call, which no longer sees the step, still reports it; a
record whose step has been saved again since (training resumed over it: ``planted_run``)
stays with ``saved_again`` true and its step is measured again. A member with no good
checkpoint left gives no rows.

Both measure under the run's mesh (``measure_mesh``: ``jax.set_mesh`` of ``cfg.mesh``, the
mesh ``sbjax.train`` trains under), so the measurement after training reuses the compile of
the probe made during training (the mesh is part of jit's cache key): one compile per model
shape and process.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import time
import warnings
import weakref
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .planted_presets import arm_name
from sbjax import checkpoint as ckpt
from sbjax import heads as heads_lib
from sbjax import optim
from sbjax import sharding as shd
from sbjax import metrics as M
from sbjax import checksums
from sbjax.analysis.damaged import Damaged, read_good
from sbjax.atomic import atomic_write_text, is_local
from sbjax.data.planted_tail import token_marginal
from sbjax.paths import upath
from sbjax.model import Model
from sbjax.studies import rise as rise_lib


W_ERROR_DIMS = (2, 4, 8)  # W-error(r) columns (r >= d gives 0: the head has rank <= d)
ROW_NORMS = ("rare_row_norm", "frequent_row_norm", "row_norm_mean")
# the measurement's version: bump it with ANY change to what ``measure_arm`` computes (a
# column added or renamed, a formula, the windows' or the language's use), so that the rows
# cached in planted_measure.json by an older version are measured again, not served stale
MEASURE_VERSION = 1
CACHE_FILE = "planted_measure.json"


def n_rare(vocab: int) -> int:
  """How many tokens the rare (and the frequent) row norms average over: 1 in 128."""
  return max(1, vocab // 128)


def rare_and_frequent(lang) -> tuple[np.ndarray, np.ndarray]:
  """(the n_rare(V) rarest token ids, the n_rare(V) most frequent), by stationary marginal."""
  order = np.argsort(token_marginal(lang), kind="stable")
  n = n_rare(lang.vocab)
  return order[:n].astype(np.int32), order[::-1][:n].astype(np.int32)


def _w_error_cols(m: dict) -> dict:
  """w_error_raw_<r>, w_error_centred_<r> for r in W_ERROR_DIMS."""
  return {f"w_error_{kind}_{r}": float(m[f"w_error_{kind}"][j])
          for kind in ("raw", "centred") for j, r in enumerate(W_ERROR_DIMS)}


@functools.lru_cache(maxsize=8)
def _checkpoint_fn(mc):
  """jit(params, x_WxT, y_WxT, c_WxT, probs_CxV) -> per-window losses and the metrics."""
  model = Model(mc)

  def measure_checkpoint(params, x, y, c, probs, rare, frequent):  # (jax's fun_name)
    scores, ex = model.forward(params, x, ("h",))
    logq = jax.nn.log_softmax(scores.astype(jnp.float32), axis=-1)
    rb = -jnp.sum(probs[c] * logq, axis=-1)  # (W, T)
    nll = -jnp.take_along_axis(logq, y[..., None], axis=-1)[..., 0]
    h = ex["h"].reshape(-1, ex["h"].shape[-1])
    w = heads_lib.head_matrix(params, mc)
    sp = M.head_spectra(w, d=jnp.asarray(W_ERROR_DIMS), method="svd")
    norms = jnp.linalg.norm(w.astype(jnp.float32), axis=-1)
    return {"w_error_raw": sp.raw.w_error, "w_error_centred": sp.centred.w_error,
            "rb_W": rb.mean(-1), "nll_W": nll.mean(-1), "anisotropy_last": M.anisotropy(h),
            "kl_raw": sp.raw.kl_to_uniform, "erank_raw": sp.raw.effective_rank,
            "kl_centred": sp.centred.kl_to_uniform,
            "erank_centred": sp.centred.effective_rank,
            "rare_row_norm": norms[rare].mean(), "frequent_row_norm": norms[frequent].mean(),
            "row_norm_mean": norms.mean()}

  return jax.jit(measure_checkpoint)


def _sha256(*parts) -> str:
  h = hashlib.sha256()
  for part in parts:
    h.update(part if isinstance(part, (bytes, memoryview)) else
             json.dumps(part, sort_keys=True, default=str).encode())
  return h.hexdigest()


def array_fingerprint(a: np.ndarray) -> str:
  """SHA-256 of an array's dtype, shape and bytes."""
  a = np.ascontiguousarray(a)
  return _sha256([a.dtype.str, list(a.shape)], memoryview(a.reshape(-1).view(np.uint8)))


_LANG_FP: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # language -> fingerprint


def language_fingerprint(lang) -> str:
  """SHA-256 of the language's ``info()`` and of its exact C x V probabilities (hashed once
  per language object: 0.1 s at V 4096)."""
  if lang not in _LANG_FP:
    _LANG_FP[lang] = _sha256(lang.info(), array_fingerprint(lang.probs))
  return _LANG_FP[lang]


def cache_key(cfg, windows_WxT1: np.ndarray, lang) -> dict:
  """What determines every cached row of a run, besides its checkpoints (module doc)."""
  return {"version": MEASURE_VERSION, "windows": array_fingerprint(windows_WxT1),
          "language": language_fingerprint(lang), "config": _sha256(cfg.to_dict()),
          "jax": f"{jax.__version__} {jax.default_backend()}"}


def checkpoint_identity(wd, step: int) -> str:
  """The identity of a saved step: the SHA-256 of its checksum manifest's files (each file's
  size and SHA-256, ``sbjax.checksums``); for a step without a manifest, of its files' sizes
  and modification times (``stat:``)."""
  d = ckpt.ckpt_dir(wd) / str(step)
  try:
    m = checksums.read_manifest(d)
  except checksums.ChecksumError:
    m = None
  if m is not None:
    return "sha256:" + _sha256(m["files"])
  stats = []
  for r in sorted(checksums.relative_files(d)):
    st = (d / r).stat()
    stats.append([r, st.st_size, st.st_mtime_ns] if is_local(d) else [r, st.length])
  return "stat:" + _sha256(stats)


def _read_cache(path, key: dict) -> tuple[dict, list]:
  """({step (str): entry} of the cache at ``path`` made with ``key``, {} when there is none or
  its key differs; its ``set_aside`` records, whatever its key); an unreadable file warns in
  one line and counts as none."""
  if not path.exists():
    return {}, []
  try:
    c = json.loads(path.read_text())
    if not isinstance(c, dict) or not isinstance(c.get("steps"), dict):
      raise ValueError("not a planted measurement cache")
  except (OSError, ValueError, UnicodeDecodeError) as e:
    warnings.warn(f"{path} is unreadable ({type(e).__name__}: {str(e)[:120]}); measuring "
                  "every checkpoint again (it is rewritten)", RuntimeWarning, stacklevel=3)
    return {}, []
  aside = [r for r in c.get("set_aside") or [] if isinstance(r, dict) and "step" in r]
  return (c["steps"] if c.get("key") == key else {}), aside


def _usable(e, ident: str, step: int, n_windows: int) -> bool:
  """True for a cache entry of this step's checkpoint, well formed."""
  return (isinstance(e, dict) and e.get("checkpoint") == ident
          and isinstance(e.get("row"), dict) and e["row"].get("step") == step
          and isinstance(e.get("losses"), list) and len(e["losses"]) == n_windows)


def measure_mesh(cfg):
  """The context the measurement runs in: ``jax.set_mesh`` of the run's mesh, equal to the
  one ``sbjax.train`` trains under (``sharding.make_mesh(cfg.mesh)``), so that the probe
  (called during training) and the measurement after it share jit's cache (module doc)."""
  return jax.set_mesh(shd.make_mesh(cfg.mesh))


def _measurer(cfg, windows_WxT1: np.ndarray, lang):
  """(step, its params, read by the caller's ``ParamsReader``) -> (its row, L[s, ·] float64):
  the forward on the windows and the head's SVD."""
  x, y = windows_WxT1[:, :-1], windows_WxT1[:, 1:]
  fn = _checkpoint_fn(cfg.model)
  probs = jnp.asarray(lang.probs, jnp.float32)
  table = optim.gamma_schedule(cfg.train)
  rare, frequent = rare_and_frequent(lang)

  def one(s: int, params) -> tuple[dict, np.ndarray]:
    m = jax.device_get(fn(params, x, y, x, probs, rare, frequent))
    loss = np.asarray(m["rb_W"], np.float64)
    bias = params.get("ln_f", {}).get("bias")
    return {"step": int(s), "gamma": float(optim.gamma_at(cfg.train, s, table)),
            "expected_loss": float(loss.mean()),
            "eval_loss": float(np.mean(m["nll_W"])),
            **{k: float(m[k]) for k in ("anisotropy_last", "kl_raw", "kl_centred",
                                        "erank_raw", "erank_centred", *ROW_NORMS)},
            **_w_error_cols(m),
            "ln_f_bias_norm": float(np.linalg.norm(np.asarray(bias))) if bias is not None
            else float("nan")}, loss

  return one


def _open_cache(wd, windows_WxT1: np.ndarray, lang, cache: bool = True):
  """(the run's Config, its cache's path and key, the entries cached under that key, the
  cache's set-aside records)."""
  if lang.context != 1:
    raise ValueError(f"the planted arms measure a context-1 language, got context={lang.context}")
  cfg = ckpt.load_config(wd)
  path, key = upath(wd) / CACHE_FILE, cache_key(cfg, windows_WxT1, lang)
  store, aside = _read_cache(path, key) if cache else ({}, [])
  return cfg, path, key, dict(store), aside


def _entry(ident: str, row: dict, loss: np.ndarray) -> dict:
  return {"checkpoint": ident, "row": row, "losses": [float(v) for v in loss]}


class Measured(NamedTuple):
  """What ``measure_arm`` gives: one row per checkpoint that read (measured or from the
  cache), L[K, W] of those, how many were measured in this call, and the set-aside records
  ``{"step", "reason", "moved_to"}`` (``saved_again`` true for a step saved again since) of
  this call and of earlier calls, by step."""
  rows: list
  losses: np.ndarray
  measured: int
  set_aside: list


def measure_arm(wd, windows_WxT1: np.ndarray, lang, cache: bool = True) -> Measured:
  """The measurement of the run in ``wd`` (context-1 language: c_t = x_t): ``Measured``;
  with ``cache`` the checkpoints already measured are read from ``wd/planted_measure.json``
  (module doc), the same numbers bit for bit, and each one measured is added to it. A step
  whose params do not read is set aside (module doc) and the others are measured."""
  cfg, path, key, store, earlier = _open_cache(wd, windows_WxT1, lang, cache)
  damaged, one, reader, measured = Damaged(wd), None, None, 0
  with measure_mesh(cfg), contextlib.ExitStack() as stack:  # the probe's mesh: its compile
    for s in ckpt.list_steps(wd):
      ident = checkpoint_identity(wd, s)
      if _usable(store.get(str(s)), ident, s, len(windows_WxT1)):
        continue
      if one is None:
        one = _measurer(cfg, windows_WxT1, lang)
        reader = stack.enter_context(ckpt.ParamsReader(wd, _abstract(cfg)))
      plist, good = read_good(reader, [s], damaged)  # a damaged step: set aside, skipped
      if good:
        store[str(s)] = _entry(ident, *one(s, plist[0]))
        measured += 1
      if cache:  # after each checkpoint: a cut-off keeps the ones measured and set aside
        _write_cache(path, key, store, _aside(wd, earlier, damaged))
  steps = [s for s in ckpt.list_steps(wd) if s not in damaged.steps]  # (read-only: in place)
  kept, aside = {str(s): store[str(s)] for s in steps}, _aside(wd, earlier, damaged)
  if cache and (kept.keys() != store.keys() or aside != earlier):  # steps gone: dropped
    _write_cache(path, key, kept, aside)
  rows = [kept[str(s)]["row"] for s in steps]
  losses = [np.asarray(kept[str(s)]["losses"], np.float64) for s in steps]
  return Measured(rows, np.stack(losses) if losses else np.zeros((0, len(windows_WxT1))),
                  measured, aside)


def _abstract(cfg):
  """The run's parameters as ``sbjax.checkpoint.load_params`` restores them (one device)."""
  return ckpt.abstract_with_shardings(Model(cfg.model).abstract_params())


def _aside(wd, earlier: list, damaged: Damaged) -> list[dict]:
  """The set-aside records by step: this call's (``damaged``) over the earlier calls'; an
  earlier one whose step is saved again gets ``saved_again`` true."""
  saved = set(ckpt.list_steps(wd)) - set(damaged.steps)
  by_step = {int(r["step"]): {**r, "saved_again": int(r["step"]) in saved} for r in earlier}
  by_step.update({s: {**r, "saved_again": False} for s, r in damaged.steps.items()})
  return [by_step[s] for s in sorted(by_step)]


def finalized_steps(wd) -> list[int]:
  """The saved steps of ``wd`` whose save is final: committed (orbax's commit file) and
  sealed (their checksum manifest, which the checkpoint manager writes once orbax has
  finished the step: right after a synchronous save, at the next save after an asynchronous
  one, ``sbjax.checkpoint``). A step still being written (an orbax temporary directory, not
  listed, or a step committed but not sealed yet) is left out: its identity would change."""
  d = ckpt.ckpt_dir(wd)
  return [s for s in ckpt.list_steps(wd) if (d / str(s) / ckpt.COMMIT_FILE).is_file()
          and (d / str(s) / checksums.MANIFEST_FILE).is_file()]


class Probe(NamedTuple):
  """What ``probe_arm`` measured of one member: its workdir's name, the steps measured, the
  seconds of the measurer's set-up (once per member measured), of each step measured (the
  first includes the measurement's compile for this shape) and how many finalized steps its
  cache already held (measured by an earlier call), in that order; ``damaged``: the probed
  step that could not be read and why (then nothing counts as measured: ``steps`` and
  ``times`` are empty), None when none."""
  member: str
  steps: tuple
  setup_s: float
  times: tuple
  cached: int
  damaged: str | None = None


def probe_arm(wd, windows_WxT1: np.ndarray, lang, most: int = 3) -> Probe:
  """Measure up to ``most`` finalized checkpoints (``finalized_steps``, oldest first) of a
  run that may still be training, those its cache does not hold yet, as ``measure_arm``
  measures them and into its cache (the measurement after training reads them back), timing
  the measurer's set-up (with its checkpoint reader) and each checkpoint (its read and cache
write included, as there). A step
  that cannot be read ends the probe with one warning (module doc): its ``Probe`` names it
  and holds no times."""
  cfg, path, key, store, aside = _open_cache(wd, windows_WxT1, lang)
  todo, cached = [], 0
  for s in finalized_steps(wd):
    ident = checkpoint_identity(wd, s)
    if _usable(store.get(str(s)), ident, s, len(windows_WxT1)):
      cached += 1
    elif len(todo) < most:
      todo.append((s, ident))
  name, times = upath(wd).name, []
  with measure_mesh(cfg), contextlib.ExitStack() as stack:  # as measure_arm's (inside the
    t = time.perf_counter()  # training's, an equal mesh), reading through the same reader
    one = _measurer(cfg, windows_WxT1, lang) if todo else None
    reader = stack.enter_context(ckpt.ParamsReader(wd, _abstract(cfg))) if todo else None
    setup = time.perf_counter() - t
    for s, ident in todo:
      t = time.perf_counter()
      try:
        params = reader.read([s])[0]
      except Exception as e:  # noqa: BLE001 - any unreadable step: the probe gives up
        return _probe_damaged(wd, name, s, e, cached)
      store[str(s)] = _entry(ident, *one(s, params))
      _write_cache(path, key, store, aside)
      times.append(time.perf_counter() - t)
  return Probe(name, tuple(s for s, _ in todo), setup if todo else 0.0, tuple(times), cached)


def _probe_damaged(wd, name: str, step: int, e: BaseException, cached: int) -> Probe:
  """The probe's end at an unreadable step: one warning line, a Probe without times."""
  reason = ckpt.short_reason(e, drop=f"checkpoint step {step} in {wd} ")
  reason = reason.split("; use another step")[0]
  warnings.warn(f"the budget probe could not read checkpoint step {step} in {wd} ({reason}); "
                "training goes on, and this population's measurement is projected by the "
                "slowest-rate rule instead", RuntimeWarning, stacklevel=2)
  return Probe(name, (), 0.0, (), cached, f"step {step} of {name} ({reason})")


def _write_cache(path, key: dict, store: dict, aside: list) -> None:
  atomic_write_text(path, json.dumps({"key": key, "steps": store, "set_aside": aside}) + "\n")


def _jump(vals: np.ndarray, i: int) -> float:
  """max over j ∈ {i−1, i, i+1} of vals[j] − vals[j−1] (the largest one-checkpoint increase
  within ±1 checkpoint of i); NaN if none exists."""
  js = [j for j in (i - 1, i, i + 1) if 1 <= j < len(vals)]
  return float(max(vals[j] - vals[j - 1] for j in js)) if js else float("nan")


def arm_summary(rows: list[dict], losses_KxW: np.ndarray, train_recs: list[dict], cfg, p,
                floor: float, entropy: float) -> dict:
  """The per-arm readout (the report's table row); ``p``: the planted preset's Knobs."""
  steps = np.array([r["step"] for r in rows])
  total = cfg.train.steps
  rt = rise_lib.rise_test(steps, losses_KxW, total, threshold=p.threshold, after=p.after,
                          n_boot=p.n_boot)
  tr = rise_lib.binned_means([r["step"] + 1 for r in train_recs], [r["loss"] for r in train_recs],
                             steps)  # a train record of step i is the state after i + 1 steps
  ok = np.isfinite(tr)
  train_rise = float(rise_lib.rise_statistic(steps[ok], tr[ok], total, p.after)) if ok.any() \
      else float("nan")
  out = {"arm": arm_name(cfg.model.d_model, cfg.train.weight_decay, cfg.model.dtype),
         "d": cfg.model.d_model, "weight_decay": cfg.train.weight_decay,
         "dtype": cfg.model.dtype, "steps": total,
         "gamma_total": optim.gamma_total(cfg.train), "rise": rt["rise"], "rise_ci_lo": rt["ci_lo"],
         "rise_ci_hi": rt["ci_hi"], "rise_verdict": rt["verdict"],
         "rise_onset_step": rt["onset_step"], "rise_peak_step": rt["peak_step"],
         "train_rise": train_rise, "train_rise_moves": int(train_rise >= p.threshold)}
  i = int(np.nonzero(steps == rt["onset_step"])[0][0]) if rt["onset_step"] is not None else None
  out["gamma_at_rise"] = rows[i]["gamma"] if i is not None else float("nan")
  for kind in ("raw", "centred"):
    kl = np.array([r[f"kl_{kind}"] for r in rows])
    out[f"kl_jump_{kind}"] = _jump(kl, i) if i is not None else float("nan")
  an = np.array([r["anisotropy_last"] for r in rows])
  out["anisotropy_at_rise"] = float(an[max(i - 1, 0):i + 2].max()) if i is not None else float("nan")
  which = [k for k in ("raw", "centred") if out[f"kl_jump_{k}"] >= p.kl_jump]
  out["coincidence"] = ("n/a" if i is None else
                        "yes" if which and out["anisotropy_at_rise"] >= p.anisotropy_level else "no")
  out["coincidence_kl"] = "+".join(which) or "none"
  final = rows[-1]
  out.update(final_expected_loss=final["expected_loss"], floor=floor, H=entropy,
             floor_gap=floor - entropy, gap_to_floor=final["expected_loss"] - floor,
             final_kl_raw=final["kl_raw"], final_kl_centred=final["kl_centred"],
             final_anisotropy=final["anisotropy_last"], final_ln_f_bias_norm=final["ln_f_bias_norm"],
             **{f"final_{k}": final[k] for k in ROW_NORMS if k in final})
  return out


def account(arms: list[dict], gamma_split: float = 5.0, small_d: int = 16) -> str:
  """Which account the verdicts support: "width" (exactly the arms with d ≤ small_d rise,
  whatever λ), "gamma" (exactly the arms with Γ_total ≥ gamma_split rise, whatever d),
  "neither" (no arm rises: the bottleneck sets the level, not the trajectory), "both" (the
  arms do not separate them), else "mixed" (or "inconclusive" when a verdict is)."""
  if any(a["rise_verdict"] == "inconclusive" for a in arms):
    return "inconclusive"
  rises = [a["rise_verdict"] == "yes" for a in arms]
  if not any(rises):
    return "neither"
  width = all(r == (a["d"] <= small_d) for r, a in zip(rises, arms))
  gamma = all(r == (a["gamma_total"] >= gamma_split) for r, a in zip(rises, arms))
  return "both" if width and gamma else "width" if width else "gamma" if gamma else "mixed"
