"""Defaults by observation kind: an algorithm's image settings fill the options a user left unset when the env
gives pictures, said once and recorded in config.yaml; what the user set, vector envs and resumed runs stay."""

import subprocess
import sys

import pytest
import yaml

from relayrl.algos import available, get_algo
from relayrl.config import build_config
from relayrl.training.observation_defaults import observation_defaults

IMAGE_ENV = "MinAtar/Breakout-v1"  # [10, 10, 4] boolean planes
WITH_IMAGE_DEFAULTS = [name for name in available() if get_algo(name).config_cls.image_defaults]


def test_the_discrete_algorithms_that_learn_from_pictures_have_image_defaults():
    assert "ppo" in WITH_IMAGE_DEFAULTS


@pytest.mark.parametrize("algo", WITH_IMAGE_DEFAULTS)
def test_each_image_default_is_an_option_of_the_section_and_valid(algo):
    cls = get_algo(algo).config_cls
    assert set(cls.image_defaults) <= set(cls.model_fields) and cls.image_source
    chosen = cls.model_validate(cls.image_defaults)
    assert {k: getattr(chosen, k) for k in cls.image_defaults} == cls.image_defaults
    assert any(getattr(cls(), k) != v for k, v in cls.image_defaults.items())  # they change something


@pytest.mark.parametrize("algo", WITH_IMAGE_DEFAULTS)
def test_an_image_env_takes_the_image_defaults_for_what_the_user_left_unset(algo, capsys):
    cls = get_algo(algo).config_cls
    kept, *filled = sorted(cls.image_defaults)
    mine = cls.model_fields[kept].default  # the user sets one option, to its vector default: it must stay
    config = build_config(algo, {algo: {kept: mine}}, (), {"env.id": IMAGE_ENV})
    out = observation_defaults(config)
    section = out.algo_config
    assert getattr(section, kept) == mine
    assert {k: getattr(section, k) for k in filled} == {k: cls.image_defaults[k] for k in filled}
    notice = capsys.readouterr().err
    assert notice.count("image defaults") == 1 and IMAGE_ENV in notice
    assert all(f"{algo}.{k}=" in notice for k in filled) and f"{algo}.{kept}=" not in notice
    # recorded: the chosen values are part of the config as saved, and a config read back changes no more
    reread = build_config(algo, yaml.safe_load(yaml.safe_dump(out.model_dump(mode="json"))))
    assert observation_defaults(reread).algo_config == section and capsys.readouterr().err == ""


@pytest.mark.parametrize("algo", WITH_IMAGE_DEFAULTS)
def test_vector_observations_keep_the_defaults_and_say_nothing(algo, capsys):
    config = build_config(algo, None, (), {"env.id": "CartPole-v1"})
    assert observation_defaults(config) is config
    assert capsys.readouterr().err == ""


def test_a_run_on_pictures_records_the_image_defaults_in_its_config_yaml(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "relayrl", "train", "ppo", "--env", IMAGE_ENV, "--total-steps", "256",
                           "--run-dir", str(run), "--set", "env.num_envs=2", "--set", "ppo.num_steps=64",
                           "--set", "eval.freq=0", "--set", "eval.episodes=1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("image defaults") == 1
    saved = yaml.safe_load((run / "config.yaml").read_text())["ppo"]
    image = get_algo("ppo").config_cls.image_defaults
    assert saved["num_steps"] == 64  # set on the command line: kept
    assert {k: saved[k] for k in image if k != "num_steps"} == {k: v for k, v in image.items() if k != "num_steps"}
