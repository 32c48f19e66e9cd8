"""The CPU suite's XLA flags suit the installed jaxlib (an unknown flag stops XLA at start-up)."""

import jaxlib

from tests._xla import DRY_XLA_FLAGS, TEST_XLA_FLAGS, jaxlib_before

INSTALLED = tuple(int(x) for x in jaxlib.__version__.split(".")[:2])


def test_legacy_emitters_flag_only_before_jaxlib_0_11():
  major, minor = INSTALLED
  assert not jaxlib_before(major, minor) and not jaxlib_before(0, 0)
  assert jaxlib_before(major, minor + 1) and jaxlib_before(major + 1, 0)
  assert ("--xla_cpu_use_fusion_emitters=false" in DRY_XLA_FLAGS.split()) == (INSTALLED < (0, 11))
  assert "--xla_backend_optimization_level=0" in DRY_XLA_FLAGS.split()
  assert set(DRY_XLA_FLAGS.split()) <= set(TEST_XLA_FLAGS.split())
