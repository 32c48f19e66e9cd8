"""Saturation (Godey E1/E3/E4) end to end at the `test` preset on generated text: train,
analyse, fit, CSVs, figures, the report section, a rerun, and the CLI. (The scaling fit's
columns with a finite fit are checked in tests/unit/test_saturation_fit.py: the test preset
has one width, too few for the three-parameter law.)"""

import json
import math
import os
import struct
import subprocess
import sys

import jax
import numpy as np
import pytest

from experiments import saturation
from experiments.shared import REPO, read_rows
from sbjax import checkpoint as ckpt
from tests._corpus import generated_docs, write_corpus

PRESET = saturation.get_preset("test")


@pytest.fixture(scope="module")
def done(tmp_path_factory):
  root = tmp_path_factory.mktemp("saturation")
  corpus = write_corpus(root / "corpus", generated_docs(1, 6))
  saturation.run(root / "out", "test", data=str(corpus), verbose=False)
  return root / "out", corpus, saturation.report_section(root / "out", "sat")


def _png_ok(path):
  b = path.read_bytes()
  assert b[:8] == b"\x89PNG\r\n\x1a\n", path
  w, h = struct.unpack(">II", b[16:24])
  assert w > 100 and h > 100


def _close(a, b, **kw):
  return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, **kw)


def test_writes_figures_and_csvs(done):
  out, _, _ = done
  for name in saturation.FIGS.values():
    _png_ok(out / name)
  rows = read_rows(out / "saturation_runs.csv")
  assert [int(r["width"]) for r in rows] == list(PRESET.knobs.widths)
  for r in rows:
    wd = out / "runs" / f"d{int(r['width'])}"
    assert ckpt.list_steps(wd)[-1] == PRESET.overrides["train.steps"]
    # N counted from the checkpoint's own parameters: everything but embedding and head
    _, params, _ = ckpt.load_params(wd)
    n = sum(int(np.size(x)) for k, v in params.items() if k not in ("embed", "head")
            for x in jax.tree.leaves(v))
    assert int(r["n_nonembedding"]) == n
    assert int(r["n_with_head"]) == n + sum(int(np.size(x)) for x in jax.tree.leaves(params["head"]))
    # best / final / rise from the analysis CSV, by plain python
    a = read_rows(wd / "analysis" / "metrics.csv")
    final = max(a, key=lambda x: x["step"])
    best = min(a, key=lambda x: x["eval_loss"])
    assert r["final_eval_loss"] == final["eval_loss"]
    assert r["best_eval_loss"] == best["eval_loss"] and int(r["best_step"]) == best["step"]
    assert bool(r["late_rise"]) == (final["eval_loss"] - best["eval_loss"] > PRESET.knobs.rise_tol)
    assert bool(r["in_fit"]) == (r["width"] >= PRESET.knobs.fit_min_width)
    for key in ("final", "best"):
      assert _close(r[f"gap_{key}_pct"], 100 * (r[f"{key}_eval_loss"] - r[f"pred_{key}"])
                    / r[f"pred_{key}"], rel=1e-9)
  fits = {f["fit_on"]: f for f in read_rows(out / "saturation_fit.csv")}
  assert set(fits) == {"final", "best", "final_with_head"}  # N without and with the head
  for f in fits.values():  # < 3 widths: too few points, the fit is NaN (and says how many)
    assert int(f["n_points"]) == sum(r["in_fit"] for r in rows) == len(PRESET.knobs.widths)
    assert math.isnan(f["A"])
  loss = read_rows(out / "saturation_train_loss.csv")
  assert {int(x["width"]) for x in loss} == set(PRESET.knobs.widths)
  meta = json.loads((out / "saturation_meta.json").read_text())
  assert meta["preset"] == "test" and meta["knobs"]["widths"] == list(PRESET.knobs.widths)


def test_report_section_reads_the_csv(done):
  out, _, text = done
  assert text.startswith("## saturation")
  for name in saturation.FIGS.values():
    assert f"](sat/{name})" in text
  rows = {int(r["width"]): r for r in read_rows(out / "saturation_runs.csv")}
  table = [x for x in text.splitlines() if x.startswith("| ") and x[2].isdigit()]
  assert len(table) == len(rows)
  for line in table:
    cells = [c.strip() for c in line.strip("|").split("|")]
    r = rows[int(cells[0])]
    assert float(cells[2]) == pytest.approx(r["final_eval_loss"], abs=5e-5)
    assert (cells[7] == "–") if math.isnan(r["gap_final_pct"]) else (
        float(cells[7]) == pytest.approx(r["gap_final_pct"], abs=5e-3))
  assert ("null result" in text) == (not any(r["rise_verdict"] == "yes" for r in rows.values()))
  # the paired-bootstrap rise (sbjax.studies.rise) of the saved window losses
  from sbjax.studies import rise as rise_lib
  with np.load(out / "runs" / "d8" / "windows.npz") as z:
    st, lw = z["steps"], z["loss_KxW"]
  assert rows[8]["rise_stat"] == pytest.approx(
      rise_lib.rise_statistic(st, lw.mean(1), PRESET.overrides["train.steps"]))
  assert lw.mean(1)[-1] == pytest.approx(rows[8]["final_eval_loss"], abs=1e-4)
  assert "Preset `test`" in text
  # the scaling reading (scaling_reading.py) from the same CSV: N without and with the head
  assert "**Scaling fit (Godey et al. Fig. 1b).**" in text
  assert ("every width is in the fit" in text) == all(r["in_fit"] for r in rows.values())
  assert "Verdict: undecided." in text and "one seed per width" in text
  for r in rows.values():  # one width: no fit, so no gap and no CI under either count
    assert math.isnan(r["gap_final_ci_lo"]) and math.isnan(r["gap_final_with_head_ci_hi"])


def test_rerun_skips_finished_runs(done):
  out, corpus, _ = done
  ck = out / "runs" / "d8" / "checkpoints"
  before = sorted((p.name, p.stat().st_mtime_ns) for p in ck.iterdir())
  meta = json.loads((out / "saturation_meta.json").read_text())
  saturation.run(out, "test", data=str(corpus), verbose=False)
  assert sorted((p.name, p.stat().st_mtime_ns) for p in ck.iterdir()) == before
  # the meta keeps the first (training) call's times; the rerun's are its last_call
  again = json.loads((out / "saturation_meta.json").read_text())
  assert (again["timings"], again["seconds"]) == (meta["timings"], meta["seconds"])
  assert meta["last_call"]["trained"] == [8] and again["last_call"]["trained"] == []


def test_cli_reruns_and_writes_the_section(done):
  """python -m experiments.saturation on the finished output: nothing is trained again, the
  section is written; a bad preset is one clear flag error."""
  out, corpus, _ = done
  cmd = ["experiments.saturation", "--preset=test", f"--out={out}", f"--data={corpus}"]
  # both commands in one interpreter, each as `python -m` in its own forked child
  # (tests/_cli_fork.py): the imports are paid once
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  proc = subprocess.run([sys.executable, "-m", "tests._cli_fork",
                         json.dumps([cmd, cmd[:1] + ["--preset=huge"]])], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  r, bad = json.loads(proc.stdout)
  assert r["rc"] == 0, r["stderr"][-2000:]
  assert json.loads(r["stdout"].strip().splitlines()[-1])["section"].endswith("section.md")
  assert (out / "section.md").read_text().startswith("## saturation")
  assert bad["rc"] == 2 and "error:" in bad["stderr"] and "huge" in bad["stderr"]
