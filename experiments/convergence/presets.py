"""Presets of the convergence experiment: Config overrides of the ``tiny`` base (model shape,
training with dense checkpoints, data source), the per-width overrides, and the measurement
knobs that are not Config fields (``ConvergenceSettings`` sizes)."""

from __future__ import annotations

import dataclasses
from sbjax.studies.presets import Preset, pick_preset
from sbjax.config import TrainConfig
from sbjax.optim import steps_for_gamma


@dataclasses.dataclass(frozen=True)
class Knobs:
  widths: tuple
  per_width: dict = dataclasses.field(default_factory=dict)  # override key -> one value per width
  n_sequences: int = 128  # the fixed batch (last-token CKA)
  all_sequences: int = 32  # sequences of the all-token CKA
  grad_per: bool = True  # PER of the gradients on the fixed batch
  group_size: int = 4  # checkpoints per compiled forward
  chunk: int = 32
  per_mlp_r: int = 0  # MLP PER over the top r singular values (0: all; head_dim: the authors')


def _overrides(*, n_layers: int = 4, n_heads: int = 4, steps: int = 1000, ckpt_every: int = 50,
               batch: int = 32, seq_len: int = 64, lr: float = 2e-3, warmup: int = 50,
               source: str = "text", vocab: int = 1024, tfds_name: str = "",
               planted: tuple = (256, 8, 400_000, 16_384)) -> dict:
  """Log-spaced checkpoints 0, 1, 2, ..., 512 plus one every ckpt_every steps, one eval at
  the end. ``planted`` = (vocab, rank, train tokens, val tokens) of the planted language,
  the data of ``source=planted`` and of a text preset without a corpus."""
  pv, pr, pt, pval = planted
  return {"model.vocab_size": 0, "model.n_layers": n_layers, "model.n_heads": n_heads,
          "model.max_len": seq_len, "train.steps": steps, "train.batch_size": batch,
          "train.seq_len": seq_len, "train.lr": lr, "train.warmup_steps": warmup,
          "train.eval_every": steps, "train.eval_batches": 2,
          "train.log_every": max(1, steps // 20), "train.ckpt_every": ckpt_every,
          "train.ckpt_log_spaced": True, "data.source": source, "data.vocab_size": vocab,
          "data.tfds_name": tfds_name, "data.planted_vocab": pv, "data.planted_rank": pr,
          "data.planted_train_tokens": pt, "data.planted_val_tokens": pval}


def _gamma_overrides(target: float = 7.9, lr: float = 1e-2, batch: int = 8, seq_len: int = 64,
                     ckpt_every: int = 250) -> dict:
  """Pythia's recipe by Γ (λ = 0.1, 1% warm-up, cosine to 10%; ``sbjax.optim.steps_for_gamma``)
  on the planted mixture (V = 256, M = 4, k = 8) with fresh tokens every step."""
  tc = steps_for_gamma(TrainConfig(lr=lr, weight_decay=0.1), target)
  return _overrides(n_layers=4, steps=tc.steps, ckpt_every=ckpt_every, batch=batch,
                    seq_len=seq_len, lr=lr, warmup=tc.warmup_steps, source="planted_mix",
                    planted=(256, 8, tc.steps * batch * seq_len + 1, 16_384))


_TINY_DATA = dict(source="planted", vocab=512, planted=(64, 4, 50_000, 4096))
_TINY_KNOBS = dict(n_sequences=16, all_sequences=4, grad_per=False, group_size=8, chunk=16)

PRESETS: dict[str, Preset[Knobs]] = {
    # the test suite and `reproduce --preset=test`: quick's schedule (checkpoints 0, 1, 2, 4,
    # 8, 16, 24, 32; the tests compare steps 8, 16 and 32) for one width
    "test": Preset("tiny", _overrides(n_layers=2, n_heads=2, steps=32, ckpt_every=8, batch=8,
                                      seq_len=16, lr=3e-3, warmup=4, **_TINY_DATA),
                   Knobs(widths=(16,), **_TINY_KNOBS)),
    # `reproduce --quick`: three tiny widths on the planted language
    "quick": Preset("tiny", _overrides(n_layers=2, n_heads=2, steps=32, ckpt_every=8, batch=8,
                                       seq_len=16, lr=3e-3, warmup=4, **_TINY_DATA),
                    Knobs(widths=(16, 32, 48), **_TINY_KNOBS)),
    # <= 30 min on 2 cores: three widths, 4 layers, 1000 steps, 31 checkpoints each
    "cpu": Preset("tiny", _overrides(), Knobs(widths=(32, 64, 128))),
    # Γ like Pythia-14m/70m (7.9 weight-decay timescales: 14,377 steps at η = 1e-2, 8 x 64
    # tokens, fresh every step) on the planted mixture: 4 layers, d ∈ {16, 64}, head_dim 8,
    # MLP PER with r = head_dim (the authors' convention). Session 10: 13 min 21 s on 2 quiet
    # cores with SBJAX_KEEP_HOST_MEMORY=1 (BUILD_NOTES "convergence")
    "cpu-gamma": Preset("tiny", _gamma_overrides(),
                        Knobs(widths=(16, 64), per_width={"model.n_heads": (2, 8)},
                              grad_per=False, all_sequences=32, per_mlp_r=8)),
    # the paper's scale (Pythia-70m/160m/410m shapes); validated in tests, not run on CPU
    "tpu": Preset("tiny", _overrides(steps=20000, ckpt_every=1000, batch=256, seq_len=2048,
                                     lr=1e-3, warmup=200, source="tfds", tfds_name="lm1b",
                                     vocab=50304),
                  Knobs(widths=(512, 768, 1024),
                        per_width={"model.n_layers": (6, 12, 24), "model.n_heads": (8, 12, 16),
                                   "train.lr": (1e-3, 6e-4, 3e-4)},
                        all_sequences=8, group_size=2, chunk=8)),
}


def get_preset(name) -> Preset:
  return pick_preset(PRESETS, name, "convergence")
