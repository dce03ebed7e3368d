"""Every behaviour of a ``BehaviourEnv`` trained in one run, each by a Trainer of its own.

A simulator's scene holds several behaviours (relayrl/envs/agents.py), stepped together: every turn, each
behaviour's agents act with that behaviour's policy. ``run_behaviours`` builds one Trainer per behaviour,
writing ``RUN/behaviours/<name>/`` (a run directory each: config, metrics, TensorBoard, checkpoints,
summary), and ``RUN/config.yaml`` and ``RUN/summary.json`` for the whole::

    trainers take turns:  a Trainer whose round's experience is ready collects it, learns, evaluates;
                          when none is ready, ``Lockstep`` steps the env once for all of them

``Lockstep`` drives each behaviour's collector as a turn generator (training/agent_collectors.py) and keeps
each finished rollout (or transitions) until its Trainer pulls it; since a Trainer is run as soon as its
experience is ready, every rollout is collected by the policy that learns from it. A behaviour whose Trainer
has stopped (its total_steps, its stop value) keeps acting with its last policy while the others train.
Evaluation runs on the evaluation env with every behaviour acting deterministically with its current policy.
The simulator's own statistics (``sim/<name>``) are logged with the first behaviour's metrics.

Each behaviour's config is the run's, with ``behaviours.<name>`` deep-merged over it (``behaviour_config``):
its algorithm (``algo``: another one, from its defaults) and its settings, total_steps, stop_value,
save_freq, eval.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Generator

import gymnasium as gym
import numpy as np

from relayrl.algos import get_algo
from relayrl.config import format_validation_error, save_config
from relayrl.core import Policy, SampleSource
from relayrl.envs.agents import AgentTurn, BehaviourEnv, OneBehaviour
from relayrl.errors import ConfigError, EnvError
from relayrl.io.rundir import BEHAVIOURS_DIR, RunLock, check_fresh_run_dir, new_run_dir, write_summary
from relayrl.options import RunConfig
from relayrl.training.agent_collectors import (AgentEvaluator, AgentRolloutCollector, AgentTransitionCollector,
                                               Turns, agent_collector)
from relayrl.training.agent_states import AgentStates
from relayrl.training.evaluator import EvalResult, Evaluation
from relayrl.training.experience import Experience
from relayrl.training.trainer import Trainer
from relayrl.types import Batch

log = logging.getLogger("relayrl")

OVERRIDABLE = {"total_steps", "stop_value", "save_freq", "eval"}  # besides the algorithm's own section
STOP_ORDER = ("error", "nonfinite", "interrupted", "terminated", "time_limit", "train_iter", "total_steps",
              "stop_value")


class Acting:
    """A policy acting for one behaviour's agents, nothing recorded (a behaviour whose Trainer stopped, the other
    behaviours in an evaluation, a self-play opponent); a recurrent policy's state follows each agent id."""

    def __init__(self, policy: Policy, mode: str):
        self.policy, self.states = policy, AgentStates(policy, mode)

    def __call__(self, turn: AgentTurn) -> np.ndarray:
        """The env actions for the agents deciding in ``turn`` (none: an empty array)."""
        if not len(turn.ids):
            return np.zeros((0, *self.policy.action_shape), self.policy.action_dtype)
        return self.states.act(turn.ids, turn.obs, turn.action_mask)[0].env_action

    def observe(self, turn: AgentTurn) -> None:
        """After a step: the agents whose episode ended start their next one from zeros."""
        self.states.end(turn.end_ids)

    def clear(self) -> None:
        self.states.clear()


class Member:
    """One behaviour in the lockstep: its collector's turn generators, their finished results, its policy."""

    def __init__(self, start: Callable[[AgentTurn], None], make: Callable[[], Turns], policy: Policy):
        """``make()``: the next pull as a turn generator returning (work, env steps)."""
        self.start, self.make, self.policy = start, make, policy
        self.acting: Acting | None = None  # once retired
        self.turns: Turns | None = None
        self.action: np.ndarray | None = None
        self.turn: AgentTurn | None = None  # the behaviour's latest turn
        self.results: deque[tuple[Batch, int, float]] = deque()  # (work, env steps, seconds of env steps it took)
        self.stepping_s = 0.0  # env time since the current generator started
        self.retired = False  # its Trainer has stopped: the agents act, nothing is recorded

    def next_action(self) -> np.ndarray:
        if self.retired:
            return self.acting(self.turn)
        if self.turns is None:
            self.turns = self.make()
            self.action = next(self.turns)
        return self.action

    def answer(self, turn: AgentTurn) -> None:
        self.turn = turn
        if self.retired:
            self.acting.observe(turn)
            return
        try:
            self.action = self.turns.send(turn)
        except StopIteration as done:
            self.turns = None
            work, steps = done.value
            self.results.append((work, steps, self.stepping_s))
            self.stepping_s = 0.0


class Lockstep:
    """Steps one ``BehaviourEnv`` for every behaviour's collector at once (module docstring)."""

    def __init__(self, env: BehaviourEnv):
        self.env = env
        self.members: dict[str, Member] = {}
        self.started = False

    def join(self, name: str, member: Member) -> None:
        self.members[name] = member

    def reset(self, seed: int | None) -> None:
        """Reset the env once, at the first Trainer's start; every behaviour begins from its first turn."""
        if self.started:
            return
        turns = self.env.reset(seed)
        for name, member in self.members.items():
            member.turn = turns[name]
            member.start(turns[name])
        self.started = True

    def ready(self, name: str) -> bool:
        return bool(self.members[name].results)

    def pull(self, name: str) -> tuple[Batch, int, float]:
        """Behaviour ``name``'s next finished work, its env steps and the seconds the env took for it."""
        member = self.members[name]
        while not member.results:
            self.step()
        return member.results.popleft()

    def step(self) -> None:
        t0 = time.perf_counter()
        actions = {name: member.next_action() for name, member in self.members.items()}
        turns = self.env.step(actions)
        took = time.perf_counter() - t0
        for name, member in self.members.items():
            if member.turns is not None:  # (the time of a turn counts for every rollout it is part of)
                member.stepping_s += took
            member.answer(turns[name])

    def retire(self, name: str, policy: Policy | None = None) -> None:
        """Stop recording behaviour ``name``; its agents go on acting with its policy (``policy``: of a behaviour
        that never joined, a resumed run's behaviour with nothing left to train)."""
        if name not in self.members:
            self.members[name] = Member(lambda turn: None, lambda: None, policy)
        member = self.members[name]
        member.retired, member.turns, member.acting = True, None, Acting(member.policy, "collect")
        member.results.clear()


class BehaviourSource(SampleSource):
    """One behaviour's experience from the lockstep: its rollouts (on-policy) or transitions."""

    def __init__(self, lockstep: Lockstep, name: str, collector: AgentRolloutCollector | AgentTransitionCollector):
        self.lockstep, self.name, self.collector = lockstep, name, collector
        self.stepping_s = 0.0

    def reset(self, seed: int | None) -> None:
        self.lockstep.reset(seed)

    def pull(self) -> tuple[Batch, int]:
        work, steps, self.stepping_s = self.lockstep.pull(self.name)
        return work, steps

    def collect_time_elsewhere(self) -> float:
        return self.stepping_s

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        return self.collector.pop_episodes()


class JointEvaluation(Evaluation):
    """Behaviour ``name`` evaluated on ``env`` (deterministic episodes, a quota per agent) while the other
    behaviours act deterministically with the policies in ``policies`` (those missing: the env's default)."""

    def __init__(self, env: BehaviourEnv, name: str, policies: dict[str, Policy], episodes: int, seed: int):
        self.env, self.name, self.policies = env, name, policies
        self.evaluator = AgentEvaluator(OneBehaviour(env, name), episodes, seed)

    @property
    def count(self) -> int:
        return self.evaluator.count

    @count.setter
    def count(self, value: int) -> None:
        self.evaluator.count = value

    def evaluate(self, policy: Policy) -> EvalResult:
        turns = self.env.reset(self.evaluator.next_seed())
        others = {other: Acting(self.policies[other], "eval") for other in turns
                  if other != self.name and other in self.policies}
        episodes: Generator = self.evaluator.episodes_of(policy, turns[self.name])
        action = next(episodes)
        while True:
            actions = {other: acting(turns[other]) for other, acting in others.items()}
            turns = self.env.step({**actions, self.name: action})
            for other, acting in others.items():
                acting.observe(turns[other])
            try:
                action = episodes.send(turns[self.name])
            except StopIteration as done:
                return done.value


class BehaviourExperience(Experience):
    """Behaviour ``name`` of a ``BehaviourEnv`` trained in lockstep with the others (module docstring)."""

    agents = True
    columns = 1

    def __init__(self, lockstep: Lockstep, eval_env: BehaviourEnv, name: str, policies: dict[str, Policy]):
        self.lockstep, self.eval_env, self.name, self.policies = lockstep, eval_env, name, policies
        behaviour = lockstep.env.behaviours[name]
        self.observation_space: gym.Space = behaviour.observation_space
        self.action_space: gym.Space = behaviour.action_space

    def source(self, policy: Policy, cfg: Any, on_policy: bool) -> SampleSource:
        collector = agent_collector(OneBehaviour(self.lockstep.env, self.name), policy, cfg, on_policy)
        self.policies[self.name] = policy
        self.lockstep.join(self.name, Member(collector.start, collector.pulls, policy))
        return BehaviourSource(self.lockstep, self.name, collector)

    def evaluator(self, episodes: int, seed: int) -> Evaluation:
        return JointEvaluation(self.eval_env, self.name, self.policies, episodes, seed)

    def stats(self) -> dict[str, float]:
        return dict(self.lockstep.env.stats)

    def simulator_stats(self) -> dict[str, float]:
        """The simulator's statistics belong to no behaviour: the first behaviour's metrics carry them."""
        if self.name != next(iter(self.lockstep.env.behaviours)):
            return {}
        return self.lockstep.env.simulator_stats()

    def close(self) -> None:
        """(The envs are shared: ``run_behaviours`` closes them.)"""


def behaviour_config(config: RunConfig, name: str) -> RunConfig:
    """Behaviour ``name``'s config: the run's, with ``config.behaviours[name]`` deep-merged over it (with ``algo``,
    another algorithm, from its defaults)."""
    from pydantic import ValidationError

    from relayrl.config import config_model, deep_merge, default_config

    overrides = dict(config.behaviours.get(name, {}))
    algo = overrides.pop("algo", config.algo)
    entry = get_algo(algo)
    if entry.offline:
        raise ConfigError(f"behaviours.{name}.algo: {algo} learns from a dataset, not from a simulator; choose an "
                          "online algorithm")
    unknown = set(overrides) - OVERRIDABLE - {entry.name}
    if unknown:
        raise ConfigError(f"behaviours.{name}: {sorted(unknown)} cannot differ between behaviours; set algo, "
                          f"{entry.name} (the algorithm's settings), {', '.join(sorted(OVERRIDABLE))}")
    tree = config.model_dump()
    if algo != config.algo:  # the run's common options, the other algorithm's own defaults
        del tree[get_algo(config.algo).name]
        tree.update(algo=algo, **{entry.name: default_config(algo).model_dump()[entry.name]})
    tree = deep_merge(tree, overrides)
    tree["behaviours"] = {}
    tree["env"]["kwargs"] = {**tree["env"]["kwargs"], "behaviour": name}
    wandb = tree["logging"]["wandb"]
    wandb["name"] = f"{wandb['name']}/{name}" if wandb.get("name") else name
    model = config_model(algo)
    try:
        return model.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(f"behaviours.{name}: {format_validation_error(exc, model)}") from None


def check_behaviour_names(config: RunConfig, names: list[str]) -> None:
    """Refuse overrides for a behaviour the run does not train (a typo would silently do nothing)."""
    unknown = [name for name in config.behaviours if name not in names]
    if unknown:
        raise ConfigError(f"the behaviours section names {unknown}, which this run does not train (it trains "
                          f"{names}): fix the names or drop those entries")


def run_behaviours(config: RunConfig, env: BehaviourEnv, eval_env: BehaviourEnv, *,
                   run_dir: Path | str | None = None, resume: bool = False, stop_event: Any = None,
                   **options: Any) -> dict[str, Any]:
    """Train every behaviour of ``env`` (module docstring); ``options`` are the Trainers'. The summary of the
    whole run: each behaviour's summary under ``behaviours``, env steps and updates summed."""
    lock = None
    trainers: dict[str, Trainer] = {}
    try:
        names = list(env.behaviours)
        check_behaviour_names(config, names)
        if options.get("previous") is not None:
            raise ConfigError("--previous takes one policy's checkpoint; this env has several behaviours "
                              f"{names}: start them fresh, or train one with --set env.kwargs.behaviour=NAME")
        configs = {name: behaviour_config(config, name) for name in names}
        run_dir = Path(run_dir) if run_dir is not None else new_run_dir(config.env.id, config.algo)
        if not resume:
            check_fresh_run_dir(run_dir)
        lockstep, policies = Lockstep(env), {}
        for name in names:
            try:
                trainers[name] = Trainer(configs[name], BehaviourExperience(lockstep, eval_env, name, policies),
                                         run_dir=run_dir / BEHAVIOURS_DIR / name, resume=resume,
                                         stop_event=stop_event, **options)
            except (ConfigError, EnvError) as exc:  # e.g. an algorithm that cannot act in this behaviour's space
                raise type(exc)(f"behaviour {name!r}: {exc} (one behaviour's algorithm: --set \"behaviours={{{name}: "
                                "{algo: NAME}}\")") from None
            if trainers[name].complete is not None:  # resumed with nothing left to do: it acts, it does not learn
                lockstep.retire(name, trainers[name].algo.policy)
        lock = RunLock(run_dir).acquire()
        if not resume:
            save_config(config, run_dir / "config.yaml")
    except BaseException:
        try:
            for trainer in trainers.values():
                trainer.abandon()
        finally:
            if lock is not None:
                lock.release()
            _close(env, eval_env)
        raise
    try:
        summaries = _take_turns(trainers, lockstep, stop_event)
        summary = joint_summary(config, summaries)
        write_summary(run_dir, summary)
    finally:
        lock.release()
        _close(env, eval_env)
    summary["run_dir"] = str(run_dir)
    return summary


def _take_turns(trainers: dict[str, Trainer], lockstep: Lockstep, stop_event: Any) -> dict[str, dict[str, Any]]:
    """Run the Trainers' rounds as their experience becomes ready; step the env when none is."""
    runs = {name: trainer.stepwise() for name, trainer in trainers.items()}
    summaries: dict[str, dict[str, Any]] = {}

    def advance(name: str) -> None:
        try:
            next(runs[name])
        except StopIteration as done:
            summaries[name] = done.value
            del runs[name]
            lockstep.retire(name)

    try:
        for name in list(runs):
            advance(name)  # set up, up to the first round
        while runs:
            stopping = stop_event is not None and stop_event.is_set()
            ready = [name for name in runs if stopping or lockstep.ready(name)]
            if not ready:
                lockstep.step()
            for name in ready:
                advance(name)
    except BaseException as exc:
        reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else "error"
        for name, run in runs.items():
            trainers[name].abort(reason)
            try:
                run.close()
            except Exception:  # (the first error is the one to report)
                log.exception("closing behaviour %s's run", name)
        raise
    return {name: summaries[name] for name in trainers}  # (in the env's order)


def joint_summary(config: RunConfig, summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The run's summary.json: DESIGN.md's keys over all behaviours (steps and updates summed, solved when every
    behaviour is; eval returns per behaviour only), and each behaviour's summary."""
    parts = list(summaries.values())
    wall = max(p["wall_time_s"] for p in parts)
    steps = sum(p["env_steps"] for p in parts)
    reasons = [p["stop_reason"] for p in parts]
    return {
        "algo": config.algo, "env": config.env.id, "seed": config.seed, "backend": config.resolved_backend,
        "env_steps": steps, "updates": sum(p["updates"] for p in parts), "wall_time_s": wall,
        "env_steps_per_s": round(steps / wall, 2) if wall > 0 else 0.0,
        "best_eval_return": None, "last_eval_return": None, "stop_value": None,
        "solved": all(p["solved"] for p in parts),
        "time_to_stop_value_s": None, "env_steps_to_stop_value": None,
        "stop_reason": min(reasons, key=STOP_ORDER.index),
        "behaviours": {name: {k: v for k, v in p.items() if k != "run_dir"} for name, p in summaries.items()},
    }


def _close(*envs: BehaviourEnv) -> None:
    try:
        envs[0].close()
    finally:
        if len(envs) > 1:
            _close(*envs[1:])
