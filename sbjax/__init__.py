"""sbjax: the softmax bottleneck, neural collapse and layer convergence in small LMs, in JAX.

Import the parts you need: ``sbjax.metrics`` (pure jax.numpy), ``sbjax.model``,
``sbjax.heads``, ``sbjax.data``, ``sbjax.train``. Importing ``sbjax`` itself is cheap.
"""

__version__ = "0.1.0"
