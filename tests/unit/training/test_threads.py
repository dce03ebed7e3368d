"""threads=-1: the learner's torch thread count picked by timing."""

from __future__ import annotations

import os

import torch

from relayrl.config import build_config
from relayrl.core import Algorithm
from relayrl.training.threads import pick_threads, resolve_threads


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
    resolved = resolve_threads(config, NoTimingStep())
    assert resolved.threads >= 1 and "threads=-1 picked" in capsys.readouterr().err
    same = build_config("ppo", None, ["threads=2"])
    assert resolve_threads(same, NoTimingStep()) is same
