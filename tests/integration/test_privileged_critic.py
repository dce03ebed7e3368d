"""Privileged critic inputs (``ppo.critic_only_keys``) end to end: PPO trains with them on two mp rollout workers
and through the relay from a ``relayrl worker`` process (workers send the whole observation, so the learner's
critic has the privileged key for its targets), the checkpoint records the option, and the loaded policy
predicts from the actor's key alone; a privileged key the env does not have is one clear error, exit 2,
nothing written."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import yaml

import relayrl
from relayrl import launch
from relayrl.config import build_config

from relay_procs import train_with_one_worker  # same folder

NOISY = "relayrl.testing.envs:relayrl-test/NoisyPendulum-v0"  # {"obs": noisy, "state": clean}


def test_ppo_with_a_privileged_critic_trains_on_two_mp_workers_and_predicts_without_the_key(tmp_path):
    sets = ["ppo.critic_only_keys=[state]", "workers=2", "backend=mp", "env.num_envs=2", "ppo.num_steps=64",
            "ppo.batch_size=128", "eval.freq=1024", "eval.episodes=2", "threads=1"]
    config = build_config("ppo", None, sets, {"env.id": NOISY, "total_steps": 2048, "seed": 0})
    summary = launch.run(config, run_dir=tmp_path / "run", tensorboard=False)
    assert summary["backend"] == "mp" and summary["env_steps"] >= 2048 and math.isfinite(summary["last_eval_return"])
    recorded = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert recorded["ppo"]["critic_only_keys"] == ["state"]
    policy = relayrl.load(tmp_path / "run")
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    actions = policy.predict({"obs": obs})  # no "state": the actor does not need it
    assert actions.shape == (4, 1) and np.all(np.abs(actions) <= 2.0)
    with_state = policy.predict({"obs": obs, "state": np.ones((4, 3), np.float32)})
    np.testing.assert_array_equal(actions, with_state)


def test_a_privileged_key_the_env_does_not_have_is_refused_before_anything_is_written(tmp_path):
    run = subprocess.run([sys.executable, "-m", "relayrl", "train", "ppo", "--env", NOISY, "--set",
                          "ppo.critic_only_keys=[velocity]", "--total-steps", "512", "--run-dir",
                          str(tmp_path / "run"), "--quiet", "--no-tensorboard"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr[-2000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("relayrl: error:")]
    assert len(errors) == 1 and "'velocity'" in errors[0] and "'obs', 'state'" in errors[0], run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "run").exists()


def test_ppo_with_a_privileged_critic_trains_from_a_remote_worker_through_the_relay(tmp_path):
    sets = ["--set=ppo.critic_only_keys=[state]", "--set=env.num_envs=2", "--set=ppo.num_steps=64",
            "--set=net.heartbeat_s=0.2"]
    train_with_one_worker("ppo", NOISY, tmp_path / "run",
                          ["--total-steps", "1024", "--set=eval.freq=512", "--set=eval.episodes=2", *sets], sets)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["backend"] == "relay" and summary["env_steps"] >= 1024, summary
    obs = np.zeros((2, 3), np.float32)
    assert relayrl.load(tmp_path / "run").predict({"obs": obs}).shape == (2, 1)
