"""Joining lm-eval results JSONs onto analysis rows by step (sbjax.analysis.evals)."""

import json

import pytest

from sbjax.analysis import evals


def _write(path, results, model_args=None):
  path.parent.mkdir(parents=True, exist_ok=True)
  doc = {"results": results}
  if model_args:
    doc["config"] = {"model_args": model_args}
  path.write_text(json.dumps(doc))


def test_steps_from_revision_name_dir_and_file(tmp_path):
  _write(tmp_path / "a.json", {"arc_easy": {"acc,none": 0.4, "acc_norm,none": 0.45,
                                            "alias": "arc_easy"}},
         "pretrained=EleutherAI/pythia-70m,revision=step1000-tokens2B,dtype=float")
  _write(tmp_path / "step2000" / "results.json", {"arc_easy": {"acc,none": 0.5}})
  _write(tmp_path / "results_stage1-step3000-tokens6B.json",
         {"gsm8k": {"exact_match,strict-match": 0.1}})
  got = evals.read_all(tmp_path)
  assert got == {1000: {"lmeval_arc_easy_acc": 0.4, "lmeval_arc_easy_acc_norm": 0.45},
                 2000: {"lmeval_arc_easy_acc": 0.5},
                 3000: {"lmeval_gsm8k_exact_match_strict-match": 0.1}}
  rows = evals.join([{"step": 0, "eval_loss": 3.0}, {"step": 2000, "eval_loss": 2.0}], got)
  assert rows == [{"step": 0, "eval_loss": 3.0},
                  {"step": 2000, "eval_loss": 2.0, "lmeval_arc_easy_acc": 0.5}]


def test_bad_results(tmp_path):
  _write(tmp_path / "x" / "results.json", {"t": {"acc,none": 0.1}})
  with pytest.raises(ValueError, match="no step for .*results.json: name the file or its "
                                       "directory like a revision"):
    evals.read_all(tmp_path / "x")
  _write(tmp_path / "y" / "step5.json", {"t": {"acc,none": 0.1}})
  _write(tmp_path / "y" / "z" / "step5.json", {"t": {"acc,none": 0.2}})
  with pytest.raises(ValueError, match="step 5 has two values of lmeval_t_acc"):
    evals.read_all(tmp_path / "y")
  (tmp_path / "w.json").write_text("{}")
  with pytest.raises(ValueError, match="not an lm-eval results file"):
    evals.read_all(tmp_path / "w.json")
