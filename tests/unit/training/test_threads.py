"""The learner's torch thread count: picked by timing (threads=-1), or by the observations (null)."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import torch

from relayrl.config import build_config
from relayrl.core import Algorithm
from relayrl.envs.packed import PackedDict
from relayrl.training.threads import IMAGE_THREADS, default_threads, pick_threads, resolve_threads


def test_pick_threads_times_each_count_and_restores_torch():
    before = torch.get_num_threads()
    best, timings = pick_threads([32, 32], 64, passes=2)
    assert best in timings and timings[best] == min(timings.values())
    assert set(timings) == {k for k in (1, 2, 4, 8, 16, 32) if k <= (os.cpu_count() or 1)}
    assert all(t > 0 for t in timings.values())
    assert torch.get_num_threads() == before


class NoTimingStep(Algorithm):
    """An algorithm that offers no timing step (the default): threads=-1 times an MLP of its size."""

    def learn(self, batch, progress=0.0):
        return {}

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def test_threads_minus_one_resolves_to_a_count_and_others_stay(capsys):
    config = build_config("ppo", None, ["threads=-1", "ppo.hidden_sizes=[16]"])
    resolved = resolve_threads(config, NoTimingStep(config.ppo, None, None, 1))
    assert resolved.threads >= 1 and "threads=-1 picked" in capsys.readouterr().err
    same = build_config("ppo", None, ["threads=2"])
    assert resolve_threads(same, NoTimingStep(config.ppo, None, None, 1)) is same


def test_threads_null_gives_a_cnn_learner_a_thread_per_core_and_an_mlp_one():
    cores = min(os.cpu_count() or 1, IMAGE_THREADS)
    image = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    vector = gym.spaces.Box(-1, 1, (8,), np.float32)
    assert default_threads(image) == cores and default_threads(vector) == 1
    assert default_threads(PackedDict(gym.spaces.Dict({"camera": image, "speed": vector}))) == cores
    assert default_threads(PackedDict(gym.spaces.Dict({"a": vector, "b": gym.spaces.Discrete(3)}))) == 1
    assert build_config("ppo").threads is None  # resolved by the trainer, which records the count


def test_threads_null_gives_a_small_cnn_learner_one_thread(tmp_path):
    """MinAtar-sized images (the small CNN) train on one thread: a second one made PPO on MinAtar 8-45x slower with
    other processes on a 2-core machine's cores; a Nature-CNN image keeps one per core."""
    minatar = gym.spaces.Box(0, 1, (10, 10, 4), bool)
    pong = gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)
    assert default_threads(minatar) == 1
    assert default_threads(PackedDict(gym.spaces.Dict({"grid": minatar, "speed": gym.spaces.Box(-1, 1, (2,))}))) == 1
    assert default_threads(PackedDict(gym.spaces.Dict({"grid": minatar, "camera": pong}))) == min(
        os.cpu_count() or 1, IMAGE_THREADS)
