"""A damaged checkpoint's reason, as logs, CSVs and reports show it (``sbjax.checkpoint.
short_reason``): at most 240 characters of message, cut at a word with an ellipsis, never
mid-word, and never at the cost of what failed: a checksum mismatch keeps the file and both
checksums (its closing aside goes first). The analysis's set-aside record
(``sbjax.analysis.damaged``) drops the step and workdir it names beside the reason before the
cut, not after: with a long workdir the old 240-character cut ended in "checksums." and lost
the manifest's checksum."""

from __future__ import annotations

import hashlib
import json
import re

import jax
import numpy as np
import pytest

from sbjax import checkpoint as ckpt
from sbjax.analysis.damaged import Damaged
from tests._damage import MANIFEST, flip_one_byte, largest_data_file

pytestmark = [pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
              pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")]


def _words(text: str) -> list[str]:
  return text.split()


def _whole_words(cut: str, original: str) -> bool:
  """Every word of ``cut`` (its ``Type: `` and final "…" taken off) is a word of ``original``:
  itself, or its two ends around a "…" (a long path), or (the last) without the punctuation
  that ended it."""
  words, known = _words(cut.split(": ", 1)[1].removesuffix("…")), set(_words(original))

  def whole(w: str, last: bool) -> bool:
    head, _, tail = w.partition("…")
    return any(o == w or (tail and len(o) > len(w) and o.startswith(head) and o.endswith(tail))
               or (last and o.rstrip(",;:.") == w) for o in known)

  return all(whole(w, i == len(words) - 1) for i, w in enumerate(words))


def test_short_reasons_are_whole_words():
  """Short: as it is. Long without asides: whole words, then "…". A long path: its ends."""
  assert ckpt.short_reason(ValueError("a short reason (with an aside)")) == (
      "ValueError: a short reason (with an aside)")
  long = " ".join(f"word{i}" for i in range(80))  # 80 words, no aside: cut at a word
  cut = ckpt.short_reason(ValueError(long))
  assert cut.endswith("…") and len(cut.split(": ", 1)[1]) <= ckpt.REASON_CHARS
  assert _whole_words(cut, long) and long.startswith(cut.split(": ", 1)[1][:-1] + " ")
  path = "/" + "/".join(f"folder{i}" for i in range(40)) + "/checksums.json"
  msg = f"cannot read {path}: " + "no such file " * 10
  cut = ckpt.short_reason(OSError(msg))
  assert re.fullmatch(r"OSError: cannot read /folder0/folder1/\S*…\S*/folder39/checksums\.json: "
                      r"(no such file ){9}no such file", cut), cut
  assert len(cut.split(": ", 1)[1]) <= ckpt.REASON_CHARS and _whole_words(cut, msg)


def test_a_checksum_reason_keeps_the_file_and_both_checksums(tmp_path):
  """A real mismatch read through ``ParamsReader`` from a workdir with a long name (the
  reason is over 240 characters): the short reason keeps whole words and names the file; the
  analysis's record also keeps both checksums (hashlib on the file and the manifest's, read
  here as the references)."""
  wd = tmp_path / ("a_run_whose_workdir_name_is_long_" * 3)
  tree = {"w": np.arange(64, dtype=np.float32).reshape(-1, 4), "b": np.ones(4, np.float32)}
  mngr = ckpt.make_manager(wd)
  ckpt.save(mngr, 0, tree, None, {"step": 0})
  mngr.close()
  step_dir = wd / "checkpoints" / "0"
  f = largest_data_file(step_dir)
  flip_one_byte(f)
  rel = f.relative_to(step_dir).as_posix()
  got = hashlib.sha256(f.read_bytes()).hexdigest()[:12]
  said = json.loads((step_dir / MANIFEST).read_text())["files"][rel][1][:12]
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)
  with ckpt.ParamsReader(wd, abstract) as reader:
    with pytest.raises(ckpt.CorruptCheckpointError) as e:
      reader.read([0])
  full = str(e.value)
  assert len(full) > ckpt.REASON_CHARS and rel in full  # the long reason, as raised
  cut = ckpt.short_reason(e.value)  # the workdir's two ends, the file, its checksum
  assert cut.startswith("CorruptCheckpointError: checkpoint step 0 in ") and cut.endswith("…")
  assert len(cut.split(": ", 1)[1]) <= ckpt.REASON_CHARS and _whole_words(cut, full)
  assert f"checksum mismatch in {rel}: sha256 {got}" in cut
  damaged = Damaged(wd)
  damaged.set_aside(0, e.value)
  reason = damaged.records()[0]["reason"]
  assert reason == (f"CorruptCheckpointError: failed its checksum check: checksum mismatch in "
                    f"{rel}: sha256 {got}..., {MANIFEST} says {said}... (the file changed "
                    "after it was written: bit rot or an edit)")
  assert ckpt.list_steps(wd) == [] and damaged.records()[0]["moved_to"]
