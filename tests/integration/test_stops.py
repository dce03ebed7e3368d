"""Stops besides env steps and the stop value: training iterations (--train-iter) and wall time (--time-limit),
each in summary.json's stop_reason, with a final evaluation and a resume that goes on or says it is complete."""

import json

import relayrl
from relayrl.cli import main

TINY_PPO = {"env": {"num_envs": 2}, "ppo": {"num_steps": 32, "epochs": 2, "batch_size": 32},
            "eval": {"freq": 0, "episodes": 2, "num_envs": 2}}
TINY_DQN = {"dqn": {"start_training": 200, "hidden_sizes": [16]}, "eval": {"freq": 0, "episodes": 2, "num_envs": 2}}


def test_train_iter_stops_ppo_after_the_round_that_reaches_it_and_replay_updates_exactly(tmp_path):
    ppo = relayrl.train("ppo", "CartPole-v1", TINY_PPO, run_dir=tmp_path / "ppo", train_iter=9)
    per_round = 2 * (2 * 32 // 32)  # epochs x minibatches of a 2 x 32-step rollout: its epochs run whole
    assert ppo.summary["stop_reason"] == "train_iter"
    assert 9 <= ppo.summary["updates"] < 9 + per_round and ppo.summary["env_steps"] < 1_000_000
    assert ppo.summary["last_eval_return"] is not None  # the final evaluation, as at total_steps
    dqn = relayrl.train("dqn", "CartPole-v1", TINY_DQN, run_dir=tmp_path / "dqn", train_iter=150)
    assert dqn.summary["stop_reason"] == "train_iter" and dqn.summary["updates"] == 150
    assert (tmp_path / "dqn" / "checkpoints" / "last.safetensors").is_file()


def test_time_limit_stops_at_the_end_of_the_round_that_reaches_it(tmp_path):
    run = relayrl.train("ppo", "CartPole-v1", TINY_PPO, run_dir=tmp_path / "run", time_limit_s=1.5,
                        stop_value=10_000)
    assert run.summary["stop_reason"] == "time_limit"
    assert run.summary["wall_time_s"] >= 1.5 and run.summary["env_steps"] < 1_000_000


def test_a_run_resumed_past_its_train_iter_says_so_and_a_larger_one_goes_on(tmp_path, capsys):
    run_dir = tmp_path / "run"
    relayrl.train("dqn", "CartPole-v1", TINY_DQN, run_dir=run_dir, train_iter=100)
    before = (run_dir / "summary.json").read_bytes()
    code = main(["train", "--resume", str(run_dir), "--quiet"])
    err = capsys.readouterr().err
    assert code == 0 and "reach train_iter 100" in err and "--train-iter 200" in err
    assert (run_dir / "summary.json").read_bytes() == before
    assert main(["train", "--resume", str(run_dir), "--train-iter", "160", "--quiet"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "train_iter" and summary["updates"] == 160
