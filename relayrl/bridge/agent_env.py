"""A simulator's behaviour as an *agent env* for training (``relayrl/training/agent_collectors.py``).

``relayrl train ppo --env "bridge:COMMAND"`` launches COMMAND (split like a shell would; the memory
path is appended) and trains every behaviour it registers (``BridgeBehaviours``, each with a policy of its
own: relayrl/training/behaviours.py), or the one ``env.kwargs.behaviour`` names (``BridgeAgents``; the
others get the default answer, docs/bridge-protocol.md §3.3). ``env.kwargs`` may also set ``timeout_s``,
``args`` (extra simulator arguments), ``parameters`` (named floats sent on the environment-parameters side
channel) and ``engine`` (engine configuration: ``time_scale``, ``width``/``height``, ``quality_level``,
``target_frame_rate``, ``capture_frame_rate``), both sent with the first reset. Actions are continuous (a
Box in [-1, 1]), one discrete branch (Discrete) or several (MultiDiscrete), or both (hybrid:
``Tuple((Box, MultiDiscrete))``, relayrl/envs/hybrid.py, whose [C + B] rows ``send_actions`` splits), with the
simulator's action masks turned into the trainer's convention (True = allowed, ``AgentTurn.action_mask``). The simulator's
statistics (the stats side channel) are aggregated until ``simulator_stats()``, which the trainer logs as
``sim/<name>``.

Observations (``observation_space``): a behaviour without images (every observation of rank 1 or 2)
gets them flattened and concatenated into one float32 vector, as before images existed. With an
image (a rank-3 observation: uint8 pixels 0..255, or float32 read as [0, 1], ML-Agents' visual
observations) each observation keeps its dtype, lower ranks flattened into vectors; one image alone
is the policy's observation as it is, several observations become a Dict (``obs0``, ``obs1``, ... in
the behaviour's order) packed into one uint8 row (envs/packed.py), so uint8 pixels reach the
learner's batch as uint8 and each block gets its own encoder.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Mapping, Sequence

import gymnasium as gym
import numpy as np

from relayrl.bridge.instances import BridgeInstances
from relayrl.bridge.layout import BehaviourSpec, ObsSpec
from relayrl.bridge.sidechannel import EngineConfigurationChannel, EnvironmentParametersChannel, StatsChannel
from relayrl.errors import ConfigError, EnvError
from relayrl.envs.agents import AgentTurn, Behaviour, BehaviourEnv, OneBehaviour
from relayrl.envs.hybrid import hybrid_layout, hybrid_space
from relayrl.envs.masks import check_mask
from relayrl.envs.packed import PackedDict

PREFIX = "bridge:"
ATTACH = "attach"  # --env bridge:attach: wait for a simulator started by hand (an editor) at the editor path
KWARGS = {"behaviour", "timeout_s", "args", "spin_us", "parameters", "engine"}


class BridgeBehaviours(BehaviourEnv):
    """The behaviours of a launched simulator, stepped together: ``behaviours`` (names) picks some, None
    takes every one it registers; ``reset(seed) -> {name: AgentTurn}``, ``step({name: actions})``."""

    def __init__(self, command: str | Sequence[str] | None, behaviours: Sequence[str] | None = None,
                 timeout_s: float = 60.0,
                 args: Sequence[str] = (), spin_us: float = 500.0, parameters: dict[str, float] | None = None,
                 engine: dict[str, Any] | None = None, instances: int = 1, max_restarts: int = 3,
                 attach: bool = False, stop: threading.Event | None = None):
        self.parameters, self.engine = EnvironmentParametersChannel(), EngineConfigurationChannel()
        self.sim_stats = StatsChannel()
        for key, value in (parameters or {}).items():
            self.parameters.set_float_parameter(str(key), float(value))
        try:
            self.engine.set_configuration(**(engine or {}))
        except TypeError as exc:
            raise ConfigError(f"env.kwargs.engine: {exc}; use time_scale, width, height, quality_level, "
                              "target_frame_rate, capture_frame_rate") from None
        self.bridge = BridgeInstances(None if attach else command, instances, attach=attach,
                                      args=[str(a) for a in args], timeout_s=timeout_s, spin_us=spin_us,
                                      side_channels=[self.parameters, self.engine, self.sim_stats],
                                      max_restarts=max_restarts, stop=stop)
        try:
            names = list(self.bridge.behaviours)
            missing = [name for name in behaviours or () if name not in names]
            if missing:
                raise ConfigError(f"the simulator has no behaviour {', '.join(map(repr, missing))}; it has {names}: "
                                  "name those (env.kwargs.behaviour, the behaviours section) or leave them out")
            self.behaviours = {name: self._behaviour(name) for name in (behaviours or names)}
            self.turns = 0
        except BaseException:
            self.bridge.close()
            raise

    def _behaviour(self, name: str) -> Behaviour:
        spec = self.bridge.behaviours[name]
        return Behaviour(observation_space(spec.observations), action_space(name, spec), spec.max_agents)

    @property
    def stats(self) -> dict[str, int]:
        return {"bridge_turns": self.turns, **self.bridge.stats}

    def simulator_stats(self) -> dict[str, float]:
        return self.sim_stats.drain()

    def _turns(self) -> dict[str, AgentTurn]:
        return {name: self._turn(name, behaviour) for name, behaviour in self.behaviours.items()}

    def _turn(self, name: str, behaviour: Behaviour) -> AgentTurn:
        decisions, ends = self.bridge.get_steps(name)
        space = behaviour.observation_space
        # the bridge's mask block says True = forbidden; everything past this point, True = allowed
        mask = ~np.concatenate(decisions.action_mask, axis=1) if decisions.action_mask else None
        if mask is not None:  # (the env boundary: policies take the masks as checked here)
            mask = check_mask(mask, behaviour.action_space, f"behaviour {name!r}'s action masks",
                              rows=len(decisions.agent_id))
        return AgentTurn(ids=decisions.agent_id.copy(), obs=rows(space, decisions.obs), reward=decisions.reward.copy(),
                         end_ids=ends.agent_id.copy(), end_obs=rows(space, ends.obs), end_reward=ends.reward.copy(),
                         interrupted=ends.interrupted.copy(), action_mask=mask)

    def reset(self, seed: int | None = None) -> dict[str, AgentTurn]:
        self.bridge.reset()  # the simulator seeds itself (pass --seed through env.kwargs.args)
        return self._turns()

    def step(self, actions: Mapping[str, np.ndarray]) -> dict[str, AgentTurn]:
        for name, action in actions.items():
            send_actions(self.bridge, name, self.behaviours[name].action_space, np.asarray(action))
        self.bridge.step()  # (behaviours given no actions: the default answer, BridgeEnv.step)
        self.turns += 1
        return self._turns()

    def close(self) -> None:
        self.bridge.close()


class BridgeAgents(OneBehaviour):
    """One behaviour of a launched simulator as an agent env: ``behaviour`` names it (required when the
    simulator has several); the options are ``BridgeBehaviours``'."""

    def __init__(self, command: str | Sequence[str], behaviour: str | None = None, **options: Any):
        env = BridgeBehaviours(command, None if behaviour is None else [behaviour], **options)
        if len(env.behaviours) != 1:
            env.close()
            raise ConfigError(f"the simulator has behaviours {list(env.behaviours)}: choose one with "
                              "--set env.kwargs={behaviour: NAME}")
        super().__init__(env, next(iter(env.behaviours)))
        self.behaviour, self.bridge = self.name, env.bridge


def action_space(name: str, spec: BehaviourSpec) -> gym.Space:
    """The policy's action space for a behaviour: a Box in [-1, 1], Discrete (one branch), MultiDiscrete, or both
    (hybrid)."""
    if spec.continuous and not spec.branches:
        return gym.spaces.Box(-1.0, 1.0, (spec.continuous,), np.float32)
    if len(spec.branches) == 1 and not spec.continuous:
        return gym.spaces.Discrete(spec.branches[0])
    if spec.branches and not spec.continuous:
        return gym.spaces.MultiDiscrete(list(spec.branches))
    if spec.branches and spec.continuous:
        return hybrid_space(spec.continuous, spec.branches)
    raise EnvError(f"behaviour {name!r} has no actions (0 continuous, no branches): give it some")


def send_actions(bridge: BridgeInstances, name: str, space: gym.Space, actions: np.ndarray) -> None:
    """A behaviour's policy actions (one row per deciding agent) into the bridge's blocks."""
    hybrid = hybrid_layout(space)
    if hybrid is not None:  # one [C + B] row per agent: the values, then the branch indices
        continuous, discrete = hybrid.split(actions, f"hybrid actions for behaviour {name!r}")
        bridge.set_actions(name, continuous=continuous, discrete=discrete)
    elif isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        branches = len(bridge.behaviours[name].branches)
        bridge.set_actions(name, discrete=actions.reshape(-1, branches))
    else:
        bridge.set_actions(name, continuous=actions)


def observation_space(observations: Sequence[ObsSpec]) -> gym.Space:
    """The policy's observation space for a behaviour's observation blocks (module docstring)."""
    if all(len(o.shape) <= 2 for o in observations):  # no image: one float32 vector, as before images existed
        return gym.spaces.Box(-np.inf, np.inf, (sum(o.size for o in observations),), np.float32)
    blocks = [_block_space(o) for o in observations]
    if len(blocks) == 1:
        return blocks[0]
    return PackedDict(gym.spaces.Dict(OrderedDict((f"obs{k}", b) for k, b in enumerate(blocks))))


def _block_space(obs: ObsSpec) -> gym.spaces.Box:
    shape = tuple(obs.shape) if len(obs.shape) == 3 else (obs.size,)
    if obs.dtype == np.uint8:
        return gym.spaces.Box(0, 255, shape, np.uint8)
    return gym.spaces.Box(0.0, 1.0, shape, np.float32) if len(shape) == 3 else \
        gym.spaces.Box(-np.inf, np.inf, shape, np.float32)


def rows(space: gym.Space, arrays: list[np.ndarray]) -> np.ndarray:
    """One row per agent of ``space`` from the behaviour's [n, ...] observation blocks (copies)."""
    n = len(arrays[0])
    if isinstance(space, PackedDict):
        return space.pack({key: a.reshape(n, *sub.shape) for (key, sub), a in zip(space.space.spaces.items(), arrays)})
    if len(space.shape) == 3:  # one image
        return arrays[0].reshape(n, *space.shape).copy()
    return np.concatenate([a.reshape(n, int(np.prod(a.shape[1:]))).astype(np.float32) for a in arrays], axis=1)  # vectors, side by side


def make_bridge_envs(config: Any, evaluation: bool = True,
                     stop: threading.Event | None = None) -> tuple[BehaviourEnv, BehaviourEnv | None]:
    """The training simulator (``config.workers`` instances of it) and, for evaluation, one more
    instance (same command and options): every behaviour, or the one ``env.kwargs.behaviour`` names. With
    ``bridge:attach``, the one attached simulator serves both (``relayrl/bridge/attach.py``); ``stop``
    (Ctrl-C) ends a wait for it."""
    command = config.env.id[len(PREFIX):].strip()
    if not command:
        raise ConfigError("--env bridge:COMMAND needs the simulator's command, e.g. --env \"bridge:./my_sim --fast\"")
    options = dict(config.env.kwargs)
    unknown = set(options) - KWARGS
    if unknown:
        raise ConfigError(f"env.kwargs {sorted(unknown)} do not apply to a bridge simulator; use {sorted(KWARGS)}")
    behaviour = options.pop("behaviour", None)
    options["behaviours"] = None if behaviour is None else [behaviour]
    if command == ATTACH:
        from relayrl.bridge.attach import SharedSimulator

        if config.workers != 1:
            raise ConfigError("--env bridge:attach trains on the one simulator that attaches: drop --workers")
        shared = SharedSimulator(BridgeBehaviours(None, attach=True, stop=stop, **options))
        return shared.training, shared.evaluation if evaluation else None
    train = BridgeBehaviours(command, instances=config.workers, max_restarts=config.env.max_restarts, **options)
    try:
        return train, BridgeBehaviours(command, **options) if evaluation else None  # one instance evaluates
    except BaseException:
        train.close()
        raise


def evaluate_bridge_checkpoint(ckpt: Any, config: Any, episodes: int, seed: int,
                               partners: dict[str, Any] | None = None) -> dict[str, Any]:
    """``relayrl eval`` of a run trained on a bridge simulator: launch it once more and run ``episodes``
    deterministic episodes with the quota evaluator. ``partners``: the checkpoints of the other behaviours of a
    run of several, whose policies act beside it (behaviours without one get the default answer)."""
    from relayrl.algos import get_algo
    from relayrl.errors import CheckpointError
    from relayrl.io.checkpoint import explain_load_error
    from relayrl.training.behaviours import JointEvaluation
    from relayrl.training.saved_policy import load_policy

    partners = partners or {}
    options = {k: v for k, v in config.env.kwargs.items() if k in KWARGS}
    behaviour = options.pop("behaviour", None)
    selfplay = config.selfplay.sides if config.selfplay.active else None
    chosen = selfplay if behaviour is None else [behaviour, *partners]
    command = config.env.id[len(PREFIX):].strip()
    env = BridgeBehaviours(None, chosen, attach=True, **options) if command == ATTACH else \
        BridgeBehaviours(command, chosen, **options)
    try:
        if config.selfplay.active:  # a self-play run: its policy on the first side, against itself on the other
            behaviour = next(iter(env.behaviours))
        elif behaviour is None and len(env.behaviours) != 1:
            raise CheckpointError(f"the simulator now has behaviours {list(env.behaviours)}; the run trained one "
                                  "policy without naming its behaviour: evaluate with the simulator it trained on")
        name = behaviour or next(iter(env.behaviours))
        spaces = env.behaviours[name]
        policy = get_algo(config.algo).build_policy(config.algo_config, spaces.observation_space, spaces.action_space)
        try:
            policy.set_weights(ckpt.state["algo"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise CheckpointError(f"checkpoint {str(ckpt.path)!r} does not fit this simulator's behaviour "
                                  f"{name!r}: {explain_load_error(exc)}") from None
        others = {other: load_policy(partner)[0] for other, partner in partners.items()}
        if config.selfplay.active:
            others = {other: policy for other in env.behaviours if other != name}
        result = JointEvaluation(env, name, others, episodes, seed).evaluate(policy)
    finally:
        env.close()
    return {"env": config.env.id, "checkpoint": str(ckpt.path), "episodes": len(result.returns),
            "return_mean": result.mean, "return_std": result.std,
            "length_mean": float(result.lengths.mean()), "length_std": float(result.lengths.std())}
