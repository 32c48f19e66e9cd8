"""The data an analysis measures on: the run's own, or tokens / data overrides, never
synthetic data silently.

* ``--tokens=FILE`` (``Settings.tokens``): the samples are windows of FILE in file order (an
  integer ``.npy`` [n, T+1], whose rows set T, or a flat ``.bin`` cut at train.seq_len).
* ``--data.KEY=VALUE`` (``Settings.data``): ``source``, ``seq_len`` and the fields of the
  source's options (``--data.path`` is ``data.options.path``), by the one override path.
* An imported workdir whose config still holds synthetic data is refused when a metric group
  reads data (a pretrained model on planted tokens gives meaningless numbers); a text corpus
  for an import is tokenised with the model's own tokenizer, never a new one.

With overrides, data files (tokenizer copy, token caches) go to ``OUT/data``, not the workdir.
"""

from __future__ import annotations

import dataclasses

from sbjax import overrides
from sbjax.config import Config
from sbjax.convert import integrity
from sbjax.data import sources as data_sources
from sbjax.data import tokens as tokens_lib
from sbjax.paths import upath


def is_import(workdir) -> bool:
  """True for a workdir written by ``experiments.convert --from_hf`` (its import record)."""
  return (upath(workdir) / integrity.RECORD).is_file()


def parse_overrides(items) -> dict:
  """{"data": {dotted key: text}, "seq_len": int | None} of ``KEY=VALUE`` strings: KEY
  ``source``, ``seq_len``, or a field of the source's options (``path`` or ``options.path``)."""
  data, seq_len = {}, None
  for item in items:
    key, sep, value = str(item).partition("=")
    key = key.strip().removeprefix("data.")
    if not sep:
      raise ValueError(f"data override {item!r}: expected KEY=VALUE (e.g. source=text)")
    if key == "seq_len":
      try:
        seq_len = int(value)
      except ValueError:
        raise ValueError(f"data override {item!r}: seq_len is an integer") from None
    else:
      data["data." + (key if key == "source" or key.startswith("options.")
                      else "options." + key)] = value
  return {"data": data, "seq_len": seq_len}


def refusal(workdir, source: str) -> str:
  return (f"{workdir} is an imported checkpoint series (experiments.convert --from_hf) and its "
          f"config.json still holds the synthetic default data (data.source={source!r}): "
          "measuring a pretrained model on planted tokens gives meaningless numbers, so "
          "nothing was analysed. Pass --tokens=FILE (an integer .npy [n, T+1] of token ids "
          "from the model's tokenizer, or a flat .bin) or --data.source=text --data.path=DIR "
          "--data.tokenizer=tokenizer.json")


def _tokens_file(tokens: str, cfg: Config, dtype) -> tuple:
  """(the data config of ``--tokens=FILE``, its windows' T)."""
  mc = cfg.model
  arr = tokens_lib.read_tokens(tokens, dtype)
  tokens_lib.check_ids(arr, mc.vocab_size, f"--tokens={tokens}: ", "model.vocab_size")
  t_len = arr.shape[1] - 1 if arr.ndim == 2 else cfg.train.seq_len
  if t_len > mc.max_len:
    raise ValueError(f"--tokens={tokens}: rows of {t_len + 1} tokens make windows of "
                     f"T={t_len} > the model's max_len={mc.max_len}; cut the rows to at most "
                     f"{mc.max_len + 1} tokens")
  return {"data.source": "tokens", "data.options.path": str(tokens),
          "data.options.val_path": str(tokens), "data.options.vocab": mc.vocab_size}, t_len


def _imported_data(cfg: Config, workdir) -> Config:
  """The data of an imported workdir: never synthetic, and tokenised with its tokenizer."""
  data = cfg.data
  source = data_sources.get(data.source)
  if source.synthetic:
    raise ValueError(refusal(workdir, data.source))
  if source.needs_tokenizer and not data.options.tokenizer:
    imported = upath(workdir) / "tokenizer.json"  # copied from the series by the import
    if not imported.is_file():
      raise ValueError(
          f"{workdir} is an imported model: a text corpus must be tokenised with the "
          "model's own tokenizer (a newly trained one's ids would not match its "
          "embeddings), and the import holds none. Pass --data.tokenizer=tokenizer.json")
    return cfg.replace(data=data.replace_options(tokenizer=str(imported)))
  return cfg


def effective_config(cfg: Config, workdir, tokens: str = "", data_items=(),
                     needs_data: bool = True) -> tuple:
  """(the config the analysis measures with, a content key of the token file or None,
  overridden?); ValueError for an imported workdir left on synthetic data."""
  over = parse_overrides(data_items)
  train, key, data = cfg.train, None, {}
  if tokens:
    dtype = over["data"].get("data.options.dtype", "")  # else the file's name declares it
    data, t_len = _tokens_file(tokens, cfg, dtype)
    train = dataclasses.replace(train, seq_len=t_len, batch_size=1)
    key = tokens_lib.file_identity(tokens)
  if data or over["data"]:
    cfg = overrides.apply(cfg.replace(train=train), {**data, **over["data"]}, parse=True)
    train = cfg.train
    if over["data"] and cfg.data.source == "tokens" and cfg.data.options.path:
      key = tokens_lib.file_identity(cfg.data.options.path)
      train = dataclasses.replace(train, batch_size=1)
  if over["seq_len"]:
    train = dataclasses.replace(train, seq_len=over["seq_len"])
  overridden = bool(tokens or over["data"] or over["seq_len"])
  cfg = cfg.replace(train=train)
  if needs_data and is_import(workdir):
    cfg = _imported_data(cfg, workdir)
  return cfg, key, overridden
