"""The planted arms as an experiment of the reproduce registry (``saturation_planted``): the
reproduce presets name planted presets (``quick`` is the tiny ``test-planted``: the arms have
no smaller size than cpu's, whose five float32 arms took 832 s of CPU, BUILD_NOTES)."""

from __future__ import annotations

from pathlib import Path

from .planted_report import report_section as planted_section
from .planted_run import run_planted
from ..shared import upath

PRESETS = {"test": "test-planted", "quick": "test-planted", "cpu": "cpu-planted",
           "tpu": "tpu-planted"}


def run(out: Path, preset, *, data: str | None = None, verbose: bool = True) -> None:
  """Train, measure and summarise the arms of ``preset`` (a reproduce preset or a planted
  one). ``data`` is ignored: the planted mixture is sampled, no corpus is read (the
  ``Experiment`` protocol of ``sbjax.cli.reproduce``)."""
  del data
  run_planted(upath(out), PRESETS.get(preset, preset), verbose=verbose)


def report_section(out: Path, rel: str) -> str:
  """The planted arms' markdown section (draws the figures under ``rel``)."""
  return planted_section(out, rel)
