"""Multi-agent from the command line: ``relayrl train ppo --env pettingzoo:module:env_fn`` trains one shared
policy over every agent of a PettingZoo ParallelEnv (agents joining and leaving), and ``relayrl eval``,
``--resume`` and ``relayrl.load`` work on the run; bad ids and backends are refused before anything is written."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

import relayrl  # noqa: E402
from relayrl import launch  # noqa: E402
from relayrl.cli import main  # noqa: E402
from relayrl.config import build_config  # noqa: E402
from relayrl.envs.multiagent import MultiAgentVectorEnv, multiagent_envs, pettingzoo_factory  # noqa: E402
from relayrl.policy.encoders import SmallCNN  # noqa: E402
from relayrl.testing.multiagent_envs import MaskedPickEnv, RelayTeamEnv  # noqa: E402
from relayrl.training.agent_collectors import AgentEvaluator  # noqa: E402
from relayrl.testing.policies import UniformPolicy  # noqa: E402

ENV = "pettingzoo:relayrl.testing.multiagent_envs:relay_team"
LEARN = ["--set", "env.num_envs=4", "--set", "ppo.num_steps=32", "--set", "ppo.batch_size=128", "--set",
         "ppo.gamma=0.5", "--set", "eval.episodes=16", "--set", "eval.num_envs=4", "--set", "eval.freq=4096",
         "--quiet", "--no-tensorboard"]


def relayrl_cli(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "relayrl", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def test_cli_trains_evaluates_resumes_and_loads_a_pettingzoo_run(tmp_path, capsys):
    """RelayTeamEnv: a_2 joins after step 2, a_0 leaves after step 5; perfect play earns 6.5 per evaluated
    agent episode, random play about 2.2."""
    run_dir = tmp_path / "run"
    run = relayrl_cli("train", "ppo", "--env", ENV, "--total-steps", 8192, "--run-dir", run_dir, *LEARN)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    with MultiAgentVectorEnv([RelayTeamEnv] * 4) as env:
        random_return = AgentEvaluator(env, 16, seed=1).evaluate(UniformPolicy(env.single_observation_space, env.single_action_space)).mean
    assert random_return < 3.0
    assert summary["env"] == ENV and summary["last_eval_return"] >= 4.3, (summary, random_return)

    assert main(["eval", str(run_dir), "--episodes", "8"]) == 0  # (in this process: a second interpreter costs seconds)
    assert capsys.readouterr().out.startswith(f"{ENV}: return ")

    assert main(["train", "ppo", "--resume", str(run_dir), "--total-steps", "9216", "--quiet", "--no-tensorboard"]) == 0
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] >= 9216

    policy = relayrl.load(run_dir)
    obs = np.zeros((2, 6), np.float32)
    obs[:, 0], obs[0, 3], obs[1, 4] = 1.0, 1.0, 1.0  # target 0; agents a_0 and a_1
    assert policy.predict(obs).shape == (2,) and policy.predict(obs[0]).shape == ()


def test_image_observations_get_the_cnn(tmp_path):
    """Agents seeing uint8 [6, 7, 7] images train with the small CNN, and the run loads."""
    config = build_config("ppo", None, ["env.num_envs=2", "ppo.num_steps=16", "ppo.batch_size=32", "ppo.epochs=1",
                                        "eval.freq=0", "eval.episodes=2", "eval.num_envs=1",
                                        "env.kwargs={image: true}"],
                          {"total_steps": 96, "env.id": ENV})
    summary = launch.run(config, run_dir=tmp_path / "run", tensorboard=False)
    assert summary["env_steps"] >= 96 and summary["last_eval_return"] is not None
    policy = relayrl.load(tmp_path / "run")
    assert isinstance(policy.model.actor_encoder, SmallCNN)
    assert policy.predict(np.zeros((3, 6, 7, 7), np.uint8)).shape == (3,)


def test_an_aec_env_function_is_converted():
    factory = pettingzoo_factory("pettingzoo:relayrl.testing.multiagent_envs:relay_team_aec")
    config = build_config("ppo", None, ["env.num_envs=2", "eval.episodes=1"],
                          {"env.id": "pettingzoo:relayrl.testing.multiagent_envs:relay_team_aec"})
    env, _ = multiagent_envs(config, factory, evaluation=False)
    with env:
        turn = env.reset(seed=0)
        for _ in range(3):
            turn = env.step(np.zeros(len(turn.ids), np.int64))
        assert sorted(turn.ids.tolist()) == [0, 1, 2, 3, 4, 5]  # a_2 of both copies joined after step 2


MASKED = "pettingzoo:relayrl.testing.multiagent_envs:masked_pick"


@pytest.mark.parametrize("algo, mask_in, steps", [("ppo", "obs", 3072), ("dqn", "info", 1024)])
def test_agents_with_dict_observations_and_masks_learn_without_a_forbidden_action(tmp_path, algo, mask_in, steps):
    """MaskedPickEnv: a Dict observation (target, agent number) packed into one row, and a mask (the Dict's
    action_mask entry, or each agent's info) allowing the right action and one other: random allowed play earns
    4 per 8-step episode, perfect play 8, a forbidden action -1 (counted). In this process, to read the count."""
    MaskedPickEnv.forbidden_taken = 0
    ppo = ["--set", "ppo.num_steps=32", "--set", "ppo.batch_size=128"] if algo == "ppo" else []
    code = main(["train", algo, "--env", MASKED, "--set", f"env.kwargs={{mask_in: {mask_in}}}", "--total-steps",
                 str(steps), "--run-dir", str(tmp_path / "run"), "--set", f"{algo}.gamma=0.5", "--set",
                 "env.num_envs=4", *ppo, "--set", "eval.episodes=16", "--set", "eval.num_envs=4", "--set",
                 "eval.freq=1024", "--quiet", "--no-tensorboard"])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert code == 0 and MaskedPickEnv.forbidden_taken == 0, (summary, MaskedPickEnv.forbidden_taken)
    assert summary["last_eval_return"] >= 6.5, summary
    policy = relayrl.load(tmp_path / "run")
    obs = {"agent": np.array([0, 1]), "target": np.array([2, 2])}  # predict takes the Dict, packed as the env's
    mask = np.array([[0, 0, 1, 0, 1], [1, 0, 0, 1, 0]], bool)  # the right action (2, then 3) and another
    np.testing.assert_array_equal(policy.predict(obs, action_mask=mask), [2, 3])
    np.testing.assert_array_equal(policy.predict({**obs, "action_mask": mask}), [2, 3])  # the env's Dict as it is


@pytest.mark.parametrize("kwargs, text", [
    ("{mask_width: 4}", r"agent 'a_0': the 'action_mask' entry of its observation space is Box(0, 1, (4,), int8), "
                        r"but Discrete(5) takes a mask of 5 booleans"),
    ("{mask_in: info, mask_width: 4}", "agent 'a_0' of env copy 0: info['action_mask'] has shape (4,), but "
                                       "Discrete(5) takes a mask of 5 booleans, True = allowed: give 5 entries"),
    ("{extra_key: true}", "key 'board' has no built-in encoder"),
])
def test_masks_and_keys_that_do_not_fit_exit_2_with_one_message(tmp_path, capsys, kwargs, text):
    code = main(["train", "ppo", "--env", MASKED, "--set", f"env.kwargs={kwargs}", "--total-steps", "64",
                 "--run-dir", str(tmp_path / "run"), "--quiet", "--no-tensorboard"])
    err = capsys.readouterr().err
    assert code == 2 and text in err and err.count("relayrl: error:") == 1, err


@pytest.mark.parametrize("args, text", [
    (["--env", "pettingzoo:no_such_module_xyz:env"], "cannot import module 'no_such_module_xyz'"),
    (["--env", "pettingzoo:relayrl.testing.multiagent_envs:nope"], "has no attribute 'nope'"),
    (["--env", "pettingzoo:relayrl.testing.multiagent_envs"], "pettingzoo:package.module:env_fn"),
    (["--env", "pettingzoo:relayrl.testing.multiagent_envs:not_an_env"], "returned object, not a PettingZoo"),
    (["--env", "pettingzoo:pettingzoo.classic.tictactoe_v3:env", "--set", "env.frame_stack=2"],  # (a game
     "env.frame_stack do not apply to a turn-based PettingZoo game"),                  # trains: test_turn_based_training)
    (["--env", ENV, "--workers", "2"], "PettingZoo envs train in this process"),
    (["--env", ENV, "--set", "env.max_episode_steps=5"], "env.max_episode_steps do not apply to PettingZoo envs"),
    (["--env", ENV, "--set", "env.manager=native"], "env.manager do not apply to PettingZoo envs"),
])
def test_bad_pettingzoo_runs_are_refused_before_anything_is_written(tmp_path, capsys, args, text):
    code = main(["train", "ppo", *args, "--run-dir", str(tmp_path / "run"), "--quiet", "--no-tensorboard"])
    err = capsys.readouterr().err
    assert code == 2 and text in err and err.count("relayrl: error:") == 1, err
    assert not (tmp_path / "run").exists()
