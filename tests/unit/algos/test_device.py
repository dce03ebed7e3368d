"""The learner's device (``--device auto|cpu|cuda``): resolved against the machine and the algorithm,
refused with one message where it cannot be had, and published weights always on the CPU. Runs on a
machine without a GPU; the CUDA cases run where there is one."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from relayrl.algos import get_algo
from relayrl.cli import main
from relayrl.config import build_config
from relayrl.data.dtypes import to_tensor
from relayrl.errors import ConfigError
from relayrl.launch import train
from relayrl.policy.device import resolve_device

CUDA = torch.cuda.is_available()
SMALL = ["env.num_envs=2", "eval.freq=128", "eval.episodes=2", "eval.num_envs=2", "threads=1"]


def relayrl(capsys, *args) -> tuple[int, str]:
    """The CLI in this process (the cwd is the test's tmp_path): exit code and stderr."""
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


def test_auto_takes_cuda_only_where_there_is_one_and_the_algorithm_learns_on_it(monkeypatch):
    assert resolve_device("cpu", ("cpu", "cuda"), "dqn") == torch.device("cpu")
    assert resolve_device("auto", ("cpu", "cuda"), "dqn").type == ("cuda" if CUDA else "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the decision on a CUDA machine
    assert resolve_device("auto", ("cpu", "cuda"), "dqn").type == "cuda"
    assert resolve_device("auto", ("cpu",), "ppo").type == "cpu"
    with pytest.raises(ConfigError, match="ppo learns on the CPU only: use --device cpu"):
        resolve_device("cuda", ("cpu",), "ppo")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="no CUDA device.*use --device cpu"):
        resolve_device("cuda", ("cpu", "cuda"), "dqn")


@pytest.mark.skipif(CUDA, reason="this machine has CUDA")
def test_cuda_without_cuda_is_refused_in_one_line_before_anything_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, err = relayrl(capsys, "train", "dqn", "--env", "CartPole-v1", "--device", "cuda", "--quiet")
    assert code == 2, err
    assert "no CUDA device" in err and "--device cpu" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_device_cpu_from_the_command_line_trains_and_is_recorded(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    sets = [a for s in [*SMALL, "dqn.start_training=64", "dqn.batch_size=16", "dqn.hidden_sizes=[16]"]
            for a in ("--set", s)]
    code, err = relayrl(capsys, "train", "dqn", "--env", "CartPole-v1", "--device", "cpu", "--total-steps", 160,
                        "--run-dir", tmp_path / "run", "--quiet", "--no-tensorboard", *sets)
    assert code == 0, err
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["device"] == "cpu"


@pytest.mark.parametrize("device", ["auto"] + (["cuda"] if CUDA else []))
def test_sac_trains_on_the_resolved_device(tmp_path, device):
    sets = [*SMALL, "sac.start_training=64", "sac.batch_size=16", "sac.hidden_sizes=[16, 16]", f"device={device}"]
    config = build_config("sac", None, sets, {"total_steps": 160, "seed": 0})
    summary = train(config, run_dir=tmp_path / "run", quiet=True, tensorboard=False)
    assert summary["stop_reason"] == "total_steps" and summary["updates"] > 0


@pytest.mark.parametrize("algo", ["dqn", "sac", "ppo", "appo"])
def test_published_weights_are_cpu_tensors_wherever_the_learner_is(algo):
    obs = gym.spaces.Box(-1, 1, (3,), np.float32)
    act = gym.spaces.Discrete(2) if algo in ("dqn", "ppo", "appo") else gym.spaces.Box(-1, 1, (1,))
    entry = get_algo(algo)
    learner = entry.algo_cls(getattr(build_config(algo), algo), obs, act, 1)
    device = resolve_device("auto", learner.devices, algo)
    learner.to(device)
    if not entry.on_policy:  # one update on the device
        n = 8
        batch = {"obs": np.zeros((n, 3), np.float32), "next_obs": np.ones((n, 3), np.float32),
                 "action": np.zeros(n, np.int64) if algo == "dqn" else np.zeros((n, 1), np.float32),
                 "reward": np.ones(n, np.float32), "terminated": np.zeros(n, bool),
                 "discount": np.full(n, 0.99, np.float32)}
        learner.learn(batch)
        assert batch["priority"].shape == (n,)  # back on the CPU as numpy
    weights = learner.policy.get_weights()
    tensors = [v for part in weights.values() if isinstance(part, dict) for v in part.values()]
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    assert learner.policy.act(np.zeros((2, 3), np.float32), "eval").action.shape[0] == 2


def test_batches_move_as_stored_and_are_cast_on_the_device():
    images = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    moved = to_tensor(images, torch.device("meta"))  # any device but the CPU takes this path
    assert moved.device.type == "meta" and moved.dtype == torch.float32 and moved.shape == (2, 3, 4)
    assert to_tensor(images, torch.device("cpu")).equal(torch.from_numpy(images.astype(np.float32)))
