"""The offline side of the training loop: updates from a dataset, no env steps (BC, IQL).

``OfflineRounds`` loads the algorithm's ``dataset`` (data/datasets.py: checked against the env's spaces before
the run directory is written) into a replay buffer of its size, once; every round then runs
``updates_per_round`` updates from it through ``ReplayUpdates``, as the replay loop does, so the Trainer
evaluates on the env, checkpoints, logs and writes the summary as for any run.

The loop's clock counts updates here: there are no env steps, so ``total_steps``, ``eval.freq``, the
``env_steps`` of metrics.jsonl and of the summary count gradient updates (a round's updates are counted as it
is gathered, so its log line carries the count after it; a round stopped early by Ctrl-C counts whole).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym

from relayrl.core import Algorithm
from relayrl.data.datasets import load_dataset
from relayrl.data.replay import ReplayBuffer
from relayrl.options import OfflineConfig
from relayrl.training.offpolicy import ReplayUpdates
from relayrl.training.rounds import Rounds, UpdatesDue


class OfflineRounds(Rounds[UpdatesDue]):
    learning: ReplayUpdates

    def __init__(self, algo: Algorithm, cfg: OfflineConfig, obs_space: gym.Space, act_space: gym.Space, seed: int,
                 total_steps: int):
        self.cfg, self.total_steps = cfg, total_steps
        data = load_dataset(cfg.dataset, obs_space, act_space)
        self.transitions = len(data["obs"])
        self.buffer = ReplayBuffer(self.transitions, seed=seed)
        self.buffer.add(data)
        self.learning = ReplayUpdates(algo, self.buffer, cfg.batch_size)

    def reset(self, seed: int | None) -> None:
        """Nothing to start: the dataset is loaded."""

    def gather(self, env_steps: int, updates: int) -> tuple[UpdatesDue, int]:
        """The round's updates, which are also its steps on the loop's clock (module docstring)."""
        self.learning.algo.set_progress(env_steps, self.total_steps)  # (updates done: e.g. IQL's actor schedule)
        due = max(0, min(self.cfg.updates_per_round, self.total_steps - env_steps))
        return UpdatesDue(due), due

    def collect_time_elsewhere(self) -> float:
        return 0.0  # (no collection)

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        return [], []

    def stats(self) -> dict[str, float]:
        return {"offline/transitions": float(self.transitions)}

    def state(self) -> dict[str, Any]:
        return {"offline_updates": self.learning.updates}

    def save(self, folder: Path) -> None:
        """Nothing: the dataset is read again on a resume (no sample source to save)."""

    def restore(self, folder: Path, state: dict[str, Any]) -> None:
        """The dataset is read again from ``dataset`` (nothing of it is saved with the run)."""
        self.learning.updates = int(state.get("offline_updates", 0))
