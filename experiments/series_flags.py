"""The flags of an experiment's series mode (``--series=WORKDIR``: analyse the checkpoints of
an imported series or a run on given data, no training), shared by ``experiments.collapse``
and ``experiments.saturation``; spelled as ``experiments.analyze``'s (``--tokens``,
``--data.KEY=VALUE``, ``--allow_duplicates``, ``--steps``). Not importable together with
``experiments.analyze`` (absl flag names are global)."""

from __future__ import annotations

from absl import flags

SERIES = flags.DEFINE_string("series", "", "analyse the checkpoints of this workdir (an imported "
                             "series, experiments.convert --from_hf, or a run) instead of "
                             "running the preset; needs --tokens or --data.* for an import")
TOKENS = flags.DEFINE_string("tokens", "", "series: measure on these tokens, an integer .npy "
                             "[n, T+1] (rows set T) or a flat .bin, ids in the model's vocabulary")
DATA = flags.DEFINE_multi_string("data_override", [], "series: a data override KEY=VALUE "
                                 "(repeatable), usually spelled --data.KEY=VALUE")
ALLOW_DUP = flags.DEFINE_bool("allow_duplicates", False, "series: analyse revisions that "
                              "duplicate another's weights (import.json duplicate_of)")
STEPS = flags.DEFINE_list("steps", [], "series: only these checkpoint steps (default: all)")
EVAL_SEQ = flags.DEFINE_integer("eval_sequences", 64, "series: validation windows (loss, "
                                "anisotropy, NC4)")


def data_dot_flags(argv: list) -> list:
  """``--data.KEY=VALUE`` as ``--data_override=KEY=VALUE`` (absl has no dotted flag names)."""
  return [f"--data_override={a[len('--data.'):]}" if a.startswith("--data.") else a
          for a in argv]


def steps() -> tuple:
  return tuple(int(s) for s in STEPS.value)
