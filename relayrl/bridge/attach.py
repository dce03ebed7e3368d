"""One attached simulator for both training and evaluation (``--env bridge:attach``).

A simulator started by hand (an editor) is the only one there is, so the evaluation runs on it too,
between rollouts: ``SharedSimulator(env).training`` and ``.evaluation`` are two agent envs over the
same ``env``. An evaluation resets the simulator and plays its deterministic episodes; the next
training step then does not send the training policy's actions (they answer a turn the evaluation
replaced) but resets the simulator once more and ends the episodes training had running as
interrupted (truncated, with the last observation training saw and reward 0), so the training
collector's agents start fresh episodes and no trajectory crosses the evaluation.
"""

from __future__ import annotations

import numpy as np

from relayrl.envs.agents import AgentEnv, AgentTurn


class SharedSimulator:
    def __init__(self, env: AgentEnv):
        self.env = env
        self.training = _Training(self)
        self.evaluation = _Evaluation(self)
        self.evaluated = False  # an evaluation used the simulator since training's last turn
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.env.close()


class _View(AgentEnv):
    def __init__(self, shared: SharedSimulator):
        self.shared = shared
        self.single_observation_space = shared.env.single_observation_space
        self.single_action_space = shared.env.single_action_space
        self.num_envs = shared.env.num_envs

    @property
    def stats(self) -> dict:
        return self.shared.env.stats

    def close(self) -> None:
        self.shared.close()


class _Training(_View):
    def __init__(self, shared: SharedSimulator):
        super().__init__(shared)
        self.last: AgentTurn | None = None

    def reset(self, seed: int | None = None) -> AgentTurn:
        self.shared.evaluated = False
        self.last = self.shared.env.reset(seed)
        return self.last

    def step(self, actions: np.ndarray) -> AgentTurn:
        if not self.shared.evaluated or self.last is None:
            self.last = self.shared.env.step(actions)
            return self.last
        self.shared.evaluated = False
        turn, before = self.shared.env.reset(), self.last
        self.last = AgentTurn(
            ids=turn.ids, obs=turn.obs, reward=turn.reward, action_mask=turn.action_mask,
            end_ids=np.concatenate([before.ids, turn.end_ids]), end_obs=np.concatenate([before.obs, turn.end_obs]),
            end_reward=np.concatenate([np.zeros(len(before.ids), np.float32), turn.end_reward]),
            interrupted=np.concatenate([np.ones(len(before.ids), bool), turn.interrupted]))
        return self.last


class _Evaluation(_View):
    def reset(self, seed: int | None = None) -> AgentTurn:
        self.shared.evaluated = True
        return self.shared.env.reset(seed)

    def step(self, actions: np.ndarray) -> AgentTurn:
        return self.shared.env.step(actions)


__all__ = ["SharedSimulator"]
