"""One attached simulator for both training and evaluation (``--env bridge:attach``).

A simulator started by hand (an editor) is the only one there is, so the evaluation runs on it too,
between rollouts: ``SharedSimulator(env).training`` and ``.evaluation`` are two agent envs over the
same ``env`` (a ``BehaviourEnv``: every behaviour it trains). An evaluation resets the simulator and plays its deterministic episodes; the next
training step then does not send the training policy's actions (they answer a turn the evaluation
replaced) but resets the simulator once more and ends the episodes training had running as
interrupted (truncated, with the last observation training saw and reward 0), so the training
collector's agents start fresh episodes and no trajectory crosses the evaluation.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from relayrl.envs.agents import AgentTurn, BehaviourEnv


class SharedSimulator:
    def __init__(self, env: BehaviourEnv):
        self.env = env
        self.training = _Training(self)
        self.evaluation = _Evaluation(self)
        self.evaluated = False  # an evaluation used the simulator since training's last turn
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.env.close()


class _View(BehaviourEnv):
    def __init__(self, shared: SharedSimulator):
        self.shared = shared
        self.behaviours = shared.env.behaviours

    @property
    def stats(self) -> dict[str, Any]:
        return self.shared.env.stats

    def simulator_stats(self) -> dict[str, float]:
        return self.shared.env.simulator_stats()

    def close(self) -> None:
        self.shared.close()


class _Training(_View):
    def __init__(self, shared: SharedSimulator):
        super().__init__(shared)
        self.last: dict[str, AgentTurn] | None = None

    def reset(self, seed: int | None = None) -> dict[str, AgentTurn]:
        self.shared.evaluated = False
        self.last = self.shared.env.reset(seed)
        return self.last

    def step(self, actions: Mapping[str, np.ndarray]) -> dict[str, AgentTurn]:
        if not self.shared.evaluated or self.last is None:
            self.last = self.shared.env.step(actions)
            return self.last
        self.shared.evaluated = False
        turns, before = self.shared.env.reset(), self.last
        self.last = {name: _interrupting(turn, before[name]) for name, turn in turns.items()}
        return self.last


def _interrupting(turn: AgentTurn, before: AgentTurn) -> AgentTurn:
    """``turn`` (after a reset) with the agents that were deciding ``before`` ended as interrupted."""
    return AgentTurn(
        ids=turn.ids, obs=turn.obs, reward=turn.reward, action_mask=turn.action_mask,
        end_ids=np.concatenate([before.ids, turn.end_ids]), end_obs=np.concatenate([before.obs, turn.end_obs]),
        end_reward=np.concatenate([np.zeros(len(before.ids), np.float32), turn.end_reward]),
        interrupted=np.concatenate([np.ones(len(before.ids), bool), turn.interrupted]))


class _Evaluation(_View):
    def reset(self, seed: int | None = None) -> dict[str, AgentTurn]:
        self.shared.evaluated = True
        return self.shared.env.reset(seed)

    def step(self, actions: Mapping[str, np.ndarray]) -> dict[str, AgentTurn]:
        return self.shared.env.step(actions)


__all__ = ["SharedSimulator"]
