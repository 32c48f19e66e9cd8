"""The library's command-line tools (after ``studies`` in the one-way flow; nothing here
imports ``experiments``): ``train``, ``analyze``, ``convert``, ``sweep``, ``reproduce`` (the
runner; the paper experiments' registry is ``experiments/reproduce.py``), and ``common``
(multi-host start-up, one-line errors). ``python -m sbjax.cli.X`` runs one; ``python -m experiments.X`` and the console
scripts (``sbjax-train``, ...) are the same programs."""

from sbjax._extras import require

require("sbjax.cli")
