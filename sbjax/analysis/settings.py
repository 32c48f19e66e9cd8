"""Analysis settings: which metric groups, sample sizes and metric variants.

Fields that change a number go into the cache key (``Settings.cache_fields``); fields that
only schedule the work or place its outputs do not.
"""

from __future__ import annotations

import dataclasses

from sbjax.errors import SEED_MAX, bounded, check_fields, config_error

ALL_GROUPS = ("loss", "anisotropy", "spectrum", "collapse", "cka", "per")
DEFAULT_W_ERROR_DIMS = (1, 2, 4, 8, 16, 32, 64)
# not in the cache key: scheduling and outputs, and the data (keyed through the effective
# config and the token file's content hash, sbjax.analysis.data_source)
EXEC_FIELDS = ("batch_sequences", "group_size", "max_group_bytes", "steps", "out_dir",
               "progress", "figures", "allow_duplicates", "tokens", "data")


def _err(field, value, allowed) -> ValueError:
  return config_error(field, value, allowed, what="analysis setting")


@dataclasses.dataclass(frozen=True)
class Settings:
  """Settings of ``analyze_run`` (the CLI flags of ``experiments/analyze.py`` map 1:1)."""

  groups: tuple = ALL_GROUPS
  # evaluation sample: the first max(eval_sequences, cka_sequences) validation windows
  eval_sequences: int = bounded(128, lo=1)  # windows for eval_loss/acc, anisotropy and NC4
  # token positions (of eval_sequences*T) for anisotropy; 0 = all
  anisotropy_tokens: int = bounded(4096, lo=0, note="0 = all; 1 is no pair")
  # neural collapse
  collapse_sequences: int = bounded(64, lo=1)  # train-split windows for class means / variances
  min_count: int = bounded(1, lo=1)
  cdnv_exponent: float = 2.0
  weighted_mean: bool = False
  nc4_search: str = bounded("analyzed", choices=("analyzed", "all"))
  # CKA to the final checkpoint
  cka_sequences: int = bounded(128, lo=1)
  # "last" (authors) or "all" positions of the CKA sequences
  cka_tokens: str = bounded("last", choices=("last", "all"))
  cka_debiased: bool = False
  # spectra / PER
  w_error_dims: tuple = DEFAULT_W_ERROR_DIMS
  # 0 = full spectrum (pico-analyze); >0 = top-r (authors' notebook)
  per_mlp_r: int = bounded(0, lo=0, note="0 = all")
  spectrum_top: int = bounded(100, lo=1)
  seed: int = bounded(0, lo=0, hi=SEED_MAX)  # anisotropy position subsample
  # scheduling only
  batch_sequences: int = bounded(32, lo=1)  # sequences per forward chunk
  # checkpoints per vmapped group; 0 = from max_group_bytes
  group_size: int = bounded(0, lo=0, note="0 = from max_group_bytes")
  max_group_bytes: int = bounded(1 << 30, lo=1)
  steps: tuple = ()  # analyse only these steps; () = all
  out_dir: str = ""  # "" = WORKDIR/analysis
  progress: bool = True
  figures: bool = True
  # the data (sbjax.analysis.data_source): a token file, DataConfig overrides "KEY=VALUE"
  tokens: str = ""
  data: tuple = ()
  allow_duplicates: bool = False  # analyse revisions that duplicate another's weights

  def __post_init__(self):
    object.__setattr__(self, "data", tuple(str(x) for x in self.data))
    object.__setattr__(self, "w_error_dims", tuple(int(d) for d in self.w_error_dims))
    object.__setattr__(self, "steps", tuple(int(s) for s in self.steps))
    bad = [g for g in self.groups if g not in ALL_GROUPS]
    if bad or not self.groups:
      raise _err("groups", self.groups, "a non-empty subset of " + ",".join(ALL_GROUPS))
    # canonical order, no duplicates (so the cache key does not depend on the spelling)
    object.__setattr__(self, "groups", tuple(g for g in ALL_GROUPS if g in self.groups))
    check_fields(self, "", what="analysis setting")
    if self.anisotropy_tokens == 1:
      raise _err("anisotropy_tokens", 1, "0 (all) or >= 2 token positions")
    if any(d < 1 for d in self.w_error_dims):
      raise _err("w_error_dims", self.w_error_dims, "positive integers")
    if "cka" in self.groups and self.cka_tokens == "last":
      need = 4 if self.cka_debiased else 2
      if self.cka_sequences < need:
        raise _err("cka_sequences", self.cka_sequences,
                   f">= {need} with cka_tokens=last{' and cka_debiased' if self.cka_debiased else ''}")

  def has(self, group: str) -> bool:
    return group in self.groups

  @property
  def needs_data(self) -> bool:
    return any(g in self.groups for g in ("loss", "anisotropy", "collapse", "cka"))

  @property
  def sample_sequences(self) -> int:
    """Windows fetched for the evaluation sample (depends on these two sizes only)."""
    return max(self.eval_sequences, self.cka_sequences)

  def to_dict(self) -> dict:
    d = dataclasses.asdict(self)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}

  def cache_fields(self) -> dict:
    """The settings that change results (the cache key)."""
    return {k: v for k, v in self.to_dict().items() if k not in EXEC_FIELDS}
