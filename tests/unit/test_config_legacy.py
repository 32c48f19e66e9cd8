"""Typed head and data-source configs and the loader of earlier config.json files.

tests/data/configs/ holds config.json files written by sbjax at dfd2424, when ModelConfig
carried every head's fields flat (``model.head`` a kind name beside ``model.head_rank``,
``model.n_mix``, ...) and DataConfig every source's (``data.planted_vocab``, ``data.path``,
``data.tfds_name``, ...). They must load as the typed head and source options, compare equal
to the typed config at resume, round-trip, and take the dotted overrides users write today."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sbjax import configs, overrides
from sbjax.config import Config, DataConfig
from sbjax.data import _legacy as legacy_data
from sbjax.data.options import PlantedMixOptions, PlantedOptions, TextOptions, TfdsOptions
from sbjax.heads.dense import DenseHead
from sbjax.heads.lowrank import LowRankHead
from sbjax.heads.mos import MoSHead
from sbjax.heads.tied import TiedHead
from sbjax.train.workdir import ConfigMismatchError, check_workdir_config

SAVED = Path(__file__).resolve().parents[1] / "data" / "configs"
# what each saved file's flat head fields mean (the old code's rules: a kind reads only its own)
HEADS = {"tiny_dense.json": DenseHead(), "planted_knee_lowrank.json": LowRankHead(64, "scaled"),
         "tiny_mos.json": MoSHead(n_mix=3, dim=5, act="linear"), "neo_tied.json": TiedHead()}
LEGACY = ("head", "head_rank", "head_init", "n_mix", "mos_dim", "mos_act",
          *legacy_data.LEGACY_DEFAULTS)
# what each saved file's flat data fields mean: the planted fields of a planted source
DATA = {"tiny_dense.json": PlantedOptions(vocab=64, rank=4, train_tokens=200_000,
                                          val_tokens=8192),
        "planted_knee_lowrank.json": PlantedOptions(vocab=256, rank=8, val_tokens=131_072),
        "tiny_mos.json": PlantedOptions(vocab=64, rank=4, train_tokens=200_000, val_tokens=8192),
        "neo_tied.json": PlantedOptions(vocab=4096, rank=64)}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_saved_config_loads_typed_and_round_trips(name):
  old = json.loads((SAVED / name).read_text())
  assert isinstance(old["model"]["head"], str) and "head_rank" in old["model"]  # the old form
  assert "planted_vocab" in old["data"] and "options" not in old["data"]
  cfg = Config.from_dict(old)
  assert cfg.model.head == HEADS[name]
  assert cfg.data == DataConfig("planted", DATA[name])
  new = cfg.to_dict()
  assert new["model"]["head"] == {"kind": HEADS[name].kind, **HEADS[name].__dict__}
  assert new["data"] == {"source": "planted", "options": DATA[name].__dict__}
  # each legacy data field the source reads is its option of the same meaning
  legacy = PlantedOptions.legacy
  newer = {"sampler": "host"}  # options added after dfd2424 (issue 32): their defaults
  assert {legacy[k]: v for k, v in old["data"].items() if k in legacy} == {
      k: v for k, v in DATA[name].__dict__.items() if k not in newer}
  assert {k: DATA[name].__dict__[k] for k in newer} == newer
  # every other field it holds is carried over unchanged (later fields take their defaults)
  for section, vals in old.items():
    if isinstance(vals, dict):
      assert {k: new[section][k] for k in vals if k not in LEGACY} == {
          k: v for k, v in vals.items() if k not in LEGACY}, section
    else:
      assert new[section] == vals
  assert Config.from_dict(json.loads(json.dumps(new))) == cfg
  # through the --config=FILE path (the editable flat form), old file and new file alike
  assert configs.build(configs.load(str(SAVED / name))) == cfg


@pytest.mark.parametrize("name", sorted(HEADS))
def test_old_workdir_resumes_with_the_typed_config(tmp_path, name):
  shutil.copy(SAVED / name, tmp_path / "config.json")
  cfg = Config.from_dict(json.loads((SAVED / name).read_text()))
  check_workdir_config(tmp_path, cfg)  # no spurious "config changed"
  other = MoSHead(n_mix=2) if name != "tiny_mos.json" else MoSHead(n_mix=3, dim=4, act="linear")
  changed = cfg.replace(model=type(cfg.model)(**{**cfg.model.__dict__, "head": other}))
  with pytest.raises(ConfigMismatchError, match=r"model\.head\."):
    check_workdir_config(tmp_path, changed)
  with pytest.raises(ConfigMismatchError, match=r"data\.options\.rank"):
    check_workdir_config(tmp_path, cfg.replace(data=cfg.data.replace_options(rank=3)))


def test_flat_data_overrides_and_the_new_form():
  """--config.data.planted_vocab (the flag form), a preset's "data.planted_rank" and the new
  "data.options.vocab" all set the typed options; a source change carries shared fields."""
  cd = configs.load(str(SAVED / "tiny_dense.json"))
  cd.data.planted_vocab = 32  # --config.data.planted_vocab=32
  cd.data.source, cd.data.planted_mix = "planted_mix", 3
  assert configs.build(cd).data == DataConfig("planted_mix", PlantedMixOptions(
      vocab=32, rank=4, train_tokens=200_000, val_tokens=8192, mix=3))
  base = configs.build(configs.load(str(SAVED / "tiny_dense.json")))
  for over in ({"data.planted_rank": 2}, {"data.options.rank": 2}):
    assert overrides.apply(base, over).data.options.rank == 2
    assert overrides.config_from("tiny", over).data.options.rank == 2
  mix = overrides.apply(base, {"data.source": "planted_mix", "data.options.mix": 2})
  assert mix.data.options == PlantedMixOptions(vocab=64, rank=4, train_tokens=200_000,
                                               val_tokens=8192, mix=2)
  assert overrides.apply(mix, {"data.source": "planted"}).data == base.data
  # planted -> text shares nothing; the flat fields of another source are ignored (as then)
  text = overrides.apply(base, {"data.source": "text", "data.path": "corpus",
                                "data.planted_vocab": 16, "data.vocab_size": 96})
  assert text.data.options == TextOptions(path="corpus", vocab_size=96)
  tfds = overrides.apply(text, {"data.source": "tfds", "data.tfds_name": "lm1b"})
  assert tfds.data.options == TfdsOptions(name="lm1b", vocab_size=96)  # tokenizer fields kept
  d = text.to_dict()
  assert d["data"] == {"source": "text", "options": TextOptions(path="corpus",
                                                                vocab_size=96).__dict__}
  flag_form = {**configs.get("tiny"), "data": legacy_data.to_flat(d["data"])}
  assert configs.build(configs.to_configdict(flag_form)).data == text.data
  with pytest.raises(ValueError, match=r"data\.options\.vocab=1; allowed: an integer >= 2"):
    overrides.apply(base, {"data.options.vocab": 1})
  with pytest.raises(ValueError, match=r"data\.options\.rank=9; allowed: 1 \.\. vocab=8"):
    overrides.apply(base, {"data.planted_vocab": 8, "data.options.rank": 9})
  with pytest.raises(ValueError, match=r"invalid config key 'data\.options\.mix'"):
    overrides.apply(text, {"data.options.mix": 2})


def test_dotted_overrides_of_today_keep_working(tmp_path):
  cd = configs.load(str(SAVED / "planted_knee_lowrank.json"))
  cd.model.head_rank = 8  # --config.model.head_rank=8
  cd.model.head_init = "godey"
  assert configs.build(cd).model.head == LowRankHead(8, "godey")
  cd.model.head = "mos"  # --config.model.head=mos --config.model.n_mix=4 --config.model.mos_dim=3
  cd.model.n_mix, cd.model.mos_dim = 4, 3
  assert configs.build(cd).model.head == MoSHead(n_mix=4, dim=3)  # head_rank ignored, as before
  # a new-form config.json takes the flags too
  new = tmp_path / "new.json"
  new.write_text(json.dumps(configs.build(configs.load(str(SAVED / "tiny_mos.json"))).to_dict()))
  cd = configs.load(str(new))
  cd.model.mos_act = "tanh"
  assert configs.build(cd).model.head == MoSHead(n_mix=3, dim=5, act="tanh")
  # a preset's dotted keys on a named config, and a typed head dict with a flat key beside it
  d = configs.get("tiny")
  d["model"].update({"head": "lowrank", "head_rank": 4})
  assert Config.from_dict(d).model.head == LowRankHead(4)
  d = Config.from_dict(d).to_dict()
  d["model"]["head_rank"] = 2
  assert Config.from_dict(d).model.head == LowRankHead(2)


def test_bad_head_configs_name_the_field():
  d = configs.get("tiny")
  d["model"]["head"] = {"kind": "lowrank", "rank": 4, "width": 3}
  with pytest.raises(ValueError, match=r"model\.head\.width=3; allowed: the fields of a lowrank "
                                       r"head: rank \| init"):
    Config.from_dict(d)
  d["model"]["head"] = "lowrank"
  with pytest.raises(ValueError, match=r"model\.head\.rank=0; allowed: 1 \.\. d_model=32"):
    Config.from_dict(d)  # head_rank left at its old default 0
