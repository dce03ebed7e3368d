"""A simulator's behaviour as an *agent env* for training (``relayrl/training/agent_collectors.py``).

``relayrl train ppo --env "bridge:COMMAND"`` launches COMMAND (split like a shell would; the memory
path is appended) and trains on one behaviour. ``env.kwargs`` may set ``behaviour`` (required when
the simulator has several), ``timeout_s``, ``args`` (extra simulator arguments), ``parameters``
(named floats sent on the environment-parameters side channel) and ``engine`` (engine
configuration: ``time_scale``, ``width``/``height``, ``quality_level``, ``target_frame_rate``,
``capture_frame_rate``), both sent before the first reset. Actions are continuous (a Box in
[-1, 1]), one discrete branch (Discrete) or several (MultiDiscrete), with the simulator's action
masks turned into the trainer's convention (True = allowed, ``AgentTurn.action_mask``). Other
behaviours get zero actions.

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
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from relayrl.bridge.instances import BridgeInstances
from relayrl.bridge.layout import ObsSpec
from relayrl.bridge.sidechannel import EngineConfigurationChannel, EnvironmentParametersChannel
from relayrl.errors import ConfigError, EnvError
from relayrl.envs.agents import AgentEnv, AgentTurn
from relayrl.envs.masks import check_mask
from relayrl.envs.packed import PackedDict

PREFIX = "bridge:"
ATTACH = "attach"  # --env bridge:attach: wait for a simulator started by hand (an editor) at the editor path
KWARGS = {"behaviour", "timeout_s", "args", "spin_us", "parameters", "engine"}


class BridgeAgents(AgentEnv):
    """One behaviour of a launched simulator: ``reset(seed) -> AgentTurn``, ``step(actions) -> AgentTurn``."""

    def __init__(self, command: str | Sequence[str] | None, behaviour: str | None = None, timeout_s: float = 60.0,
                 args: Sequence[str] = (), spin_us: float = 500.0, parameters: dict[str, float] | None = None,
                 engine: dict[str, Any] | None = None, instances: int = 1, max_restarts: int = 3,
                 attach: bool = False, stop: threading.Event | None = None):
        self.parameters, self.engine = EnvironmentParametersChannel(), EngineConfigurationChannel()
        for key, value in (parameters or {}).items():
            self.parameters.set_float_parameter(str(key), float(value))
        try:
            self.engine.set_configuration(**(engine or {}))
        except TypeError as exc:
            raise ConfigError(f"env.kwargs.engine: {exc}; use time_scale, width, height, quality_level, "
                              "target_frame_rate, capture_frame_rate") from None
        self.bridge = BridgeInstances(None if attach else command, instances, attach=attach,
                                      args=[str(a) for a in args], timeout_s=timeout_s, spin_us=spin_us,
                                      side_channels=[self.parameters, self.engine], max_restarts=max_restarts,
                                      stop=stop)
        try:
            names = list(self.bridge.behaviours)
            if behaviour is None:
                if len(names) != 1:
                    raise ConfigError(f"the simulator has behaviours {names}: choose one with "
                                      "--set env.kwargs={behaviour: NAME}")
                behaviour = names[0]
            if behaviour not in names:
                raise ConfigError(f"the simulator has no behaviour {behaviour!r}; it has {names}")
            self.behaviour = behaviour
            spec = self.bridge.behaviours[behaviour]
            self.single_observation_space = observation_space(spec.observations)
            if spec.continuous and not spec.branches:
                self.single_action_space: gym.Space = gym.spaces.Box(-1.0, 1.0, (spec.continuous,), np.float32)
            elif len(spec.branches) == 1 and not spec.continuous:
                self.single_action_space = gym.spaces.Discrete(spec.branches[0])
            elif spec.branches and not spec.continuous:
                self.single_action_space = gym.spaces.MultiDiscrete(list(spec.branches))
            else:
                raise EnvError(f"behaviour {behaviour!r} has {spec.continuous} continuous actions and branches "
                               f"{list(spec.branches)}: training handles continuous actions or discrete branches, "
                               "not both; give the behaviour one kind")
            self.num_envs = spec.max_agents
            self.turns = 0
        except BaseException:
            self.bridge.close()
            raise

    @property
    def stats(self) -> dict[str, int]:
        return {"bridge_turns": self.turns, **self.bridge.stats}

    def _turn(self) -> AgentTurn:
        decisions, ends = self.bridge.get_steps(self.behaviour)
        space = self.single_observation_space
        # the bridge's mask block says True = forbidden; everything past this point, True = allowed
        mask = ~np.concatenate(decisions.action_mask, axis=1) if decisions.action_mask else None
        if mask is not None:  # (the env boundary: policies take the masks as checked here)
            mask = check_mask(mask, self.single_action_space, f"behaviour {self.behaviour!r}'s action masks",
                              rows=len(decisions.agent_id))
        return AgentTurn(ids=decisions.agent_id.copy(), obs=rows(space, decisions.obs), reward=decisions.reward.copy(),
                         end_ids=ends.agent_id.copy(), end_obs=rows(space, ends.obs), end_reward=ends.reward.copy(),
                         interrupted=ends.interrupted.copy(), action_mask=mask)

    def reset(self, seed: int | None = None) -> AgentTurn:
        self.bridge.reset()  # the simulator seeds itself (pass --seed through env.kwargs.args)
        return self._turn()

    def step(self, actions: np.ndarray) -> AgentTurn:
        actions = np.asarray(actions)
        if isinstance(self.single_action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
            branches = len(self.bridge.behaviours[self.behaviour].branches)
            self.bridge.set_actions(self.behaviour, discrete=actions.reshape(-1, branches))
        else:
            self.bridge.set_actions(self.behaviour, continuous=actions)
        self.bridge.step()
        self.turns += 1
        return self._turn()

    def close(self) -> None:
        self.bridge.close()


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


def make_bridge_envs(config: Any, evaluation: bool = True, stop: threading.Event | None = None) -> tuple[AgentEnv, AgentEnv | None]:
    """The training simulator (``config.workers`` instances of it) and, for evaluation, one more
    instance (same command and options). With ``bridge:attach``, the one attached simulator serves
    both (``relayrl/bridge/attach.py``); ``stop`` (Ctrl-C) ends a wait for it."""
    command = config.env.id[len(PREFIX):].strip()
    if not command:
        raise ConfigError("--env bridge:COMMAND needs the simulator's command, e.g. --env \"bridge:./my_sim --fast\"")
    options = dict(config.env.kwargs)
    unknown = set(options) - KWARGS
    if unknown:
        raise ConfigError(f"env.kwargs {sorted(unknown)} do not apply to a bridge simulator; use {sorted(KWARGS)}")
    if command == ATTACH:
        from relayrl.bridge.attach import SharedSimulator

        if config.workers != 1:
            raise ConfigError("--env bridge:attach trains on the one simulator that attaches: drop --workers")
        shared = SharedSimulator(BridgeAgents(None, attach=True, stop=stop, **options))
        return shared.training, shared.evaluation if evaluation else None
    train = BridgeAgents(command, instances=config.workers, max_restarts=config.env.max_restarts, **options)
    try:
        return train, BridgeAgents(command, **options) if evaluation else None  # one instance evaluates
    except BaseException:
        train.close()
        raise


def evaluate_bridge_checkpoint(ckpt: Any, config: Any, episodes: int, seed: int) -> dict[str, Any]:
    """``relayrl eval`` of a run trained on a bridge simulator: launch it once more and run
    ``episodes`` deterministic episodes with the quota evaluator."""
    from relayrl.algos import get_algo
    from relayrl.errors import CheckpointError
    from relayrl.io.checkpoint import explain_load_error
    from relayrl.training.agent_collectors import AgentEvaluator

    options = {k: v for k, v in config.env.kwargs.items() if k in KWARGS}
    command = config.env.id[len(PREFIX):].strip()
    env = BridgeAgents(None, attach=True, **options) if command == ATTACH else BridgeAgents(command, **options)
    try:
        policy = get_algo(config.algo).build_policy(config.algo_config, env.single_observation_space,
                                                    env.single_action_space)
        try:
            policy.set_weights(ckpt.state["algo"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise CheckpointError(f"checkpoint {str(ckpt.path)!r} does not fit this simulator's behaviour "
                                  f"{env.behaviour!r}: {explain_load_error(exc)}") from None
        result = AgentEvaluator(env, episodes, seed=seed).evaluate(policy)
    finally:
        env.close()
    return {"env": config.env.id, "checkpoint": str(ckpt.path), "episodes": len(result.returns),
            "return_mean": result.mean, "return_std": result.std,
            "length_mean": float(result.lengths.mean()), "length_std": float(result.lengths.std())}
