"""The wheel's package list (the metadata is in pyproject.toml).

``experiments/`` (the paper experiments) stays a top-level folder of the source tree
(``python -m experiments.X`` from a checkout; the tests import ``experiments.*``). The wheel
installs it as ``sbjax_experiments`` (its modules import each other relatively), so installing
sbjax adds no top-level module named ``experiments``. The command-line tools are the library's
``sbjax.cli`` (console scripts ``sbjax-train``, ``sbjax-analyze``, ``sbjax-convert``);
``sbjax-reproduce`` runs the experiments' registry, ``sbjax_experiments.reproduce``.
"""

from pathlib import Path

from setuptools import find_packages, setup

HERE = str(Path(__file__).resolve().parent)
SBJAX = find_packages(HERE, include=["sbjax", "sbjax.*"])
EXPERIMENTS = ["sbjax_" + p for p in find_packages(HERE, include=["experiments", "experiments.*"])]

setup(packages=SBJAX + EXPERIMENTS, package_dir={"sbjax_experiments": "experiments"})
