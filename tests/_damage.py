"""Damage to checkpoint files for the corrupt-step and damaged-analysis tests."""

from pathlib import Path

MANIFEST = "checksums.json"  # sbjax.checkpoint.MANIFEST_FILE, spelled out: the reference


def largest_data_file(step_dir: Path, item: str = "params") -> Path:
  """The largest array data file of an item of a step directory (OCDBT)."""
  fs = [p for p in (step_dir / item / "ocdbt.process_0" / "d").iterdir() if p.is_file()]
  return max(fs, key=lambda p: p.stat().st_size)


def flip_one_byte(f: Path) -> int:
  """XOR one bit of the middle byte of ``f`` (inside the array data); returns its offset."""
  data = bytearray(f.read_bytes())
  i = len(data) // 2
  data[i] ^= 0x10
  f.write_bytes(bytes(data))
  return i
