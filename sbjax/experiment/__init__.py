"""Experiments as declarations (``declare``) and the one runner (``runner.run``), the suite of
several into one report (``suite``) and their command line (``sbjax.cli.experiment``)."""

from sbjax._extras import require

require("sbjax.experiment")

from sbjax.experiment.context import Context, digest
from sbjax.experiment.declare import Experiment, Group, Preset

__all__ = ["Context", "Experiment", "Group", "Preset", "digest"]
