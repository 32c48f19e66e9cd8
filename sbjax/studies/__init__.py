"""Per-paper code shared by the experiments: exact rank floors, head-rank sweeps, n-gram
counts and floors, W-errors, head fits and FLOPs, the text corpus and statistics. (``sbjax.analysis``
analyses the checkpoints of one run.)"""

from sbjax._extras import require

require("sbjax.studies")
