"""Hugging Face import/export for GPT-NeoX (Pythia) and GPT-Neo checkpoints.

- ``import_hf(dir)`` -> ``(ModelConfig, params)`` from config.json + safetensors
  (single file or sharded); pickled ``.bin`` weights only with ``allow_pickle=True``.
- ``export_hf(cfg, params, dir)`` writes config.json + model.safetensors that
  ``transformers.AutoModelForCausalLM.from_pretrained`` loads (GPT-NeoX for rotary
  configs, GPT-Neo for learned-position ones; ``export_problems`` says why not).
- A series of revisions (``stepN`` directories, or an HF cache) is found and selected by
  ``revisions`` and checked by ``integrity``; ``sbjax.cli.convert`` imports it into a workdir.

Nothing here imports torch or transformers (torch only for allowed pickles, in
``torch_pickle``: without torch that is one error naming the package to install).
"""

from sbjax._extras import require

require("sbjax.convert")

from sbjax.convert.hf_export import export_hf, export_problems, hf_config, hf_tensors
from sbjax.convert.hf_import import (full_config, import_hf, load_hf_tensors,
                                     model_config_from_hf, read_hf_config)

__all__ = ["export_hf", "export_problems", "hf_config", "hf_tensors", "full_config", "import_hf",
           "load_hf_tensors", "model_config_from_hf", "read_hf_config"]
