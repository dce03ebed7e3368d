"""Training under action masks (docs/usage.md, "Action masks"): PPO, APPO and DQN on an env where only
the mask tells which option pays, locally, on workers and through the simulator bridge; zero forbidden
actions in training and evaluation, and a mask of the wrong length ends `relayrl train` with exit 2."""

from __future__ import annotations

import shlex
import sys

import pytest

from relayrl import launch
from relayrl.config import build_config
from relayrl.testing.masked import MaskedChoiceEnv

ENV = "relayrl.testing.masked:relayrl-test/MaskedChoice-v0"
SMALL = {"ppo": ["ppo.num_steps=32"], "appo": ["appo.num_steps=32"],
         "dqn": ["dqn.hidden_sizes=[64]", "dqn.start_training=256", "dqn.epsilon_decay_steps=800"]}


def run(tmp_path, algo, *sets, steps=2048):
    config = build_config(algo, None, [f"env.id={ENV}", "env.manager=sync", "env.num_envs=4", "eval.freq=1024",
                                       "eval.episodes=8", *SMALL[algo], *sets], {"total_steps": steps, "seed": 0})
    return launch.run(config, run_dir=tmp_path / "run", tensorboard=False)


@pytest.mark.parametrize("algo", ["ppo", "appo", "dqn"])
def test_masked_training_takes_no_forbidden_action_and_learns_what_only_the_mask_shows(tmp_path, algo):
    """Without masks the best constant choice pays about 4 of 10 (the observation hides which options are
    allowed); reading them, the policy learns to take the lowest allowed option: 10."""
    before = MaskedChoiceEnv.forbidden_taken
    summary = run(tmp_path, algo, steps=1536 if algo == "dqn" else 2048)
    assert MaskedChoiceEnv.forbidden_taken == before  # training and evaluation envs live in this process
    assert summary["best_eval_return"] >= 9.0, summary


def test_ppo_learns_a_two_branch_multidiscrete_task_with_a_mask_per_branch(tmp_path):
    before = MaskedChoiceEnv.forbidden_taken
    summary = run(tmp_path, "ppo", "env.kwargs={nvec: [3, 4]}", steps=3072)
    assert MaskedChoiceEnv.forbidden_taken == before
    assert summary["best_eval_return"] >= 9.0, summary


def test_a_dict_observation_with_an_action_mask_entry_trains(tmp_path):
    before = MaskedChoiceEnv.forbidden_taken
    summary = run(tmp_path, "ppo", "env.kwargs={dict_obs: true}", steps=512)
    assert MaskedChoiceEnv.forbidden_taken == before and summary["env_steps"] >= 512


@pytest.mark.extended  # (worker processes start slowly; the collectors they run are the ones tested above)
def test_mp_workers_collect_under_masks(tmp_path):
    """Workers' envs run in other processes: a forbidden option costs 1, so every episode return >= 0
    and a perfect evaluation prove the masks were honoured there too."""
    summary = run(tmp_path, "ppo", "workers=2", "backend=mp", steps=2048)
    assert summary["best_eval_return"] >= 9.0, summary


def test_ppo_and_dqn_train_on_a_bridge_behaviour_with_two_masked_branches(tmp_path):
    """The trainer refuses to send an option a simulator's mask forbids (a BridgeError ends the run), so a
    finished run took none; the evaluation shows the masks were read."""
    env = f"bridge:{shlex.quote(sys.executable)} -m relayrl.bridge.examples.masked_choice"
    for algo in ("ppo", "dqn"):
        config = build_config(algo, None, [f"env.id={env}", "eval.freq=0", "eval.episodes=8", *SMALL[algo]],
                              {"total_steps": 1024, "seed": 0})
        summary = launch.run(config, run_dir=tmp_path / algo, tensorboard=False)
        assert summary["last_eval_return"] >= 8.0, (algo, summary)


def test_a_mask_of_the_wrong_length_ends_relayrl_train_with_exit_2(tmp_path, capsys):
    from relayrl.cli import main

    code = main(["train", "ppo", "--env", ENV, "--set", "env.kwargs={nvec: [3, 4], bad_width: true}",
                 "--set", "env.manager=sync", "--run-dir", str(tmp_path / "run"), "--quiet", "--no-tensorboard"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.startswith("relayrl: error:")]
    assert len(lines) == 1 and "MultiDiscrete([3 4]) takes a mask of 7 booleans" in lines[0], err
