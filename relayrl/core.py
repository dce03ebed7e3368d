"""The contracts between relayrl's parts: ``Policy``, ``Algorithm`` and ``SampleSource`` (and ``Replay``, the
memory contract, defined in data/replay/base.py and re-exported here).

Everything that trains, collects or deploys talks to these types and to nothing else of an
algorithm: the training loop, rollout workers on every backend, the relay's remote workers, the
simulator bridge, the evaluator, ``relayrl eval`` and ``relayrl.load``. An object's abilities are
what its type says, never discovered with ``hasattr``; the base classes give the optional parts a
default that does nothing.

A policy acts; an algorithm owns a policy and learns::

    policy = algo.policy                                    # built apart: build_policy(cfg, obs_space, act_space)
    obs = venv.reset(seed=0)
    while training:
        out = policy.act(obs, "collect")                    # PolicyOutput: action, env_action, logp, value, obs
        result = venv.step(out.env_action)
        policy.reset_hidden("collect", result.done)         # (a no-op for feed-forward policies)
        ...                                                 # store out.obs, out.action, result.reward, ...
        metrics = algo.learn(batch, progress=steps / total)  # on-policy: a [T, N] rollout; off-policy: a minibatch
        priorities = algo.pop_priorities()                  # off-policy: the minibatch's new priorities (or None)
        publish(policy.get_weights(), policy.version)       # workers: policy.set_weights(weights, version)

A sample source is where the loop's experience comes from: local envs, a pool of rollout workers,
remote workers through a relay, or a simulator's agents::

    source.reset(seed)
    while training:
        source.publish(policy.get_weights(), policy.version)  # (workers' sources: collectors with their own copy)
        batch, env_steps = source.pull()                    # waits for the next chunk of experience
        more, steps = source.poll()                         # whatever has arrived, without waiting
        returns, lengths = source.pop_episodes()            # episodes finished since the last call
        log(source.stats())
    source.close()

Deployment needs the policy only (``relayrl.load``)::

    policy = relayrl.load("runs/CartPole-v1_ppo_...")
    action = policy.predict(obs)                            # one observation or a batch; deterministic
    graph = policy.export_graph()                           # relayrl export: predict as one torch module (or None)
"""

from __future__ import annotations

import threading
from pathlib import Path
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import gymnasium as gym
import numpy as np
import torch

from relayrl.data.replay.base import Replay
from relayrl.envs.masks import MASK_KEY, split_mask
from relayrl.envs.packed import PackedDict
from relayrl.errors import ConfigError, EnvError
from relayrl.learners.collective import SOLO, Collective
from relayrl.policy.mirror import EnvMirrorIndices, no_env_mirror
from relayrl.types import Batch, Mode, PolicyOutput

if TYPE_CHECKING:
    from relayrl.policy.graph import PolicyGraph
    from relayrl.policy.normalizer import RunningMeanStd
    from relayrl.data.replay import ReplaySpec

__all__ = ["Policy", "Algorithm", "SampleSource", "Replay"]


class Policy(ABC):
    """Maps observations to actions; everything ``act`` depends on travels in ``get_weights``.

    Attributes every policy sets:
        observation_space, action_space: the spaces it was built for.
        action_shape, action_dtype: one row of ``PolicyOutput.action`` (what is stored and learned from).
        obs_dtype: the dtype of ``PolicyOutput.obs`` (what rollouts store: data/dtypes.py).
        version: the weights' version, set by ``set_weights(..., version)`` and by the algorithm's updates.

    Recurrent policies set ``recurrent = True`` and ``state_size``, keep one state per env and per
    mode, and implement ``hidden``, ``reset_hidden`` and ``set_hidden``; whoever steps the envs calls
    ``reset_hidden(mode)`` after a reset and ``reset_hidden(mode, done)`` after every step (agent envs,
    whose rows change every turn, set each agent's own state with ``set_hidden``).
    """

    recurrent: bool = False
    state_size: int = 0
    obs_rms: RunningMeanStd | None = None  # observation statistics, for policies that normalise (PPO's obs_norm)

    observation_space: gym.Space
    action_space: gym.Space
    action_shape: tuple[int, ...]
    action_dtype: np.dtype
    obs_dtype: np.dtype
    device: torch.device = torch.device("cpu")  # where its networks run (the learner's device; workers: CPU)
    version: int = 0

    masks_actions: ClassVar[bool] = False  # act() honours action_mask (PPO, APPO, A2C, PQN, DQN)
    hybrid_actions: ClassVar[bool] = False  # acts in a hybrid action space (relayrl/envs/hybrid.py: PPO, APPO, A2C)

    @abstractmethod
    def act(self, obs: np.ndarray, mode: Mode = "collect", action_mask: np.ndarray | None = None) -> PolicyOutput:
        """Actions for a batch ``obs`` ([n, *obs_shape]): sampled in "collect" mode, deterministic in "eval".

        ``action_mask`` ([n, width] bool, True = allowed; relayrl/envs/masks.py) restricts the actions of a
        policy with ``masks_actions``; others are never given one (``act_masked`` refuses the env instead).
        Masks are checked where they enter (the env managers, the bridge, ``predict``), not here, per step.
        """

    def act_masked(self, obs: np.ndarray, mode: Mode, action_mask: np.ndarray | None) -> PolicyOutput:
        """``act`` with the env's action masks (None: the env gives none): what collectors and evaluators call."""
        if action_mask is None:
            return self.act(obs, mode)
        if not self.masks_actions:
            if action_mask.all():  # a mask that allows everything restricts nothing (a bridge behaviour's default)
                return self.act(obs, mode)
            raise EnvError(f"the env gives action masks, but {type(self).__name__} cannot honour them and would "
                           "take forbidden actions: train with ppo, appo, a2c, pqn or dqn, or set masks_actions = True "
                           "on the policy and restrict act(obs, mode, action_mask) to the allowed actions")
        return self.act(obs, mode, action_mask=action_mask)

    @abstractmethod
    def get_weights(self) -> dict[str, Any]:
        """Everything ``act`` depends on (parameters, observation statistics), as nested tensors."""

    @abstractmethod
    def set_weights(self, weights: dict[str, Any], version: int | None = None) -> None:
        """Load ``get_weights()`` of a policy built from the same config and spaces."""

    def value(self, obs: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """V(obs) for policies with a critic (on-policy collection bootstraps from it)."""
        raise TypeError(f"{type(self).__name__} has no value function: on-policy collection needs an actor-critic")

    def value_masked(self, obs: np.ndarray, action_mask: np.ndarray | None, rows: np.ndarray | None = None
                     ) -> np.ndarray:
        """``value`` where the env allows only ``action_mask``'s actions ([n, width] bool; None: every action): what
        on-policy collection bootstraps from. Default ``value(obs, rows)``: a critic's V(obs) does not depend on the
        mask; a policy whose value is a max over actions (PQN's max_a Q) takes it over the allowed ones."""
        return self.value(obs) if rows is None else self.value(obs, rows)

    def set_progress(self, env_steps: int, total_steps: int) -> None:
        """Where the run is, for exploration schedules (DQN's epsilon, SAC's random warm-up). Default: none."""

    def observe_only(self) -> None:
        """Freeze what ``act`` learns from observations (running statistics): workers use the learner's copy,
        and report what they saw through ``pop_observation_moments``."""

    def pop_observation_moments(self) -> dict[str, np.ndarray] | None:
        """Moments (count, mean, var) of the raw observations acted on since the last call, for a policy
        that normalises and only observes (a rollout worker); None otherwise."""
        return None

    def merge_observation_moments(self, moments: dict[str, np.ndarray]) -> None:
        """Fold a worker's ``pop_observation_moments()`` into the statistics (the learner's policy)."""

    # ---- recurrent policies (feed-forward: nothing to carry)
    def hidden(self, mode: Mode, n: int) -> torch.Tensor:
        """The [n, state_size] state the next ``act(obs, mode)`` continues from."""
        return torch.zeros(n, 0)

    def reset_hidden(self, mode: Mode, done: np.ndarray | None = None) -> None:
        """New episodes begin: zero the state of the envs in ``done`` ([n] bool; None: every env)."""

    def set_hidden(self, mode: Mode, state: torch.Tensor) -> None:
        """The [n, state_size] state the next ``act(obs, mode)`` (and, for "collect", ``value(obs)``) continues
        from: on agent envs, the rows of the agents about to act, each its own (training/agent_states.py)."""
        raise TypeError(f"{type(self).__name__} is recurrent but does not define set_hidden(mode, state), which agent "
                        "envs need to give each agent its own state")

    # ---- deployment
    def predict(self, obs: Any, deterministic: bool = True, action_mask: Any = None) -> np.ndarray:
        """The action for one observation, or for a batch of them (a leading batch axis), as the env takes it.

        ``action_mask``: the allowed actions (True = allowed; one row, or one per observation of a batch),
        for policies with ``masks_actions``; a Dict observation's ``action_mask`` entry is taken as the mask
        when none is given (PettingZoo classic's ``{"observation", "action_mask"}``, as the env boundary does
        it: ``relayrl/envs/masks.py``). Recurrent policies carry their state between calls: call
        ``reset_hidden("eval")`` when an episode starts (``predict_step`` takes and returns the state explicitly).
        """
        batch, single, mask = self.check_inputs(obs, action_mask)
        out = self.act_masked(batch, "eval" if deterministic else "collect", mask)
        return out.env_action[0] if single else out.env_action

    def export_graph(self) -> PolicyGraph | None:
        """``predict``'s deterministic policy as one traceable torch module, for ``relayrl export``: a
        ``relayrl.policy.graph.PolicyGraph`` (its docstring says what the module takes and returns). The
        default, None: the policy cannot be exported, and export says so, naming this method."""
        return None

    def check_inputs(self, obs: Any, action_mask: Any = None) -> tuple[np.ndarray, bool, np.ndarray | None]:
        """``predict``'s arguments as (a batch of observations, whether it was one, [n, width] masks or None).
        A Dict observation's ``action_mask`` entry is the mask unless ``action_mask`` is given."""
        if isinstance(obs, dict) and MASK_KEY in obs:
            obs, entry = split_mask(obs)
            action_mask = entry if action_mask is None else action_mask
        batch, single = self.check_observation(obs)
        return batch, single, self.check_action_mask(action_mask, len(batch), single)

    def check_action_mask(self, action_mask: Any, n: int, single: bool) -> np.ndarray | None:
        """``predict``'s ``action_mask`` as [n, width] bool rows (None stays None); an ActionMaskError if it does
        not fit the action space."""
        if action_mask is None:
            return None
        from relayrl.envs.masks import check_mask

        mask = check_mask(np.asarray(action_mask)[None] if single else action_mask, self.action_space,
                          "predict's action_mask", rows=n)
        return mask

    def check_observation(self, obs: Any) -> tuple[np.ndarray, bool]:
        """``obs`` as a batch, and whether it was one observation; a wrong shape or dtype is an EnvError.
        A Dict observation (one, or a batch: each key's array with a leading axis) is packed as the env
        boundary packs it (envs/packed.py)."""
        space = self.observation_space
        if isinstance(space, PackedDict) and isinstance(obs, (dict, tuple)):
            obs = space.pack(obs)
        array = np.asarray(obs)
        shape = tuple(space.shape or ())
        if array.shape == shape:
            array, single = array[None], True
        elif array.shape[1:] == shape and array.ndim == len(shape) + 1:
            single = False
        else:
            raise EnvError(f"observation of shape {array.shape}, expected {shape} (one observation) or "
                           f"(n, {', '.join(map(str, shape))}) (a batch) for {space}")
        if array.dtype.kind not in "biuf":
            raise EnvError(f"observation of dtype {array.dtype}, expected numbers ({space.dtype}) for {space}")
        return array, single


class Algorithm(ABC):
    """Owns a policy, its optimisers and targets; ``learn`` is one iteration's learning.

    ``on_policy`` algorithms learn from [T, N] rollouts the policy just collected (``learn`` gets the
    rollout); off-policy ones from replay minibatches (``learn`` gets one sampled batch, and may give each
    row a new replay priority: ``report_priorities``, read by the loop with ``pop_priorities``). ``learn``
    reads its batch and never writes into it. Everything a resume needs is in ``state_dict``.

    Every algorithm is built as ``AlgoClass(cfg, obs_space, act_space, num_envs)`` (``__init__`` below; the
    registry's ``AlgoEntry.build_algorithm`` is the one caller, and ``register`` refuses a class whose
    constructor does not take these). Its policy class is built as ``PolicyClass(obs_space, act_space, cfg)``
    (``AlgoEntry.build_policy``: rollout workers, evaluation and ``relayrl.load`` build the policy alone).

    Data-parallel learners (relayrl/learners/, docs/distributed.md "Learners"): an algorithm that sets
    ``data_parallel = True`` can learn as one of N learner processes, each given its own share of the
    experience (PPO: its own env columns, a minibatch of ``batch_size / N`` of them; off-policy: ``batch_size / N``
    rows of its own replay). ``bind_learners(collective)`` gives it ``self.learners`` (a single learner holds
    ``relayrl.learners.SOLO``, whose calls return their input: the code never asks whether it is distributed).
    The contract:

    - after ``backward`` and BEFORE gradient clipping and the optimiser step, call
      ``self.learners.average_gradients(params, values)`` (one all-reduce; ``values``: the loss terms, whose
      mean over the learners comes back, so metrics and non-finite checks agree): every learner then steps with
      the gradient of the whole batch's mean loss (equal shares), clips it as one learner would, and all hold
      the same weights;
    - a loss must be a mean over the rows of its share (equal shares then average to the whole batch's mean);
      statistics computed over a batch (PPO's advantage normalisation) are computed over every learner's share
      (``self.learners.sum_``);
    - control flow that depends on data or on the learner must be agreed, or the learners' calls stop matching
      and the group waits until its timeout: a stop (``self.learners.any_(self.stopping())``), an early stop on
      a statistic (taken from the averaged values), a count of steps (``self.learners.max_``);
    - what it learns from its own data besides the gradients (running statistics) is pooled across the learners
      (relayrl/learners/moments.py), so that every learner holds the same state.

    An algorithm that does not declare it is refused for more than one learner
    (``AlgoEntry.check_learners``, relayrl/algos/registry.py).
    """

    policy: Policy
    devices: ClassVar[tuple[str, ...]] = ("cpu",)  # device types ``to`` accepts (policy/device.py)
    device: torch.device = torch.device("cpu")
    data_parallel: ClassVar[bool] = False  # can learn as one of several learners (the contract above)
    learners: Collective = SOLO  # its group of learners (bind_learners); a single learner by default
    _stop_event: threading.Event | None = None  # stop_on's
    _priorities: np.ndarray | None = None  # report_priorities'

    def __init__(self, cfg: Any, obs_space: gym.Space, act_space: gym.Space, num_envs: int) -> None:
        """Build the policy (``self.policy``), its optimisers and targets from ``cfg`` (the algorithm's config
        section: its ``AlgoConfig``) for envs of these spaces; ``num_envs``: the env columns of the rollouts
        ``learn`` will get (per-env learner state, e.g. PPO's running return). Positional or by keyword, in
        this order; subclasses take the same parameters (the base keeps nothing)."""

    @abstractmethod
    def learn(self, batch: Batch, progress: float = 0.0) -> dict[str, float]:
        """One learning step on ``batch``; ``progress`` in [0, 1] drives schedules. Returns metrics."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Policy, optimisers, targets, normalisers: nested tensors, arrays and numbers (safetensors-able)."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``."""

    def to(self, device: torch.device) -> None:
        """Learn on ``device`` (one of ``devices``): networks, optimiser state and batches move there, while
        ``policy.get_weights()`` stays on the CPU. Called once, right after the algorithm is built. The
        default learns on the CPU only."""
        if torch.device(device).type not in self.devices:
            raise ValueError(f"{type(self).__name__} learns on {', '.join(self.devices)}, not {device}")

    def bind_env(self, env_id: str, env_mirror: Callable[[], EnvMirrorIndices | None] = no_env_mirror) -> None:
        """What depends on the env itself (e.g. PPO's mirror spec), checked before training starts.
        ``env_mirror`` reads the env's own mirror indices (``Experience.mirror_indices``; it may build an
        env, so call it only when needed)."""

    def set_progress(self, env_steps: int, total_steps: int) -> None:
        """Where the run is; the default hands it to the policy's exploration schedule."""
        self.policy.set_progress(env_steps, total_steps)

    def bind_learners(self, learners: Collective) -> None:
        """Learn as one of ``learners.size`` data-parallel learners (the class docstring's contract), after ``to``
        and once every learner holds the same state (built from the same seed, or given learner 0's:
        ``relayrl.learners.broadcast_state``). Refuses (ConfigError) a class without ``data_parallel`` when
        there is more than one; subclasses refuse their options that cannot be shared, then call this."""
        if learners.size > 1 and not self.data_parallel:
            raise ConfigError(f"{type(self).__name__} does not declare data_parallel = True, so it cannot learn as "
                              f"one of {learners.size} learners: train it with one learner")
        self.learners = learners

    def report_priorities(self, priorities: np.ndarray) -> None:
        """Called by an off-policy ``learn``: the new priority ([n] float, e.g. |TD error|) of each row of the
        minibatch it learned from, for prioritized replay (DQN, SAC)."""
        self._priorities = priorities

    def pop_priorities(self) -> np.ndarray | None:
        """The priorities the last ``learn`` reported, once (the loop hands them to the replay with the batch's
        ``index``); None when it reported none, the default: the replay keeps the rows' priorities."""
        priorities, self._priorities = self._priorities, None
        return priorities

    def timing_step(self) -> Callable[[], None] | None:
        """One representative gradient step on synthetic data (``threads=-1`` times it), or None."""
        return None

    def stop_on(self, event: threading.Event | None) -> None:
        """Let ``learn`` end its iteration early once ``event`` is set (the Trainer's ``stop_event``: Ctrl-C).
        Algorithms with long iterations check ``stopping()`` between gradient steps (PPO: between
        minibatches), so a run stops within seconds rather than after the iteration."""
        self._stop_event = event

    def stopping(self) -> bool:
        """Whether the event given to ``stop_on`` is set (never, without one)."""
        return self._stop_event is not None and self._stop_event.is_set()


class SampleSource(ABC):
    """Where the training loop's experience comes from (see the module docstring's loop).

    ``pull`` returns a chunk and the env steps it took: for on-policy algorithms a [T, N] rollout
    collected with the weights last published, for off-policy ones transitions for the replay buffer.
    """

    can_poll: ClassVar[bool] = False  # poll() returns what has arrived without waiting

    @abstractmethod
    def reset(self, seed: int | None) -> None:
        """Start collecting (reset the envs, start the workers)."""

    @abstractmethod
    def pull(self) -> tuple[Batch, int]:
        """The next chunk of experience and the env steps it took (waits for it)."""

    def poll(self) -> tuple[Batch, int]:
        """What has arrived since the last call, without waiting (sources with ``can_poll``)."""
        return {}, 0

    @abstractmethod
    def pop_episodes(self) -> tuple[list[float], list[int]]:
        """Returns and lengths of the episodes finished since the last call."""

    def state(self) -> dict[str, Any]:
        """What a resume needs of the source besides the learner (JSON-able, in the checkpoint's meta; e.g. a
        self-play opponent schedule); default nothing."""
        return {}

    def save(self, folder: Path) -> None:
        """Files a resume needs of the source, written into ``folder`` (the checkpoints') before a last checkpoint."""

    def restore(self, folder: Path, state: dict[str, Any]) -> None:
        """Undo ``save`` and ``state`` on a resume."""

    def collect_time_elsewhere(self) -> float:
        """Seconds the last ``pull``'s experience took to collect outside ``pull`` (a source whose env is stepped
        by a driver of several, training/behaviours.py); 0 for a source that collects inside ``pull``."""
        return 0.0

    def stats(self) -> dict[str, float]:
        """Metrics to log with every iteration (e.g. ``workers/lag_mean``, ``net/refused``)."""
        return {}

    def pop_observation_moments(self) -> dict[str, np.ndarray] | None:
        """Moments of the raw observations the source's workers acted on since the last call (None: none)."""
        return None

    def replay_service(self, spec: ReplaySpec) -> Replay | None:
        """``spec.shards`` replay shards this source's collectors insert into directly (the replay service:
        runtime/service.py); None when the source cannot (its experience then comes through ``pull`` into
        the learner's own replay)."""
        return None

    def publish(self, weights: dict[str, Any], version: int) -> None:
        """New weights for collectors that hold their own copy of the policy (rollout workers, the relay's
        remote workers); collectors that act with the learner's policy object need nothing."""

    def set_progress(self, env_steps: int, total_steps: int) -> None:
        """Where the run is, for collectors that act with their own copy of the policy in this process (DQN's
        epsilon, SAC's random warm-up: ``overlap``'s collecting thread); the off-policy loop calls it before every
        pull. Rollout workers read it with the weights; collectors acting with the learner's policy need nothing."""

    def close(self) -> None:
        """Stop collecting and release what the source holds."""
