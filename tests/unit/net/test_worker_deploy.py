"""``relayrl worker --deploy RUN``: a trained run's policy on its own env and options, with no trainer."""

from __future__ import annotations

import logging
import re

import pytest

from relayrl.cli import main


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = tmp_path_factory.mktemp("deploy") / "run"
    logger = logging.getLogger("relayrl")  # (main() points it at stderr; conftest restores it per test only)
    saved = (list(logger.handlers), logger.propagate, logger.level)
    try:
        assert main(["train", "dqn", "--env", "CartPole-v1", "--total-steps", "300", "--run-dir", str(run),
                     "--quiet", "--no-tensorboard", "--set", "dqn.start_training=100", "--set", "eval.episodes=1",
                     "--set", "env.max_episode_steps=50"]) == 0
    finally:
        logger.handlers[:], logger.propagate, logger.level = saved
    return run


def test_deploy_runs_the_runs_policy_for_the_episodes_asked_and_writes_nothing(trained, capsys, tmp_path,
                                                                               monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in trained.rglob("*"))
    assert main(["worker", "--deploy", str(trained), "--episodes", "3"]) == 0
    returns = [float(r) for r in re.findall(r"episode \d+: return ([\d.]+)", capsys.readouterr().out)]
    assert len(returns) == 3 and all(0 < r <= 50 for r in returns)  # the run's own env options: 50-step episodes
    assert sorted(p.name for p in trained.rglob("*")) == before and not any(tmp_path.iterdir())


@pytest.mark.parametrize("extra, words", [
    (["--server", "127.0.0.1:9"], "drop --server"),
    (["--policy", "relayrl.testing.scripted:cartpole_balance"], "drop --policy"),
])
def test_deploy_refuses_what_a_deployment_has_no_use_for(trained, capsys, extra, words):
    assert main(["worker", "--deploy", str(trained), *extra]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_deploy_of_a_folder_that_is_no_run_is_one_message(tmp_path, capsys):
    assert main(["worker", "--deploy", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no checkpoint" in err and "Traceback" not in err
