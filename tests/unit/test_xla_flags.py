"""tests/_xla.py: the CPU suite's XLA flags suit the installed jaxlib. jaxlib 0.11 removed
--xla_cpu_use_fusion_emitters and XLA exits at start-up on an unknown flag in XLA_FLAGS, so the
flag is passed only to an older jaxlib."""

import os
import subprocess
import sys

import jaxlib
import pytest

from tests._xla import DRY_XLA_FLAGS, TEST_XLA_FLAGS, jaxlib_before

INSTALLED = tuple(int(x) for x in jaxlib.__version__.split(".")[:2])


def test_jaxlib_before_compares_the_installed_version():
  major, minor = INSTALLED
  assert not jaxlib_before(major, minor)
  assert jaxlib_before(major, minor + 1) and jaxlib_before(major + 1, 0)
  assert not jaxlib_before(0, 0)


def test_legacy_emitters_flag_only_before_jaxlib_0_11():
  legacy = "--xla_cpu_use_fusion_emitters=false"
  assert (legacy in DRY_XLA_FLAGS.split()) == (INSTALLED < (0, 11))
  assert set(DRY_XLA_FLAGS.split()) <= set(TEST_XLA_FLAGS.split())
  assert "--xla_backend_optimization_level=0" in DRY_XLA_FLAGS.split()


@pytest.mark.e2e
def test_the_installed_xla_accepts_every_test_flag():
  """A fresh JAX with XLA_FLAGS=TEST_XLA_FLAGS starts its CPU backend and computes."""
  env = {**os.environ, "XLA_FLAGS": TEST_XLA_FLAGS, "JAX_PLATFORMS": "cpu"}
  code = "import jax.numpy as jnp; print(int(jnp.arange(4).sum()))"
  run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
  assert run.returncode == 0, run.stderr[-2000:]
  assert run.stdout.strip() == "6"
