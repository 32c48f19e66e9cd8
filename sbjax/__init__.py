"""sbjax: the softmax bottleneck, neural collapse and layer convergence in small LMs, in JAX.

Import the parts you need: ``sbjax.metrics`` (pure jax.numpy), ``sbjax.model``,
``sbjax.heads``, ``sbjax.data``, ``sbjax.train``. Importing ``sbjax`` itself is cheap. With
``SBJAX_KEEP_HOST_MEMORY=1`` in the environment it first sets the host allocator to keep freed
memory (``sbjax.hostmem``: a CPU step's temporaries are not page-faulted in again each step,
for about twice the resident memory), before JAX or numpy start threads; off by default.
"""

from sbjax import hostmem, lognotes

hostmem.keep_freed_host_memory()
lognotes.install()  # orbax's read-only and TFDS's custom-config notes: expected, dropped

__version__ = "0.1.0"
