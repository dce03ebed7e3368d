import pytest
import yaml

from relayrl.config import build_config, default_config, diff_configs, parse_set, read_yaml, to_yaml
from relayrl.errors import ConfigError


def test_defaults_then_file_then_set_then_flags():
    config = build_config(
        "ppo",
        {"seed": 3, "ppo": {"epochs": 4, "gamma": 0.9}},
        ["ppo.epochs=7", "env.num_envs=2"],
        {"seed": 11},
    )
    assert config.ppo.epochs == 7  # --set beats the file
    assert config.ppo.gamma == 0.9  # the file beats the default
    assert config.seed == 11  # CLI flags beat everything
    assert config.env.num_envs == 2
    assert config.ppo.batch_size == default_config("ppo").ppo.batch_size


def test_a_dict_takes_dotted_keys_as_set_spells_them():
    """``train("dqn", env, {"dqn.n_step": 1})``: once answered "unknown config key 'dqn.n_step': did you mean
    'dqn.n_step'?"."""
    config = build_config("dqn", {"dqn.n_step": 1, "dqn": {"gamma": 0.9}, "env.num_envs": 3})
    assert (config.dqn.n_step, config.dqn.gamma, config.env.num_envs) == (1, 0.9, 3)
    with pytest.raises(ConfigError, match="dqn.n_stpe"):  # a typo is still named
        build_config("dqn", {"dqn.n_stpe": 1})


def test_set_parses_yaml_scalars_and_scientific_floats():
    assert parse_set("ppo.actor_lr=1e-3") == (["ppo", "actor_lr"], 0.001)
    assert parse_set("ppo.kl=null") == (["ppo", "kl"], None)
    assert parse_set("ppo.hidden_sizes=[32, 32]") == (["ppo", "hidden_sizes"], [32, 32])
    assert parse_set("env.id=Pendulum-v1") == (["env", "id"], "Pendulum-v1")


def test_printed_default_config_reads_back_identically(tmp_path):
    config = default_config("ppo")
    path = tmp_path / "ppo.yaml"
    path.write_text(to_yaml(config))
    assert build_config("ppo", read_yaml(path)) == config
    assert yaml.safe_load(path.read_text())["ppo"]["epochs"] == config.ppo.epochs


def test_misspelled_key_suggests_the_close_match():
    with pytest.raises(ConfigError) as err:
        build_config("ppo", None, ["ppo.epochz=3"])
    assert "'ppo.epochz'" in str(err.value) and "did you mean 'ppo.epochs'" in str(err.value)


def test_unknown_top_level_section_lists_valid_keys():
    with pytest.raises(ConfigError) as err:
        build_config("ppo", {"runner": {"x": 1}})
    assert "'runner'" in str(err.value) and "total_steps" in str(err.value)


def test_wrong_type_names_key_value_and_expectation():
    with pytest.raises(ConfigError) as err:
        build_config("ppo", None, ["ppo.epochs=ten"])
    msg = str(err.value)
    assert "ppo.epochs" in msg and "'ten'" in msg and "integer" in msg


def test_out_of_range_value_is_refused():
    with pytest.raises(ConfigError) as err:
        build_config("ppo", None, ["ppo.gamma=1.5"])
    assert "ppo.gamma" in str(err.value) and "1.5" in str(err.value) and "less than or equal to 1" in str(err.value)


def test_set_into_a_scalar_is_refused():
    with pytest.raises(ConfigError, match="ppo.epochs is a value, not a section"):
        build_config("ppo", None, ["ppo.epochs.x=1"])


def test_set_without_equals_is_refused():
    with pytest.raises(ConfigError, match="expected key=value"):
        build_config("ppo", None, ["ppo.epochs"])


def test_unknown_algorithm_suggests():
    with pytest.raises(ConfigError, match="did you mean 'ppo'"):
        build_config("ppp")


def test_config_file_problems(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        read_yaml(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("ppo: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        read_yaml(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        read_yaml(listy)
    with pytest.raises(ConfigError, match="for algo 'sac'"):
        build_config("ppo", {"algo": "sac"})


def test_yaml_is_data_never_code(tmp_path):
    evil = tmp_path / "evil.yaml"
    evil.write_text("seed: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        read_yaml(evil)


def test_diff_reports_changed_options():
    a = default_config("ppo")
    b = build_config("ppo", None, ["ppo.epochs=3", "seed=5"])
    assert diff_configs(a, b) == [f"ppo.epochs: {a.ppo.epochs} -> 3", "seed: 0 -> 5"]


def test_building_a_config_changes_neither_the_registered_defaults_nor_the_callers_data():
    """--set writes into the config's own tree: the caller's YAML data (env.kwargs, which is merged whole) and the
    registered defaults that the next build starts from stay as they were."""
    data = {"env": {"kwargs": {"size": 3}}}
    build_config("sac", data, ["env.kwargs.size=5", "env.kwargs.extra=1"])
    assert data == {"env": {"kwargs": {"size": 3}}}
    assert build_config("sac").env.kwargs == {}
