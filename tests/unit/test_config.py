"""The config path: named configs, saved config.json files and command-line text, against Configs by hand."""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from absl import flags

from sbjax import configs
from sbjax.cli import common
from sbjax.cli import train as train_cli
from sbjax.config import Config, DataConfig
from sbjax.data.options import PlantedMixOptions
from sbjax.heads.lowrank import LowRankHead
from sbjax.heads.mos import MoSHead
from sbjax.train.workdir import check_workdir_config

SAVED = Path(__file__).resolve().parents[1] / "data" / "configs"


def _with(cfg: Config, name: str, vocab: int = 0, **model) -> Config:
  """``cfg`` renamed, with model fields replaced (and model and data vocabulary ``vocab``)."""
  if vocab:
    model["vocab_size"] = vocab
    cfg = cfg.replace(data=cfg.data.replace_options(vocab=vocab))
  return cfg.replace(name=name, model=dataclasses.replace(cfg.model, **model))


# what each saved config.json means (tests/data/configs/README.md): the flat files of dfd2424
# and one typed file of 8ef8c0e
SAVED_AS = {
    "tiny_dense.json": lambda: configs.get("tiny"),
    "tiny_mos.json": lambda: _with(configs.get("tiny"), "tiny-mos", head=MoSHead(3, 5, "linear")),
    "planted_knee_lowrank.json": lambda: configs.get("planted-knee"),
    "neo_tied.json": lambda: configs.get("neo-L2-d64"),
    "planted_mix_mos.json": lambda: _with(configs.get("planted-mix"), "planted-mix-mos", 32,
                                          head=MoSHead(3, 5, "linear")),
}


@pytest.mark.parametrize("name", sorted(SAVED_AS))
def test_saved_config_json_loads_and_resumes(name, tmp_path):
  cfg = configs.load(str(SAVED / name))
  assert cfg == SAVED_AS[name]()
  shutil.copy(SAVED / name, tmp_path / "config.json")
  check_workdir_config(tmp_path, cfg)  # no "config changed" on resume


def test_to_dict_from_dict_round_trip():
  cfgs = [configs.get(n) for n in [*configs.NAMED, "neo-L4-d128"]]
  for cfg in cfgs + [SAVED_AS["planted_mix_mos.json"]()]:
    d = json.loads(json.dumps(cfg.to_dict()))
    assert Config.from_dict(d) == cfg and Config.from_dict(d).to_dict() == d, cfg.name


def test_typed_command_line_keys_set_typed_fields():
  argv = ["prog", "--config=tiny", "--config.model.head.rank", "8", "--config.model.head=lowrank",
          "--config.data.options.mix=3", "--config.data.source=planted_mix",
          "--config.model.attention_layers=global,local", "--config.train.ckpt_log_spaced=false",
          "--workdir=w"]
  fv = copy.deepcopy(flags.FLAGS)
  fv(common.dotted_flags(argv, "config", "config_override"))
  cfg = train_cli.config_of(fv["config"].value, fv["config_override"].value)
  tiny = configs.get("tiny")  # the source change keeps the fields planted_mix shares
  assert cfg == tiny.replace(
      model=dataclasses.replace(tiny.model, head=LowRankHead(8),
                                attention_layers=("global", "local")),
      data=DataConfig("planted_mix", PlantedMixOptions(**tiny.data.options.to_dict(), mix=3)),
      train=dataclasses.replace(tiny.train, ckpt_log_spaced=False))
  # text typed like the field it lands on (a path stays text), a section as one JSON object
  text = train_cli.config_of("tiny", ["data.source=text", "data.options.path=2024",
                                      'model.head={"kind": "mos", "n_mix": 2}'])
  assert text.data.options.path == "2024" and text.model.head == MoSHead(n_mix=2)


def test_a_python_config_file(tmp_path):
  f = tmp_path / "mine.py"
  f.write_text("from sbjax import configs\n\ndef get_config(width='16'):\n"
               "  c = configs.load('tiny').to_dict()\n  c['model']['d_model'] = int(width)\n"
               "  return c\n")
  assert configs.load(str(f)).model.d_model == 16
  assert configs.load(f"{f}:32").model.d_model == 32
