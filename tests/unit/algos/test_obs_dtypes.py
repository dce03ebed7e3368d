"""Every built-in algorithm trains on float64, float32 and uint8 Box observations (issue 13, item 0).

Gymnasium's MuJoCo envs observe float64, image envs uint8; the learner's networks are float32.
These runs go through the whole path (env -> collector -> rollout or replay -> learner -> eval) for a
few updates, and check what the rollout and the replay store.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

from relayrl import launch
from relayrl.algos.ppo import PPO, PPOPolicy
from relayrl.config import build_config
from relayrl.data.replay import ReplayBuffer, choose_layout
from relayrl.envs.managers import make_vec
from relayrl.io.metrics import read_metrics
from relayrl.training.collector import OnPolicyCollector

ENV = "relayrl.testing.envs:relayrl-test/DtypeObs-v0"
SHAPES = {"float64": [5], "float32": [5], "uint8": [6, 6, 3]}  # uint8: a small image
STORED = {"float64": np.float32, "float32": np.float32, "uint8": np.uint8}

# (algo, action space, the settings of a run of a few updates)
SMALL = {
    "ppo": ["ppo.num_steps=16", "ppo.batch_size=16", "ppo.epochs=2", "ppo.hidden_sizes=[16, 16]"],
    "appo": ["appo.num_steps=16", "appo.batch_size=16", "appo.epochs=2", "appo.hidden_sizes=[16, 16]"],
    "dqn": ["dqn.start_training=48", "dqn.batch_size=16", "dqn.steps_per_iteration=8", "dqn.buffer_size=1000",
            "dqn.hidden_sizes=[16, 16]"],
    "sac": ["sac.start_training=48", "sac.batch_size=16", "sac.steps_per_iteration=8", "sac.buffer_size=1000",
            "sac.hidden_sizes=[16, 16]"],
    "crossq": ["crossq.start_training=48", "crossq.batch_size=16", "crossq.steps_per_iteration=8",
               "crossq.buffer_size=1000", "crossq.hidden_sizes=[16, 16]", "crossq.critic_hidden_sizes=[16, 16]"],
    "a2c": ["a2c.num_steps=16", "a2c.hidden_sizes=[16, 16]"],
    "pqn": ["pqn.num_steps=16", "pqn.epochs=2", "pqn.hidden_sizes=[16, 16]"],
}
CASES = [("ppo", "discrete"), ("ppo", "box"), ("appo", "discrete"), ("appo", "box"), ("dqn", "discrete"),
         ("sac", "box"), ("crossq", "box"), ("a2c", "box"), ("pqn", "discrete")]


def config_for(algo: str, env_id: str, sets: list[str], total_steps: int, **env_kwargs):
    common = ["env.num_envs=2", "eval.freq=64", "eval.episodes=2", "eval.num_envs=2", "threads=1"]
    overrides = {"total_steps": total_steps, "seed": 0, "env.id": env_id}
    if env_kwargs:
        overrides["env.kwargs"] = env_kwargs
    return build_config(algo, None, [*common, *SMALL[algo], *sets], overrides)


def assert_trained(summary: dict, run_dir) -> None:
    assert summary["stop_reason"] == "total_steps", summary
    assert summary["updates"] > 0 and summary["last_eval_return"] is not None
    events = [e for e in read_metrics(run_dir) if e["event"] == "train"]
    losses = {key: e[key] for e in events for key in e if key.startswith("train/loss/")}
    assert losses, "no loss was logged"
    assert all(math.isfinite(value) for value in losses.values()), losses


@pytest.mark.parametrize("dtype", ["float64", "float32", "uint8"])
@pytest.mark.parametrize("algo,actions", CASES)
def test_every_algorithm_trains_on_observations_of_every_dtype(tmp_path, algo, actions, dtype):
    config = config_for(algo, ENV, [], 192, dtype=dtype, shape=SHAPES[dtype], actions=actions)
    summary = launch.run(config, run_dir=tmp_path / "run", quiet=True, tensorboard=False)
    assert_trained(summary, tmp_path / "run")
    if algo in ("dqn", "sac", "crossq"):  # what the replay holds: float64 as float32, uint8 as uint8
        buffer = ReplayBuffer(1000, layout=choose_layout(SHAPES[dtype]))  # the layout the loop chose
        buffer.load(tmp_path / "run" / "checkpoints" / "replay.safetensors")
        spec = buffer.storage.spec
        assert spec["obs"][1] == spec["next_obs"][1] == np.dtype(STORED[dtype])
        assert spec["reward"][1] == spec["discount"][1] == np.dtype(np.float32)
        assert spec["action"][1] == np.dtype(np.int64 if actions == "discrete" else np.float32)


@pytest.mark.parametrize("dtype", ["float64", "float32", "uint8"])
def test_rollouts_store_observations_in_their_stored_dtype(dtype):
    shape = tuple(SHAPES[dtype])
    with make_vec(ENV, 2, env_kwargs={"dtype": dtype, "shape": shape}) as venv:
        cfg = build_config("ppo", None, SMALL["ppo"]).ppo
        algo = PPO(cfg, venv.single_observation_space, venv.single_action_space, 2)
        collector = OnPolicyCollector(venv, algo.policy, 16)
        collector.reset(seed=0)
        rollout = collector.collect()
    assert rollout["obs"].dtype == STORED[dtype] and rollout["obs"].shape == (16, 2, *shape)
    assert rollout["reward"].dtype == np.float32
    assert np.isfinite(algo.learn(rollout)["loss/value"])


def test_normalised_observations_are_stored_as_float32():
    cfg = build_config("ppo", None, ["ppo.obs_norm=true"]).ppo
    policy = PPOPolicy(gym.spaces.Box(0, 255, (6, 6, 3), np.uint8), gym.spaces.Discrete(3), cfg)
    obs = np.random.default_rng(0).integers(0, 256, (4, 6, 6, 3)).astype(np.uint8)
    assert policy.act(obs, "collect").obs.dtype == policy.obs_dtype == np.float32


def test_sac_and_ppo_train_on_a_mujoco_env(tmp_path):
    pytest.importorskip("mujoco")
    for algo in ("sac", "ppo"):
        config = config_for(algo, "InvertedPendulum-v5", ["eval.episodes=1", "eval.num_envs=1"], 128)
        summary = launch.run(config, run_dir=tmp_path / algo, quiet=True, tensorboard=False)
        assert_trained(summary, tmp_path / algo)
