"""sbjax: the softmax bottleneck, neural collapse and layer convergence in small LMs, in JAX.

Import the parts you need: ``sbjax.metrics`` (pure jax.numpy), ``sbjax.model``,
``sbjax.heads``, ``sbjax.data``, ``sbjax.train``. Importing ``sbjax`` itself is cheap; it
sets the host allocator to keep freed memory (``sbjax.hostmem``: a CPU step's temporaries are
not page-faulted in again each step; ``SBJAX_KEEP_HOST_MEMORY=0`` turns this off). It does so
first, before JAX or numpy start threads.
"""

from sbjax import hostmem

hostmem.keep_freed_host_memory()

__version__ = "0.1.0"
