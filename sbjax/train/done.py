"""The one "already trained?" rule: a run is finished when ``WORKDIR/DONE`` exists.

``DONE`` is written (atomically) after a run reached its last step with a final evaluation;
it holds the run's summary and config. Finished runs are read back, never retrained; a
run with checkpoints short of its steps is resumed by training it again. A finished run asked
for with another config (another corpus, lr, model, ...) is refused in one line
(``check_same``): only settings that change no number may differ.
"""

from __future__ import annotations

import json
from sbjax.atomic import atomic_write_text
from sbjax.paths import upath

DONE = "DONE"
SUMMARY_KEYS = ("step", "eval_loss", "eval_acc", "n_params", "loss")


def finished(workdir) -> dict | None:
  """The summary of a finished run in ``workdir``, or None if it is not finished."""
  try:
    return json.loads((upath(workdir) / DONE).read_text())["summary"]
  except (OSError, ValueError, KeyError, TypeError):
    return None


# settings that change no number of a finished run (kernels, logging, the mesh, its name)
SAME_RESULTS = {"name", "mesh", "model.loss_chunk", "model.attn_impl", "train.log_every",
                "train.async_checkpoint"}


def _leaves(d: dict, prefix: str = "") -> dict:
  out = {}
  for k, v in d.items():
    key = f"{prefix}{k}"
    out.update(_leaves(v, key + ".") if isinstance(v, dict) else {key: v})
  return out


def check_same(workdir, config: dict) -> None:
  """Refuse a finished run whose DONE config differs from ``config`` in a setting that changes
  its numbers (``model.vocab_size`` 0 means "from the data" and matches any)."""
  from sbjax.config import Config  # noqa: PLC0415 - deferred: done is read by the config's callers

  saved = json.loads((upath(workdir) / DONE).read_text()).get("config")
  if saved is None:
    return
  a, b = _leaves(Config.from_dict(saved).to_dict()), _leaves(config)
  diff = [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b))
          if a.get(k) != b.get(k) and k.split(".")[0] not in SAME_RESULTS and k not in SAME_RESULTS
          and not (k == "model.vocab_size" and b.get(k) == 0)]
  if diff:
    raise ValueError(f"{workdir} holds a finished run of another configuration ({'; '.join(diff)});"
                     " use another output folder, or delete its DONE to train it again")


def mark_finished(workdir, summary: dict, config: dict) -> dict:
  """Write ``WORKDIR/DONE`` with the summary's main keys and the config; returns them."""
  keep = {k: summary[k] for k in SUMMARY_KEYS if k in summary}
  atomic_write_text(upath(workdir) / DONE,
                    json.dumps({"summary": keep, "config": config}, indent=1, default=float))
  return keep
