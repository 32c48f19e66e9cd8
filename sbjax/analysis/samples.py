"""The fixed samples of an analysis (see the module docstring of ``sbjax.analysis.analyze``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from sbjax.analysis.settings import Settings
from sbjax.data import make_dataset
from sbjax.data.options import TokensOptions


def _batch_rows(ds) -> int:
  b = getattr(ds, "batch_size", None)
  return int(b) if b else int(np.asarray(ds.eval_batches(1)[0]).shape[0])


def eval_sample(ds, n: int) -> np.ndarray:
  """First n validation windows of concat(ds.eval_batches(ceil(n / B))), int32 [n, T+1]."""
  b = _batch_rows(ds)
  arr = np.concatenate([np.asarray(x) for x in ds.eval_batches(-(-n // b))])[:n]
  if arr.shape[0] < n:
    raise ValueError(f"the dataset gave {arr.shape[0]} validation windows, fewer than {n}")
  return arr.astype(np.int32)


def train_sample(ds, n: int) -> np.ndarray:
  """First n windows of concat(ds.train_batch(0), ds.train_batch(1), ...), int32 [n, T+1]."""
  out, have, i = [], 0, 0
  while have < n:
    x = np.asarray(ds.train_batch(i))
    out.append(x)
    have += x.shape[0]
    i += 1
  return np.concatenate(out)[:n].astype(np.int32)


def anisotropy_positions(n_positions: int, n: int, seed: int) -> np.ndarray:
  """Sorted flat positions of the eval grid used for anisotropy (all for n=0 or n >= total)."""
  if n == 0 or n >= n_positions:
    return np.arange(n_positions)
  return np.sort(np.random.default_rng(seed).choice(n_positions, size=n, replace=False))


@dataclasses.dataclass
class Samples:
  """The fixed samples of one analysis: ``ev`` (evaluation windows [N_s, T+1] or None),
  ``tr`` (collapse train windows or None), ``t_len`` = T, ``n_eval`` (windows for the
  loss, anisotropy and NC4), the anisotropy positions and ``info`` (their description,
  written to metrics.json)."""

  ev: np.ndarray | None
  tr: np.ndarray | None
  t_len: int
  n_eval: int
  aniso_pos: np.ndarray
  info: dict

  @property
  def val_y(self):
    """Next tokens of the first ``n_eval`` evaluation windows (NC4), flat."""
    return None if self.ev is None else self.ev[:self.n_eval, 1:].reshape(-1)

  @property
  def tr_y(self):
    return None if self.tr is None else self.tr[:, 1:].reshape(-1)


def build(cfg, workdir, settings: Settings, dataset=None) -> Samples:
  """The samples of ``settings`` (data is read only when a group needs it); ``dataset``: an
  object with ``eval_batches(n)``, ``train_batch(i)`` and ``vocab_size`` instead of the run's
  data config."""
  ev = tr = None
  mc = cfg.model
  if settings.needs_data:
    tc = cfg.train
    ds = dataset if dataset is not None else make_dataset(
        cfg.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size, seed=tc.data_seed,
        workdir=str(workdir), process_index=0, process_count=1)
    if ds.vocab_size > mc.vocab_size:
      tok = getattr(ds, "tokenizer_path", None)
      raise ValueError(
          f"the data's vocabulary ({ds.vocab_size} tokens{f', tokenizer {tok}' if tok else ''}) "
          f"exceeds the model's (model.vocab_size={mc.vocab_size}): ids >= {mc.vocab_size} "
          "cannot be embedded. Tokenise with the model's own tokenizer (e.g. "
          f"data.options.tokenizer=.../tokenizer.json) or a vocabulary that fits")
    check_sample_sizes(ds, cfg, settings)
    ev = eval_sample(ds, settings.sample_sequences)
    if settings.has("collapse"):
      tr = train_sample(ds, settings.collapse_sequences)
  t_len = cfg.train.seq_len if ev is None else ev.shape[1] - 1
  n_eval = settings.eval_sequences
  aniso_pos = anisotropy_positions(n_eval * t_len, settings.anisotropy_tokens, settings.seed)
  info = describe(cfg, settings, dataset, t_len, aniso_pos)
  return Samples(ev, tr, t_len, n_eval, aniso_pos, info)


def check_sample_sizes(ds, cfg, settings: Settings) -> None:
  """Refuse a sample the data cannot give without repeating windows (before any is built): the
  evaluation sample from the validation split, the collapse sample from the train split."""
  info, name = ds.info() if hasattr(ds, "info") else {}, getattr(ds, "name", "the data")
  asks = [(info.get("n_val_windows"), settings.sample_sequences,
           f"the token file {info.get('tokens_val_path') or info.get('tokens_path')}"
           if info.get("source") == "tokens" else f"the validation split of {name!r}",
           f"max of --eval_sequences={settings.eval_sequences}, --cka_sequences="
           f"{settings.cka_sequences}"),
          (info.get("n_train_windows") if settings.has("collapse") else None,
           settings.collapse_sequences, f"the train split of {name!r}", "--collapse_sequences")]
  for have, want, where, flags in asks:
    if have is not None and have < want:
      raise ValueError(
          f"{where} holds {have} windows of T+1={cfg.train.seq_len + 1} tokens, fewer than "
          f"the {want} the analysis samples ({flags}); pass smaller values or more tokens "
          "(windows are never repeated)")


def describe(cfg, settings: Settings, dataset, t_len: int, aniso_pos) -> dict:
  """The samples' sizes and sources (metrics.json ``samples``)."""
  n_eval, n_cka = settings.eval_sequences, settings.cka_sequences
  cka_on, coll = settings.has("cka"), settings.has("collapse")
  return {
      "data": {"source": cfg.data.source, "data_seed": cfg.train.data_seed,
               **({"tokens_path": cfg.data.options.path}
                  if isinstance(cfg.data.options, TokensOptions) else {}),
               "batch_size": cfg.train.batch_size,
               "dataset": "sbjax.data.make_dataset" if dataset is None else type(dataset).__name__,
               "eval_split": "validation", "collapse_split": "train"},
      "seq_len": t_len, "eval_sequences": n_eval, "eval_tokens": n_eval * t_len,
      "sample_sequences_fetched": settings.sample_sequences,
      "anisotropy_tokens": int(aniso_pos.size) if settings.has("anisotropy") else 0,
      "cka_sequences": n_cka if cka_on else 0,
      "cka_samples_per_layer": ((n_cka if settings.cka_tokens == "last" else n_cka * t_len)
                                if cka_on else 0),
      "collapse_train_sequences": settings.collapse_sequences if coll else 0,
      "collapse_train_tokens": settings.collapse_sequences * t_len if coll else 0,
      "nc4_tokens": n_eval * t_len if coll else 0,
  }
