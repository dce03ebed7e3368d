"""Self-play: one policy learns on one side of a two-sided env against frozen snapshots of itself on the other
(ML-Agents' ghost trainer), for a simulator's two teams or a two-player turn-based game.

``SelfPlayExperience`` is the Trainer's experience (one run directory, as any run). Its sample source
(``GhostSource``) steps the ``BehaviourEnv`` with the learning policy on the learning side, through the
usual agent collector, and a snapshot on the other side, nothing recorded::

    every save_steps   the learning policy's weights join the snapshots (the last ``window`` are kept)
    every swap_steps   the opponent becomes the latest snapshot (play_against_latest_model_ratio), else one
                       of the kept snapshots at random
    every team_change  the learning side changes; the policy learns to play both

Steps count the learning side's agent decisions (the Trainer's env steps) and the schedule moves between
pulls, so a rollout has one opponent and one learning side; a change of side resets the env, so every game
rated for a side was played whole by it. Every game (an episode of a learning-side
agent) that ends updates an ELO rating per side (K = 16) against the opponent snapshot's, which it kept
from when it was saved: a final reward > 0 is a win, < 0 a loss, 0 a draw (ML-Agents' rule). Metrics:
``selfplay/elo_<side>``, ``selfplay/elo`` (the learning side's), ``selfplay/win_rate`` and
``selfplay/games`` since the last row, ``selfplay/learning_side`` (0 or 1), ``selfplay/snapshots``.

Evaluation plays the current policy deterministically on the first side against the latest snapshot on
the other (the initial policy before the first snapshot).
"""

from __future__ import annotations

import copy
import random
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym

from relayrl.core import Policy, SampleSource
from relayrl.io.checkpoint import load_checkpoint, save_checkpoint
from relayrl.envs.agents import AgentTurn, BehaviourEnv, OneBehaviour
from relayrl.errors import ConfigError
from relayrl.options import SelfPlayConfig
from relayrl.training.agent_collectors import AgentRolloutCollector, AgentTransitionCollector, agent_collector
from relayrl.training.behaviours import Acting, JointEvaluation
from relayrl.training.evaluator import Evaluation
from relayrl.training.experience import EnvPair
from relayrl.types import Batch

ELO_K = 16.0
SNAPSHOTS_FILE = "selfplay_snapshots"  # in the checkpoints folder, beside last (what a resume restores)


def elo_update(rating: float, opponent: float, score: float) -> float:
    """``rating`` after a game scoring ``score`` (1 win, 0.5 draw, 0 loss) against ``opponent``."""
    expected = 1.0 / (1.0 + 10.0 ** ((opponent - rating) / 400.0))
    return rating + ELO_K * (score - expected)


@dataclass
class Snapshot:
    weights: dict[str, Any]
    elo: float
    side: int  # the side it learned on when saved


def self_play_sides(env: BehaviourEnv, cfg: SelfPlayConfig) -> list[str]:
    """The two sides, checked: behaviours of ``env`` with the same spaces."""
    names = list(env.behaviours)
    sides = list(cfg.sides) if cfg.sides is not None else names
    if len(sides) != 2:
        raise ConfigError(f"self-play needs two sides; {'selfplay.sides names' if cfg.sides else 'the env has'} "
                          f"{sides}: set selfplay.sides to two of {names}")
    missing = [side for side in sides if side not in names]
    if missing:
        raise ConfigError(f"selfplay.sides names {missing}, which the env does not have; it has {names}")
    if len(set(sides)) != 2:
        raise ConfigError(f"selfplay.sides {sides}: name two different behaviours")
    a, b = (env.behaviours[side] for side in sides)
    if (a.observation_space, a.action_space) != (b.observation_space, b.action_space):
        raise ConfigError(f"self-play sides {sides[0]!r} and {sides[1]!r} need the same spaces (one policy plays "
                          f"both): {sides[0]!r} has {a.observation_space} -> {a.action_space}, {sides[1]!r} "
                          f"{b.observation_space} -> {b.action_space}")
    return sides


class Ghost:
    """The schedule and the ratings (module docstring); ``opponent`` is the frozen policy the other side plays."""

    def __init__(self, cfg: SelfPlayConfig, policy: Policy, opponent: Policy, sides: list[str], seed: int):
        self.cfg, self.policy, self.opponent, self.sides = cfg, policy, opponent, sides
        self.rng = random.Random(seed)
        self.learning = 0  # index of the learning side
        self.elo = [cfg.initial_elo, cfg.initial_elo]
        self.snapshots: deque[Snapshot] = deque(maxlen=cfg.window)
        self.steps = 0
        self._next = {"save": cfg.save_steps, "swap": cfg.swap_steps, "team": cfg.team_change}
        self.games = self.wins = 0
        self.snapshot()  # the initial policy is the first opponent
        self.current = self.snapshots[-1]

    def snapshot(self) -> None:
        self.snapshots.append(Snapshot(copy.deepcopy(self.policy.get_weights()), self.elo[self.learning],
                                       self.learning))

    def swap(self) -> None:
        if self.rng.random() < self.cfg.play_against_latest_model_ratio:
            self.current = self.snapshots[-1]
        else:
            self.current = self.rng.choice(list(self.snapshots))
        self.opponent.set_weights(self.current.weights)

    def advance(self, steps: int) -> bool:
        """Count the learning side's steps of a pull; save, swap and change sides as due. True when the
        learning side changed."""
        self.steps += steps
        due = {name: self.steps >= at for name, at in self._next.items()}
        if due["save"]:
            self.snapshot()
        changed = due["team"]
        if changed:
            self.learning = 1 - self.learning
        if due["swap"] or changed:
            self.swap()
        every = {"save": self.cfg.save_steps, "swap": self.cfg.swap_steps, "team": self.cfg.team_change}
        for name, is_due in due.items():
            if is_due:
                self._next[name] = (self.steps // every[name] + 1) * every[name]
        return changed

    def record(self, turn: AgentTurn) -> None:
        """Rate every game a learning-side agent finished in ``turn``."""
        for reward in turn.end_reward.tolist():
            score = 1.0 if reward > 0 else 0.0 if reward < 0 else 0.5
            side = self.learning
            before = self.elo[side]
            self.elo[side] = elo_update(before, self.current.elo, score)
            self.current.elo -= self.elo[side] - before  # the opponent's rating moves the other way
            self.games += 1
            self.wins += score == 1.0

    def state(self) -> dict[str, Any]:
        """The schedule and ratings (JSON-able); the snapshots' weights go in a file (``GhostSource.save``)."""
        return {"learning": self.learning, "elo": list(self.elo), "steps": self.steps, "next": dict(self._next),
                "snapshots": [{"elo": s.elo, "side": s.side} for s in self.snapshots],
                "current": next(k for k, s in enumerate(self.snapshots) if s is self.current)
                if any(s is self.current for s in self.snapshots) else -1}

    def restore(self, state: dict[str, Any], weights: list[dict[str, Any]]) -> None:
        self.learning, self.elo, self.steps = int(state["learning"]), [float(e) for e in state["elo"]], int(state["steps"])
        self._next = {name: int(at) for name, at in state["next"].items()}
        self.snapshots.clear()
        for meta, w in zip(state["snapshots"], weights):
            self.snapshots.append(Snapshot(w, float(meta["elo"]), int(meta["side"])))
        current = int(state["current"])
        self.current = self.snapshots[current] if current >= 0 else self.snapshots[-1]
        self.opponent.set_weights(self.current.weights)

    def stats(self) -> dict[str, float]:
        values = {f"selfplay/elo_{side}": self.elo[k] for k, side in enumerate(self.sides)}
        values.update({"selfplay/elo": self.elo[self.learning], "selfplay/learning_side": self.learning,
                       "selfplay/snapshots": len(self.snapshots), "selfplay/games": self.games})
        if self.games:
            values["selfplay/win_rate"] = self.wins / self.games
        self.games = self.wins = 0
        return values


class GhostSource(SampleSource):
    """The learning side's rollouts (or transitions) with the opponent snapshot on the other side."""

    def __init__(self, env: BehaviourEnv, sides: list[str], ghost: Ghost,
                 collector: AgentRolloutCollector | AgentTransitionCollector):
        self.env, self.sides, self.ghost, self.collector = env, sides, ghost, collector
        self.opponent = Acting(ghost.opponent, "collect")
        self.turns: dict[str, AgentTurn] = {}

    def reset(self, seed: int | None) -> None:
        self.turns = self.env.reset(seed)
        self.collector.start(self.turns[self.learner])
        self.opponent.clear()

    @property
    def learner(self) -> str:
        return self.sides[self.ghost.learning]

    @property
    def other(self) -> str:
        return self.sides[1 - self.ghost.learning]

    def pull(self) -> tuple[Batch, int]:
        learner, other = self.learner, self.other
        work = self.collector.pulls()
        action = next(work)
        while True:
            self.turns = self.env.step({learner: action, other: self.opponent(self.turns[other])})
            self.opponent.observe(self.turns[other])
            self.ghost.record(self.turns[learner])
            try:
                action = work.send(self.turns[learner])
            except StopIteration as done:
                batch, steps = done.value
                break
        if self.ghost.advance(steps):  # the other side learns from now on, from fresh games (so each game a side is
            self.turns = self.env.reset(None)  # rated for, it played whole)
            self.collector.start(self.turns[self.learner])
            self.opponent.clear()
        return batch, steps

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        return self.collector.pop_episodes()

    def state(self) -> dict[str, Any]:
        return {"ghost": self.ghost.state()}

    def save(self, folder: Path) -> None:
        save_checkpoint(folder / SNAPSHOTS_FILE, {str(k): s.weights for k, s in enumerate(self.ghost.snapshots)},
                        {"what": "self-play snapshots, in order (training/selfplay.py)"})

    def restore(self, folder: Path, state: dict[str, Any]) -> None:
        """The schedule, ratings and snapshots of the run resumed (a run saved without them starts afresh)."""
        saved = state.get("ghost")
        if saved is None or not (folder / f"{SNAPSHOTS_FILE}.safetensors").is_file():
            return
        weights = load_checkpoint(folder / f"{SNAPSHOTS_FILE}.safetensors").state
        self.ghost.restore(saved, [weights[str(k)] for k in range(len(saved["snapshots"]))])


class SelfPlayExperience(EnvPair):
    """The two sides of ``env`` played by one learning policy and its snapshots (module docstring).
    ``make_policy()`` builds a policy of the algorithm for the sides' spaces (the frozen opponents)."""

    agents = True
    columns = 1

    def __init__(self, env: BehaviourEnv, eval_env: BehaviourEnv, cfg: SelfPlayConfig,
                 make_policy: Callable[[gym.Space, gym.Space], Policy], seed: int):
        self.env, self.eval_env, self.cfg, self.seed = env, eval_env, cfg, seed
        self.sides = self_play_sides(env, cfg)
        behaviour = env.behaviours[self.sides[0]]
        self.observation_space, self.action_space = behaviour.observation_space, behaviour.action_space
        self.make_policy = make_policy
        self.ghost: Ghost | None = None

    def source(self, policy: Policy, cfg: Any, on_policy: bool) -> SampleSource:
        self.ghost = Ghost(self.cfg, policy, self.make_policy(self.observation_space, self.action_space),
                           self.sides, self.seed)
        view = OneBehaviour(self.env, self.sides[0])  # (the collectors' env is only stepped through the source)
        return GhostSource(self.env, self.sides, self.ghost, agent_collector(view, policy, cfg, on_policy))

    def evaluator(self, episodes: int, seed: int) -> Evaluation:
        latest = self.make_policy(self.observation_space, self.action_space)
        evaluation = JointEvaluation(self.eval_env, self.sides[0], {self.sides[1]: latest}, episodes, seed)
        return _AgainstLatest(evaluation, latest, self)

    def stats(self) -> dict[str, float]:
        values = super().stats()
        if self.ghost is not None:
            values.update(self.ghost.stats())
        return values


class _AgainstLatest(Evaluation):
    """The joint evaluation with the latest snapshot's weights loaded into the opponent first."""

    def __init__(self, evaluation: JointEvaluation, latest: Policy, experience: SelfPlayExperience):
        self.evaluation, self.latest, self.experience = evaluation, latest, experience

    @property
    def count(self) -> int:
        return self.evaluation.count

    @count.setter
    def count(self, value: int) -> None:
        self.evaluation.count = value

    def evaluate(self, policy: Policy):
        ghost = self.experience.ghost
        if ghost is not None:
            self.latest.set_weights(ghost.snapshots[-1].weights)
        return self.evaluation.evaluate(policy)


def run_self_play(config: Any, env: BehaviourEnv, eval_env: BehaviourEnv, **options: Any) -> dict[str, Any]:
    """Train ``config``'s algorithm by self-play between two behaviours of ``env`` (``config.selfplay``)."""
    from relayrl.algos import get_algo
    from relayrl.training.trainer import Trainer

    def make_policy(observation_space: gym.Space, action_space: gym.Space) -> Policy:
        return get_algo(config.algo).build_policy(config.algo_config, observation_space, action_space)

    try:
        if config.behaviours:
            raise ConfigError("self-play trains one policy for both sides: drop the behaviours section (its settings "
                              "are the run's)")
        experience = SelfPlayExperience(env, eval_env, config.selfplay, make_policy, config.seed)
    except BaseException:
        try:
            env.close()
        finally:
            eval_env.close()
        raise
    return Trainer(config, experience, **options).run()


__all__ = ["SelfPlayExperience", "run_self_play", "GhostSource", "Ghost", "elo_update", "self_play_sides"]
