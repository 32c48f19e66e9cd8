"""Stabilisation where depth matters (issue 33, item 6; experiments/convergence).

The two test-size presets run once per module, at the shapes of one compile (4 layers of width
16, V = 64): text on a generated corpus (the cpu preset's part (a) runs on Shakespeare) and the
planted language of context 2 (part (b)). Checked: the data (context 2, 4096 contexts), the
two probe batches (disjoint: their CKA differ, both are 1 at the final step),
stab_levels.csv against a numpy re-reading of the long cka.csv files at levels 0.8/0.9/0.95,
and the report section's table and paragraph against that CSV; the cpu presets' configs
(Γ 2.4 and 7.9 by Pythia's recipe, 4 layers, the widths) without training.
"""

import numpy as np
import pytest

from experiments import convergence as exp
from experiments.convergence import depth_reading as dr
from experiments.convergence import probes
from experiments.convergence.levels import STAB_LEVELS
from sbjax import optim
from sbjax.analysis import read_csv
from sbjax.data import make_dataset
from tests._corpus import generated_docs, write_corpus

TEXT, PLANTED = "test-depth-text", "test-depth-planted"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  return write_corpus(tmp_path_factory.mktemp("depth_corpus"), generated_docs(3, 6))


@pytest.fixture(scope="module")
def outs(tmp_path_factory, corpus):
  root = tmp_path_factory.mktemp("depth")
  got = {}
  for preset, data in ((PLANTED, None), (TEXT, str(corpus))):
    exp.run(root / preset, preset, data=data, verbose=False)
    got[preset] = root / preset
  return got


def _stays_from(steps, c, level):
  """Reference: the step after the last checkpoint below ``level`` (the first if none)."""
  below = [i for i, v in enumerate(c) if not v >= level]
  assert not below or below[-1] < len(c) - 1
  return steps[below[-1] + 1] if below else steps[0]


def test_planted_language_has_context_two():
  cfg = exp.configs(PLANTED)[0][1]
  assert (cfg.data.options.context, cfg.data.options.vocab) == (2, 64)
  for preset in ("depth-planted-g2.4", "depth-planted-g7.9"):
    o = exp.configs(preset)[0][1].data.options
    assert (o.context, o.vocab, o.rank) == (2, 64, 8)


def test_levels_csv_is_the_cka_reread_on_both_probes(outs):
  for preset, out in outs.items():
    rows = read_csv(out / "stab_levels.csv")
    assert {r["probe"] for r in rows} == {0, 1} and {r["level"] for r in rows} == set(STAB_LEVELS)
    model = rows[0]["model"]
    cka = {p: [r for r in read_csv(out / "measure" / model / sub / "cka.csv")
               if r["tokens"] == "last" and r["estimator"] == "biased"]
           for p, sub in ((0, ""), (1, "probe1"))}
    for kind in ("mlp", "ov"):
      for layer in range(4):
        series = {}
        for p in (0, 1):
          sel = sorted((r["step"], r["cka"]) for r in cka[p]
                       if r["kind"] == kind and r["layer"] == layer)
          steps, c = [s for s, _ in sel], [v for _, v in sel]
          assert np.isclose(c[-1], 1.0, atol=1e-5)
          series[p] = c
          for level in STAB_LEVELS:
            (r,) = [r for r in rows if (r["probe"], r["kind"], r["layer"], r["level"])
                    == (p, kind, layer, level)]
            assert r["stabilisation_step"] == _stays_from(steps, c, level), (preset, r)
            assert np.isclose(r["stabilisation_frac"], r["stabilisation_step"] / steps[-1])
        assert not np.allclose(series[0][:-1], series[1][:-1])  # two different batches


def test_probes_are_disjoint_validation_windows(outs, corpus):
  cfg = exp.configs(TEXT, str(corpus))[0][1]
  ds = make_dataset(cfg.data, seq_len=cfg.train.seq_len, global_batch_size=cfg.train.batch_size,
                    seed=cfg.train.data_seed, workdir=str(outs[TEXT] / "data"))
  a, b = probes.probe_batches(ds, exp.PRESETS[TEXT].knobs.n_sequences, 2)
  assert not {r.tobytes() for r in a} & {r.tobytes() for r in b}
  assert ds.vocab_size == 64 and cfg.data.source == "text"


def test_report_section_carries_the_table_and_the_reading(outs):
  for out in outs.values():
    section = exp.report_section(out, "conv")
    rows = read_csv(out / "stab_levels.csv")
    assert "| model | level | batch |" in section
    for line in dr.levels_lines(rows):
      assert line in section
    text = dr.depth_claims(rows, "")
    assert text.split(" At ")[0] in section  # the same verdicts, from the same CSV
    assert "on 2 disjoint probe batches" in section and "Undecided:" in section


def test_cpu_presets_are_pythia_gamma_with_four_layers(tmp_path):
  corpus = write_corpus(tmp_path / "c", generated_docs(1, 2))
  for preset, gamma, widths in (("depth-text", 2.4, (32, 128)), ("depth-planted-g2.4", 2.4, (32,)),
                                ("depth-planted-g7.9", 7.9, (32,))):
    cfgs = exp.configs(preset, str(corpus) if "text" in preset else None)
    assert [c.model.d_model for _, c in cfgs] == list(widths)
    for _, c in cfgs:
      assert c.model.n_layers == 4 and c.train.weight_decay == 0.1
      assert abs(optim.gamma_total(c.train) - gamma) < 1e-3
    assert exp.PRESETS[preset].knobs.probe_batches == 2
    assert exp.PRESETS[preset].knobs.n_sequences == 128
