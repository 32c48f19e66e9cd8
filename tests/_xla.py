"""The XLA flags of the test suite (tests/conftest.py explains them), in one place for the
tests that run a subprocess without them."""

TEST_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
