"""head_rank's presets (werror_loss's too): dotted Config overrides of the sbjax preset ``tiny``
(``sbjax.studies.head_rank.overrides``: the text trunk, data and schedule) and the sweep's knobs
(``sbjax.studies.head_rank.Knobs``: ranks, LR grids, mos heads)."""

from sbjax.experiment import Preset
from sbjax.studies.head_rank import BASE, TINY, Knobs, overrides

PRESETS: dict[str, Preset[Knobs]] = {
    # the test suite: the tiny trunk, 6 steps, rank 1 besides the dense head (r = d)
    "test": Preset(BASE, overrides({**TINY, "name": "head_rank-test", "train.steps": 6,
                                    "train.eval_batches": 1}),
                   Knobs(ranks=(1,), lrs=(3e-3, 3e-2), head_lrs=(3e-2,), head_steps=4)),
    # smoke runs: seconds per run, mostly XLA compilation
    "quick": Preset(BASE, overrides({**TINY, "name": "head_rank-quick", "train.steps": 12,
                                     "train.eval_batches": 2}),
                    Knobs(ranks=(1,), lrs=(3e-3, 3e-2), head_lrs=(3e-2,), head_steps=8)),
    # Trade-offs for <= 20 min on 2 cores: 400 steps (~0.4 epochs of Shakespeare), 2-point
    # LR grids, 150 head-only steps for (a), mos heads with one learning rate. A grid of
    # {3e-3, 1e-2} was won by 1e-2 at every rank, so the grid sits one step up.
    "cpu": Preset(BASE, overrides({}),
                  Knobs(lrs=(1e-2, 2e-2), head_lrs=(1e-2, 3e-2), head_steps=150,
                        mos_mix=(1, 2), mos_lrs=(1e-2,))),
    # Pythia-410m shape: ranks 1..1024; give it a corpus larger than Shakespeare with --data
    "tpu": Preset(BASE, overrides({"name": "head_rank-tpu", "data.options.vocab_size": 8192,
                                   "model.d_model": 1024, "model.n_layers": 24,
                                   "model.n_heads": 16, "model.max_len": 512,
                                   "model.remat": "full", "train.steps": 20_000,
                                   "train.batch_size": 256, "train.seq_len": 512,
                                   "train.warmup_steps": 1000, "train.eval_batches": 32}),
                  Knobs(lrs=(3e-4, 1e-3, 3e-3), head_lrs=(1e-3, 3e-3, 1e-2), head_steps=5000,
                        mos_mix=(1, 2, 4), mos_protocols=("a", "b"))),
}
