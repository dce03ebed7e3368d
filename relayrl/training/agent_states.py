"""A recurrent policy's hidden state per agent id, for agent envs (``relayrl/envs/agents.py``).

On vector envs a recurrent policy keeps one state row per env (``Policy.hidden``). An agent env's rows
change every turn (whoever decides now), so ``AgentStates`` keeps each agent's own row, by id, and hands
the policy the rows of the agents about to act::

    states = AgentStates(policy, "collect")
    out, start = states.act(turn.ids, turn.obs, turn.action_mask)  # start: each row's state before acting
    turn = env.step(out.env_action)
    states.end(turn.end_ids)                                         # their next decision starts from zeros

- An agent that skips turns keeps its state until it decides again.
- An agent whose episode ends (``end_ids``) loses it: its id, reused by the next episode or a new agent,
  starts from zeros. ``value(ids, obs)`` (the bootstrap of an interrupted episode's final observation)
  reads the states before ``end`` drops them.
- A feed-forward policy has no state: ``act`` is ``act_masked`` and ``start`` is None.

The states live in one float32 table, a row per live agent (rows of ended agents are reused), so memory is
bounded by the most agents alive at once.
"""

from __future__ import annotations

import numpy as np
import torch

from relayrl.core import Policy
from relayrl.types import Mode, PolicyOutput

__all__ = ["AgentStates"]


class AgentStates:
    def __init__(self, policy: Policy, mode: Mode):
        self.policy, self.mode = policy, mode
        self.recurrent = bool(policy.recurrent)
        self._row: dict[int, int] = {}  # agent id -> row of the table
        self._free: list[int] = []
        self._table = np.zeros((0, policy.state_size), np.float32)

    def __len__(self) -> int:
        """Agents with a state (alive, having acted since their episode began)."""
        return len(self._row)

    def clear(self) -> None:
        """Every agent starts from zeros (after a reset)."""
        self._row.clear()
        self._free.clear()

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """The table rows of ``ids``, zeroed new ones for agents without a state."""
        rows = np.empty(len(ids), np.int64)
        for k, agent in enumerate(ids.tolist()):
            row = self._row.get(agent)
            if row is None:
                row = self._free.pop() if self._free else self._grow()
                self._table[row] = 0.0
                self._row[agent] = row
            rows[k] = row
        return rows

    def _grow(self) -> int:
        size = len(self._table)
        self._table = np.concatenate([self._table, np.zeros((max(size, 8), self._table.shape[1]), np.float32)])
        self._free.extend(range(len(self._table) - 1, size, -1))
        return size

    def states(self, ids: np.ndarray) -> np.ndarray:
        """[n, state_size] copies of the states of ``ids`` (zeros for agents without one)."""
        return self._table[self.rows(ids)].copy()

    def act(self, ids: np.ndarray, obs: np.ndarray, action_mask: np.ndarray | None
            ) -> tuple[PolicyOutput, np.ndarray | None]:
        """The policy's actions for the agents ``ids``, each from its own state, which then advances; and the
        [n, state_size] states they acted from (None for a feed-forward policy)."""
        if not self.recurrent:
            return self.policy.act_masked(obs, self.mode, action_mask), None
        rows = self.rows(ids)
        start = self._table[rows].copy()
        self.policy.set_hidden(self.mode, torch.from_numpy(start))
        out = self.policy.act_masked(obs, self.mode, action_mask)
        self._table[rows] = self.policy.hidden(self.mode, len(ids)).cpu().numpy()
        return out, start

    def value(self, ids: np.ndarray, obs: np.ndarray, action_mask: np.ndarray | None = None) -> np.ndarray:
        """V(obs) of the agents ``ids`` from their current states, which do not advance."""
        if self.recurrent:
            self.policy.set_hidden("collect", torch.from_numpy(self.states(ids)))  # (value reads the collect state)
        return self.policy.value_masked(obs, action_mask)

    def end(self, ids: np.ndarray) -> None:
        """The episodes of ``ids`` ended: their states are dropped (a new episode starts from zeros)."""
        for agent in ids.tolist():
            row = self._row.pop(agent, None)
            if row is not None:
                self._free.append(row)
