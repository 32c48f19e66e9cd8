"""sbjax: the softmax bottleneck, neural collapse and layer convergence in small LMs, in JAX.

Import the parts you need: ``sbjax.metrics`` (pure jax.numpy; ``pip install sbjax``),
``sbjax.model``, ``sbjax.heads``, ``sbjax.data``, ``sbjax.train`` (``pip install
'sbjax[train]'``). Importing sbjax changes nothing in the host program: the command-line
entry points (``sbjax.cli.common.run_script``) set the host allocator
(``SBJAX_KEEP_HOST_MEMORY=1``, ``sbjax.hostmem``) and drop the dependencies' expected notes
from the log (``sbjax.lognotes``).
"""

__version__ = "0.1.0"
