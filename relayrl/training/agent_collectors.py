"""Training on *agent envs* (``relayrl/envs/agents.py``: agents as rows, each deciding when it needs to):
a simulator's behaviour through the bridge, or PettingZoo ParallelEnvs (``relayrl/envs/multiagent.py``).

The collectors here turn that into what the algorithms already learn from:

- ``AgentRolloutCollector`` (PPO): each agent's steps in time order, concatenated into a [L, 1]
  rollout. Every place where an agent's trajectory stops inside the rollout is marked done
  (terminated, interrupted, or cut at the rollout's end with V(next observation) as bootstrap), so
  GAE never crosses from one agent to another.
- ``AgentTransitionCollector`` (SAC, DQN): one-step transitions as soon as an agent's next
  observation (or final observation) arrives.
- ``AgentEvaluator``: deterministic episodes with a quota per agent, like ``Evaluator``.

A recurrent policy's state follows each agent id (``relayrl/training/agent_states.py``): the rollout
stores it at each step's start ("hidden"), and the learner's sequences, cut where an agent's trace stops,
start from it.

Each of them is written as a *turn generator*: it yields the actions for the current turn and is sent
the next ``AgentTurn`` (``nxt = yield env_action``), returning its result (a rollout, transitions, an
``EvalResult``) when done. ``drive(env, generator)`` runs one against an ``AgentEnv``; with several
behaviours stepped together (``relayrl/training/behaviours.py``) one driver steps every behaviour's
generator in lockstep.
"""

from __future__ import annotations

import numpy as np

from typing import Generator, TypeVar

from relayrl.core import SampleSource
from relayrl.data.dtypes import to_stored
from relayrl.envs.agents import AgentEnv, AgentTurn
from relayrl.errors import ConfigError, EnvError
from relayrl.training.agent_states import AgentStates
from relayrl.training.evaluator import EvalResult, Evaluation
from relayrl.types import Batch

MAX_EVAL_TURNS = 1_000_000
FIRST_DECISION_TURNS = 1000  # turns an evaluation waits for a first agent to decide

R = TypeVar("R")
Turns = Generator[np.ndarray, AgentTurn, R]  # yields a turn's actions, is sent the next turn, returns R


def drive(env: AgentEnv, turns: Turns[R]) -> R:
    """Run a turn generator against ``env`` until it returns; its result."""
    try:
        action = next(turns)
        while True:
            action = turns.send(env.step(action))
    except StopIteration as done:
        return done.value


class AgentEpisodes:
    """Returns and lengths of finished episodes, per agent id."""

    def __init__(self):
        self._open: dict[int, list] = {}
        self._waiting: set[int] = set()  # agents that acted and have not reported back yet
        self.returns: list[float] = []
        self.lengths: list[int] = []

    def reset(self) -> None:
        self._open.clear()
        self._waiting.clear()

    def track(self, turn: AgentTurn, acted: set[int]) -> None:
        """``acted``: agents whose action this turn answers; an agent's next decision (this turn, or a later one
        after skipped turns: a turn-based game's player) completes its step with the reward it brings."""
        self._waiting |= acted
        ended = turn.end_ids.tolist()
        for k, agent in enumerate(ended):
            ret, length = self._open.pop(agent, (0.0, 0))
            self.returns.append(ret + float(turn.end_reward[k]))
            self.lengths.append(length + 1)
            self._waiting.discard(agent)
        for k, agent in enumerate(turn.ids.tolist()):
            if agent in self._waiting and agent not in ended:  # (after an end, a decision starts the next episode)
                self._waiting.discard(agent)
                entry = self._open.setdefault(agent, [0.0, 0])
                entry[0] += float(turn.reward[k])
                entry[1] += 1
            else:
                self._open.setdefault(agent, [0.0, 0])

    def pop(self) -> tuple[list[float], list[int]]:
        returns, lengths = self.returns, self.lengths
        self.returns, self.lengths = [], []
        return returns, lengths


class _Steps:
    """Growable columns of acted steps (slots) and their outcomes, filled as agents report back;
    with ``masked``, the action mask each step was acted under too (the loss's distribution); with
    ``recurrent``, the state each step was acted from ("hidden")."""

    def __init__(self, masked: bool = False, recurrent: bool = False):
        self.fields = ("obs", "action", "logp", "value") + (("action_mask",) if masked else ()) + \
            (("hidden",) if recurrent else ())
        self.cols: dict[str, list[np.ndarray]] = {f: [] for f in self.fields}
        self.keys: list[np.ndarray] = []
        self.size = 0
        self.outcome: dict[int, tuple[float, bool, bool, float]] = {}  # slot -> reward, term, trunc, boot

    def add(self, keys: np.ndarray, **rows: np.ndarray) -> np.ndarray:
        for f in self.fields:
            self.cols[f].append(np.asarray(rows[f]))
        self.keys.append(np.asarray(keys, np.int64))
        slots = np.arange(self.size, self.size + len(keys))
        self.size += len(keys)
        return slots

    def arrays(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        keys = np.concatenate(self.keys) if self.keys else np.zeros(0, np.int64)
        return keys, {f: np.concatenate(c) for f, c in self.cols.items() if c}


class AgentRolloutCollector(SampleSource):
    """On-policy rollouts from an agent env: ``num_steps`` turns per ``collect()`` (module docstring)."""

    def __init__(self, env: AgentEnv, policy, num_steps: int):
        self.env, self.policy, self.num_steps = env, policy, num_steps
        self.episodes = AgentEpisodes()
        self._turn: AgentTurn | None = None
        self._pending: dict[int, tuple] = {}  # agent -> (obs, action, logp, value) acted, not yet answered
        self.states = AgentStates(policy, "collect")  # a recurrent policy's state per agent id

    def reset(self, seed: int | None) -> None:
        self.start(self.env.reset(seed))

    def start(self, turn: AgentTurn) -> None:
        """Begin from ``turn`` (the first after a reset)."""
        self._turn = turn
        self.episodes.reset()
        self._pending = {}
        self.states.clear()

    def pull(self) -> tuple[Batch, int]:
        return drive(self.env, self.pulls())

    def pulls(self) -> Turns[tuple[Batch, int]]:
        """``pull`` as a turn generator: the next rollout and its env steps."""
        rollout = yield from self.rollout()
        return rollout, rollout["reward"].size

    def collect(self) -> Batch:
        return drive(self.env, self.rollout())

    def rollout(self) -> Turns[Batch]:
        """The next rollout as a turn generator (``collect`` drives it against the env)."""
        steps, pending = _Steps(masked=self._turn.action_mask is not None, recurrent=self.states.recurrent), {}
        for agent, row in self._pending.items():  # answers still owed from the previous rollout
            pending[agent] = int(steps.add(np.array([agent]), **{f: v[None] for f, v in zip(steps.fields, row)})[0])
        for _ in range(self.num_steps):
            turn = self._turn
            if len(turn.ids):
                out, hidden = self.states.act(turn.ids, turn.obs, turn.action_mask)
                masks = {} if turn.action_mask is None else {"action_mask": turn.action_mask}
                masks.update({} if hidden is None else {"hidden": hidden})
                slots = steps.add(turn.ids, obs=out.obs, action=out.action, logp=out.logp, value=out.value, **masks)
                pending.update(zip(turn.ids.tolist(), slots.tolist()))
                env_action = out.env_action
            else:
                env_action = np.zeros((0, *self.policy.action_shape), self.policy.action_dtype)
            acted = set(turn.ids.tolist())
            nxt = yield env_action
            self.episodes.track(nxt, acted)
            boot = np.zeros(len(nxt.end_ids), np.float32)
            if nxt.interrupted.any():
                boot[nxt.interrupted] = self.states.value(nxt.end_ids[nxt.interrupted], nxt.end_obs[nxt.interrupted])
            self.states.end(nxt.end_ids)
            for k, agent in enumerate(nxt.end_ids.tolist()):
                slot = pending.pop(agent, None)
                if slot is not None:
                    interrupted = bool(nxt.interrupted[k])
                    steps.outcome[slot] = (float(nxt.end_reward[k]), not interrupted, interrupted, float(boot[k]))
            ended = set(nxt.end_ids.tolist())
            for k, agent in enumerate(nxt.ids.tolist()):
                if agent not in ended:
                    slot = pending.pop(agent, None)
                    if slot is not None:
                        steps.outcome[slot] = (float(nxt.reward[k]), False, False, np.nan)
            self._turn = nxt
        return self._finish(steps, pending)

    def _finish(self, steps: _Steps, pending: dict[int, int]) -> Batch:
        keys, cols = steps.arrays()
        self._pending = {agent: tuple(cols[f][slot] for f in steps.fields) for agent, slot in pending.items()}
        if not steps.outcome:
            raise EnvError("no agent answered an action during a whole rollout: the env must report each agent "
                           "again (a decision or an episode end) after it acts; raise num_steps otherwise")
        by_agent = np.argsort(keys, kind="stable")  # every slot, per agent in time order
        successor = np.full(steps.size, -1)
        same = keys[by_agent[1:]] == keys[by_agent[:-1]]
        successor[by_agent[:-1][same]] = by_agent[1:][same]
        answered = np.zeros(steps.size, bool)
        answered[list(steps.outcome)] = True
        order = by_agent[answered[by_agent]]  # the answered slots, per agent in time order
        outcome = np.array([steps.outcome[s] for s in order.tolist()], np.float64)
        reward, term, trunc, boot = outcome[:, 0], outcome[:, 1] > 0, outcome[:, 2] > 0, outcome[:, 3]
        current = self._turn  # agents deciding now act next in the following rollout
        current_values = dict(zip(current.ids.tolist(), self.states.value(  # (PQN: max over allowed actions)
            current.ids, current.obs, current.action_mask).tolist())) if len(current.ids) else {}
        next_value = np.zeros(len(order), np.float32)
        cut = np.zeros(len(order), bool)  # the trace stops here inside the rollout: bootstrap
        for i, slot in enumerate(order.tolist()):
            if term[i]:
                continue
            if trunc[i]:
                next_value[i] = boot[i]
                continue
            following = successor[slot]
            if following >= 0:  # the agent acted again: answered (next row) or still pending
                next_value[i] = cols["value"][following]
                cut[i] = not (i + 1 < len(order) and order[i + 1] == following)
            else:
                next_value[i] = current_values.get(int(keys[slot]), cols["value"][slot])
                cut[i] = True
        batch = {f: cols[f][order] for f in steps.fields}
        batch.update(reward=reward.astype(np.float32), terminated=term, truncated=trunc | cut,
                     next_value=next_value)
        return {k: v.reshape(len(order), 1, *v.shape[1:]) for k, v in batch.items()}

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        return self.episodes.pop()


class AgentTransitionCollector(SampleSource):
    """Off-policy sample source (``reset``/``pull``/``pop_episodes``) on an agent env: one-step
    transitions, complete as soon as an agent reports back after acting."""

    def __init__(self, env: AgentEnv, policy, gamma: float, turns_per_pull: int, n_step: int = 1):
        if n_step != 1:
            raise ConfigError(f"agent envs (a simulator bridge, PettingZoo envs) learn from one-step transitions, not "
                              f"n_step={n_step}: set n_step=1 (or null, which means 1 here)")
        self.env, self.policy, self.gamma, self.turns = env, policy, gamma, turns_per_pull
        self.episodes = AgentEpisodes()
        self._turn: AgentTurn | None = None
        self._pending: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def reset(self, seed: int | None) -> None:
        self.start(self.env.reset(seed))

    def start(self, turn: AgentTurn) -> None:
        """Begin from ``turn`` (the first after a reset)."""
        self._turn = turn
        self.episodes.reset()
        self._pending = {}

    def pull(self) -> tuple[Batch, int]:
        return drive(self.env, self.pulls())

    def pulls(self) -> Turns[tuple[Batch, int]]:
        """``turns_per_pull`` turns' transitions and their count as a turn generator (``pull`` drives it)."""
        rows: dict[str, list] = {"obs": [], "action": [], "reward": [], "next_obs": [], "terminated": [],
                                 "next_action_mask": []}
        masked = self._turn.action_mask is not None

        def emit(agent: int, reward: float, next_obs: np.ndarray, terminated: bool, next_mask: np.ndarray) -> None:
            obs, action = self._pending.pop(agent)
            for key, value in zip(rows, (obs, action, reward, next_obs, terminated, next_mask)):
                rows[key].append(value)

        for _ in range(self.turns):
            turn = self._turn
            if len(turn.ids):
                out = self.policy.act_masked(turn.obs, "collect", turn.action_mask)
                self._pending.update(zip(turn.ids.tolist(), zip(to_stored(np.asarray(turn.obs)), out.action)))
                env_action = out.env_action
            else:
                env_action = np.zeros((0, *self.policy.action_shape), self.policy.action_dtype)
            acted = set(turn.ids.tolist())
            nxt = yield env_action
            self.episodes.track(nxt, acted)
            ended = set()
            for k, agent in enumerate(nxt.end_ids.tolist()):
                ended.add(agent)
                if agent in self._pending:  # (a final observation takes no mask: everything allowed)
                    emit(agent, float(nxt.end_reward[k]), nxt.end_obs[k], not bool(nxt.interrupted[k]), None)
            for k, agent in enumerate(nxt.ids.tolist()):
                if agent not in ended and agent in self._pending:
                    emit(agent, float(nxt.reward[k]), nxt.obs[k], False,
                         None if nxt.action_mask is None else nxt.action_mask[k])
            self._turn = nxt
        n = len(rows["reward"])
        if not n:
            return {}, 0
        batch = {"obs": np.stack(rows["obs"]), "action": np.stack(rows["action"]),  # (stored dtypes: data/dtypes.py)
                 "reward": np.array(rows["reward"], np.float32),
                 "next_obs": to_stored(np.stack(rows["next_obs"])),
                 "terminated": np.array(rows["terminated"], bool),
                 "discount": np.full(n, self.gamma, np.float32)}
        if masked:  # the actions allowed at next_obs, for DQN's target
            width = self._turn.action_mask.shape[1]
            batch["next_action_mask"] = np.stack([np.ones(width, bool) if m is None else m
                                                  for m in rows["next_action_mask"]])
        return batch, n

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        return self.episodes.pop()


def agent_collector(env: AgentEnv, policy, cfg, on_policy: bool) -> AgentRolloutCollector | AgentTransitionCollector:
    """The collector of an agent env for the algorithm's options ``cfg``: rollouts on-policy, transitions off-policy."""
    if on_policy:
        return AgentRolloutCollector(env, policy, cfg.num_steps)
    return AgentTransitionCollector(env, policy, cfg.gamma, cfg.steps_per_iteration, cfg.n_step_for(agents=True))


class AgentEvaluator(Evaluation):
    """Deterministic evaluation on an agent env: ``episodes`` episodes spread over the first agents
    (by id) with a fixed quota each, so quick failures cannot crowd out long episodes."""

    def __init__(self, env: AgentEnv, episodes: int, seed: int):
        self.env, self.episodes, self.seed = env, episodes, seed
        self.count = 0

    def evaluate(self, policy) -> EvalResult:
        turns = self.episodes_of(policy, self.env.reset(self.next_seed()))
        return drive(self.env, turns)

    def next_seed(self) -> int:
        """The seed of the next evaluation's reset (each evaluation its own)."""
        self.count += 1
        return self.seed + 100_003 * (self.count - 1)

    def episodes_of(self, policy, turn: AgentTurn) -> Turns[EvalResult]:
        """The evaluation from ``turn`` (the first after a reset) as a turn generator. The episodes are spread over
        the agents of the first turn with any (a turn-based game's second player first decides in the second)."""
        for _ in range(FIRST_DECISION_TURNS):
            if len(turn.ids):
                break
            turn = yield np.zeros((0, *policy.action_shape), policy.action_dtype)
        agents = sorted(turn.ids.tolist())[:self.episodes]
        if not agents:
            raise EnvError(f"the agent env reported no agents in the {FIRST_DECISION_TURNS} turns after a reset: "
                           "nothing to evaluate")
        quota = {a: self.episodes // len(agents) for a in agents}
        for a in agents[: self.episodes % len(agents)]:
            quota[a] += 1
        tracker, states = AgentEpisodes(), AgentStates(policy, "eval")
        returns, lengths = [], []
        for _ in range(MAX_EVAL_TURNS):
            acted = set(turn.ids.tolist())
            action = states.act(turn.ids, turn.obs, turn.action_mask)[0].env_action if len(turn.ids) else \
                np.zeros((0, *policy.action_shape), policy.action_dtype)
            turn = yield action
            states.end(turn.end_ids)
            tracker.track(turn, acted)
            for agent, ret, length in zip(turn.end_ids.tolist(), tracker.returns, tracker.lengths):
                if quota.get(agent, 0) > 0:
                    quota[agent] -= 1
                    returns.append(ret)
                    lengths.append(length)
            tracker.pop()
            if not any(quota.values()):
                return EvalResult(np.array(returns), np.array(lengths))
        raise EnvError(f"evaluation did not finish {self.episodes} episodes in {MAX_EVAL_TURNS} turns")
