"""The planted experiment's presets: config overrides of the sbjax preset ``planted-knee``
plus the knobs that are not Config fields (head ranks, the mixture runs, tolerances)."""

from __future__ import annotations

import dataclasses
from sbjax.studies.presets import Preset, pick_preset

BASE = "planted-knee"  # sbjax/configs.py; part 2 switches its data to the planted mixture


@dataclasses.dataclass(frozen=True)
class Knobs:
  ranks: tuple  # head ranks of part 1
  measure_batches: int = 32  # validation batches of the final measurement
  tol: float = 0.05  # knee tolerance (nats)
  margin: float = 0.02  # r <= k/2: loss - H >= floor gap - margin
  floor_gtol: float = 1e-6
  floor_max_iter: int = 3000
  floor_random: int = 4  # random small-scale starts per rank of the floor fits (sbjax.studies.floor)
  floor_wide: int = 2  # random wide starts per rank of the floor fits (floor.N_WIDE)
  # part 2: (label, head, d_model, n_mix); lowrank ranks are matched to the first mos run
  mix_m: int = 4
  mix_k: int = 2
  mix_runs: tuple = (("mos", "mos", 16, 4), ("lowrank", "lowrank", 64, 0),
                     ("lowrank-d16", "lowrank", 16, 16))
  mix_steps: int = 1500
  # model.init_std of the mos runs (the lowrank runs keep the knee part's 0.02). At 0.02 a
  # d=16 MoS head starts with its M tanh projections (pre-activations ~0.02·√d) and shared W
  # nearly identical, so the prior collapses onto one component and the tanh saturates: the
  # cpu run ended 0.50 nats above H; at 0.2 (≈ GPT-2's 0.02·√(768/d)) it ends 0.10 above H.
  mos_init_std: float = 0.2
  # the mixture language and the MoS shape (issue 18): source planted_mix (independent output
  # embeddings per component) or planted_mos (one shared Y, rotations R_m; a MoS head with
  # mos_dim = k+1 and linear components is exact); mix_alpha 0 = part 1's alpha
  mix_source: str = "planted_mix"
  mix_alpha: float = 0.0
  mix_gate: str = "uniform"
  mos_dim: int = 0  # model.mos_dim of the mos runs (0 = d_model)
  mos_act: str = "tanh"  # model.mos_act of the mos runs
  # train.seed (the init; the data stream is shared) of every part-2 run: each (label, seed) is one run, labelled
  # "label" for seed 0 and "label-s<seed>" otherwise; the report gives the seed spread
  mix_seeds: tuple = (0,)
  # train.objective of every part-2 run: sampled (−log q of the sampled next token) or expected
  # (the Rao-Blackwellised loss against the language's exact P(.|c); sbjax.losses.expected_loss)
  mix_objective: str = "sampled"
  # the learning rates of part 2: every arm is trained at each lr and seed, as ONE population
  # per arm (sbjax.train.population: one vmapped step); the report takes each arm's best lr by
  # its mean gap over seeds. () = train.lr alone (and one run per seed when there is one lr)
  mix_lrs: tuple = ()
  mix_batch: int = 0  # train.batch_size of part 2 (0 = part 1's)


def overrides(vocab=256, k=8, alpha=4.0, d_model=64, n_layers=1, n_heads=4, steps=1500, batch=32,
              seq_len=64, lr=1e-2, warmup=50, train_tokens=2_000_000, val_tokens=131_072) -> dict:
  """The dotted Config overrides of part 1 (a planted language of V=vocab, planted rank k);
  evaluation and the checkpoint at the last step, ten log lines per run."""
  return {"model.d_model": d_model, "model.n_layers": n_layers, "model.n_heads": n_heads,
          "model.max_len": max(seq_len, 64), "model.vocab_size": vocab,
          "data.planted_vocab": vocab, "data.planted_rank": k, "data.planted_alpha": alpha,
          "data.planted_train_tokens": train_tokens, "data.planted_val_tokens": val_tokens,
          "train.steps": steps, "train.batch_size": batch, "train.seq_len": seq_len,
          "train.lr": lr, "train.warmup_steps": warmup, "train.eval_every": steps,
          "train.ckpt_every": steps, "train.log_every": max(1, steps // 10)}


# overrides: dotted Config overrides of part 1 (part 2 derives its own from them)
PRESETS: dict[str, Preset[Knobs]] = {
    # the test suite and `reproduce --preset=test`: V=32, k=3, d=16, 30 steps, 2 knee runs and
    # 2 mixture populations of 2 seeds on the Rao-Blackwellised loss
    "test": Preset(BASE, overrides(vocab=32, k=3, d_model=16, n_heads=2, steps=30, batch=8,
                                   seq_len=16, warmup=5, train_tokens=20_000, val_tokens=4096),
                   Knobs(ranks=(1, 16), measure_batches=2, mix_m=2, mix_k=2,
                         mix_runs=(("mos", "mos", 16, 2), ("lowrank", "lowrank", 16, 0)),
                         mix_steps=30, mix_objective="expected", mix_seeds=(0, 1))),
    # `reproduce --quick`: 7 ranks, 600 steps each; part 2 on the planted MoS language of the
    # cpu preset (V=256, M=8, k=4, alpha=8): MoS with M'=16 components of e=k+1=5, linear, vs
    # the parameter-matched lowrank (r=11), both at d=16, trained on the Rao-Blackwellised
    # loss at lr 0.1 (the cpu preset's grid picks 0.1 for both heads), batch 8, two init seeds
    # each (one population per head)
    "quick": Preset(BASE, overrides(steps=600),
                    Knobs(ranks=(1, 2, 4, 8, 9, 16, 64), measure_batches=16,
                          mix_m=8, mix_k=4, mix_source="planted_mos", mix_alpha=8.0,
                          mos_dim=5, mos_act="linear", mix_seeds=(0, 1),
                          mix_objective="expected", mix_lrs=(0.1,), mix_batch=8,
                          mix_runs=(("mos", "mos", 16, 16), ("lowrank", "lowrank", 16, 0)),
                          mix_steps=1000)),
    # part 2 on the planted MoS language (V=256, M=8, k=4, alpha=8), every head at d=16: MoS
    # with M'=16 linear components of e=k+1=5 (over-complete in components: at the issue's
    # guide language, M=8, k=8, the exact-size head's fits stop 0.046 above H; BUILD_NOTES),
    # the parameter-matched lowrank (r=11), r=d=16 and a parameter-matched sigsoftmax; every
    # head on the Rao-Blackwellised loss (batch 8, 1500 steps) at three learning rates and two
    # init seeds, one population per head (the report takes each head at its best lr).
    "cpu": Preset(BASE, overrides(steps=1000),
                  Knobs(ranks=(1, 2, 3, 4, 6, 8, 9, 10, 16, 32, 64), mix_steps=1500,
                        mix_m=8, mix_k=4, mix_source="planted_mos", mix_alpha=8.0,
                        mos_dim=5, mos_act="linear", mix_seeds=(0, 1),
                        mix_objective="expected", mix_lrs=(1e-2, 3e-2, 1e-1), mix_batch=8,
                        mix_runs=(("mos", "mos", 16, 16), ("lowrank", "lowrank", 16, 0),
                                  ("lowrank-d16", "lowrank", 16, 16),
                                  ("sigsoftmax", "sigsoftmax", 16, 0)))),
    # the paper's scale in spirit: a larger vocabulary and planted rank, a 2-layer d=256 model
    "tpu": Preset(BASE, overrides(vocab=1024, k=32, d_model=256, n_layers=2, n_heads=4,
                                  steps=20_000, batch=256, seq_len=128, lr=3e-3, warmup=500,
                                  train_tokens=200_000_000, val_tokens=1_048_576),
                  Knobs(ranks=(1, 2, 4, 8, 16, 24, 30, 32, 33, 34, 36, 40, 48, 64, 128, 256),
                        measure_batches=32, mix_m=8, mix_k=16,
                        mix_runs=(("mos", "mos", 256, 8), ("lowrank", "lowrank", 512, 0),
                                  ("dense", "lowrank", 512, 512)),
                        mix_steps=20_000, mos_init_std=0.02)),
}


def get_preset(name) -> Preset:
  return pick_preset(PRESETS, name, "planted")
