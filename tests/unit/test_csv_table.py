"""The experiments' CSV rows read back as the numbers written, numpy scalars included."""

import math

import numpy as np

from sbjax.analysis.table import read_csv, write_csv


def test_numpy_scalars_are_written_as_plain_numbers(tmp_path):
  rows = [{"step": np.int64(3), "frac": np.int64(3) / 8, "x32": np.float32(0.25), "b": True,
           "f": 0.1, "nan": math.nan, "name": "d16", "none": None}]
  write_csv(tmp_path / "t.csv", rows)
  text = (tmp_path / "t.csv").read_text()
  assert "np." not in text, text
  assert text.splitlines()[1] == "3,0.375,0.25,1,0.1,nan,d16,", text
  back = read_csv(tmp_path / "t.csv")[0]
  assert back["step"] == 3 and back["frac"] == 0.375 and back["x32"] == 0.25
  assert back["f"] == 0.1 and math.isnan(back["nan"]) and back["name"] == "d16"


def test_text_columns_stay_as_written(tmp_path):
  """A token piece that looks like a number ("007", "1", "1e3") comes back as written from a
  column named in ``text``; the other columns still parse (collapse's token table)."""
  rows = [{"token": "007", "count": 5}, {"token": "1", "count": 2}, {"token": "1e3", "count": 1},
          {"token": "the", "count": 9}]
  write_csv(tmp_path / "t.csv", rows)
  back = read_csv(tmp_path / "t.csv", text=("token",))
  assert [r["token"] for r in back] == ["007", "1", "1e3", "the"]
  assert [r["count"] for r in back] == [5.0, 2.0, 1.0, 9.0]
  assert read_csv(tmp_path / "t.csv")[0]["token"] == 7.0  # unnamed: parsed as a number
