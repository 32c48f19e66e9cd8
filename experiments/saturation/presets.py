"""Presets of the saturation width sweep: dotted Config overrides of the ``planted`` base (model,
training, data source) and the knobs that are not Config fields (widths, fit, measurement)."""

from __future__ import annotations

import dataclasses

from sbjax.experiment import Preset


@dataclasses.dataclass(frozen=True)
class Knobs:
  widths: tuple
  fit_min_width: int  # the scaling law is fitted on widths >= this
  head_dim: int = 32  # heads = max(1, d // head_dim)
  eval_sequences: int = 64  # the fixed validation windows every checkpoint is measured on
  anisotropy_tokens: int = 1024
  rise_tol: float = 0.01  # nats (the naive test: final - best > rise_tol)
  smooth: int = 10  # train-loss moving average, in log records
  # the paired-bootstrap rise (rise.py) over the eval_sequences fixed windows
  rise_threshold: float = 0.02  # nats above the running minimum, after rise_after of training
  rise_after: float = 0.3
  n_boot: int = 1000  # rise CI and the gap CI of the widths below the fit


# the cpu preset's model, training and data in dotted keys over ``planted``
CPU = {"model.vocab_size": 0, "model.n_layers": 2, "train.steps": 1200, "train.batch_size": 16,
       "train.seq_len": 64, "train.lr": 3e-3, "train.warmup_steps": 50, "train.ckpt_every": 100,
       "train.eval_batches": 4, "train.ckpt_log_spaced": True, "data.source": "text",
       "data.options.vocab_size": 1024}


def overrides(o: dict) -> dict:
  """CPU with the preset's keys ``o`` over it, and the keys derived from them: model.max_len =
  train.seq_len, an eval at every regular checkpoint (log-spaced checkpoints 0, 1, 2, 4, ...,
  512 besides), ~200 log records per run."""
  o = {**CPU, **o}
  return {**o, "model.max_len": o["train.seq_len"], "train.eval_every": o["train.ckpt_every"],
          "train.log_every": max(1, o["train.steps"] // 200)}


PRESETS: dict[str, Preset[Knobs]] = {
    # one width, 20 steps (checkpoints 0, 1, 2, 4, 8, 16, 20): too few widths for the fit (NaN);
    # the step of saturation_planted's test and test-e1 d8 (one program serves all three)
    "test": Preset("planted", overrides({"model.n_layers": 1, "data.options.vocab_size": 64,
                                         "train.seq_len": 16, "train.steps": 20, "train.lr": 0.1,
                                         "train.batch_size": 4, "train.warmup_steps": 0,
                                         "train.ckpt_every": 20, "train.eval_batches": 1}),
                   Knobs(widths=(8,), fit_min_width=8, eval_sequences=8,
                         anisotropy_tokens=64, smooth=1, n_boot=100)),
    # three widths, all in the fit (three parameters), so no gap is measured
    "quick": Preset("planted", overrides({"model.n_layers": 1, "data.options.vocab_size": 96,
                                          "train.seq_len": 32, "train.batch_size": 8,
                                          "train.steps": 32, "train.warmup_steps": 4,
                                          "train.ckpt_every": 16, "train.eval_batches": 2}),
                    Knobs(widths=(8, 16, 32), fit_min_width=8, eval_sequences=16,
                          anisotropy_tokens=128, smooth=2, n_boot=200)),
    # eight widths, six of them (>= 48) in the fit; ~1.2M tokens per run (1094 s of CPU)
    "cpu": Preset("planted", overrides({}), Knobs(widths=(16, 32, 48, 64, 96, 128, 192, 256),
                                                 fit_min_width=48)),
    # Pythia-like: depth 6, V = 50304, 2048-token windows, 0.5M tokens per step (~15B tokens)
    "tpu": Preset("planted", overrides({"model.n_layers": 6, "data.options.vocab_size": 50304,
                                        "train.seq_len": 2048, "train.batch_size": 256,
                                        "train.steps": 30_000, "train.warmup_steps": 300,
                                        "train.lr": 1e-3, "train.ckpt_every": 1000,
                                        "train.eval_batches": 8, "data.source": "tfds",
                                        "data.options.name": "lm1b"}),
                  Knobs(widths=(128, 256, 512, 768, 1024), fit_min_width=256, head_dim=64,
                        eval_sequences=256, anisotropy_tokens=8192, rise_tol=0.005, smooth=20)),
}
