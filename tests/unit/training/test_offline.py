"""Offline runs refuse what cannot work before anything is written: no dataset, a bad one, IQL on Discrete
actions, workers. One clear line, exit code 2, no run directory."""

import numpy as np
import pytest

from relayrl.cli import main


def pendulum_npz(path, n=50, obs_dim=3):
    rng = np.random.default_rng(0)
    np.savez(path, obs=rng.normal(size=(n, obs_dim)), action=rng.uniform(-2, 2, (n, 1)), reward=rng.normal(size=n),
             next_obs=rng.normal(size=(n, obs_dim)), terminated=np.zeros(n, bool))
    return path


@pytest.mark.parametrize("args, expected", [
    (["train", "bc", "--env", "Pendulum-v1"], "set bc.dataset=PATH"),
    (["train", "iql", "--env", "Pendulum-v1"], "set iql.dataset=PATH"),
    (["train", "bc", "--env", "Pendulum-v1", "--set", "bc.dataset=none.npz"], "dataset 'none.npz' not found"),
    (["train", "bc", "--env", "CartPole-v1", "--set", "bc.dataset=pendulum.npz"], "obs has shape (50, 3), expected (50, 4)"),
    (["train", "iql", "--env", "CartPole-v1", "--set", "iql.dataset=pendulum.npz"], "IQL learns continuous (Box) actions"),
    (["train", "bc", "--env", "Pendulum-v1", "--set", "bc.dataset=pendulum.npz", "--workers", "2"],
     "drop --workers/--backend/--server"),
    (["collect", "no/such/run", "-o", "out.npz"], "run directory or checkpoint 'no/such/run' not found"),
    (["collect", "no/such/run", "-o", "pendulum.npz"], "exists already"),
])
def test_offline_mistakes_exit_2_with_one_line_and_write_nothing(args, expected, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    pendulum_npz(tmp_path / "pendulum.npz")
    before = sorted(p.name for p in tmp_path.iterdir())
    code = main([*args, "--quiet"] if args[0] == "train" else args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no run directory, no dataset
