"""The one stderr line that says what data a run trains on when the command line did not
choose it (a named config without any ``--config.data.*`` override: its data section)."""

from __future__ import annotations

from sbjax.config import Config
from sbjax.data import sources

_HOW = ("choose the data with --config.data.source=text --config.data.options.path=DIR (a "
        "directory of .txt files), or data.source=tokens (token files) or tfds")


def data_note(config_spec: str | None, cfg: Config, override_keys) -> str | None:
  """The line for a run of ``--config=config_spec`` with these override keys, or None when the
  data was chosen: a config file (.json, .py) or a ``data`` / ``data.*`` override."""
  spec = config_spec or ""
  if spec.endswith((".json", ".py")) or ".py:" in spec:
    return None
  if any(k == "data" or k.startswith("data.") for k in override_keys):
    return None
  source = sources.get(cfg.data.source)
  if source.synthetic:
    what = "a planted language generated from the config, synthetic tokens, no text"
  else:
    path = getattr(cfg.data.options, "path", "") or "its default corpus"
    what = f"{path}"
  return (f"data: --config={spec or 'tiny'} trains on data.source={cfg.data.source} ({what}), "
          f"the config's default; {_HOW}")
