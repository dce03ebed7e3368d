"""Learning overlapped with collection (``overlap: true``): the next rollout is collected while the learner
learns from this one.

A local on-policy run takes turns: collect a [T, N] rollout, learn from it, collect the next. On a GPU
machine the two sides wait for each other (issue 29 measured collect 8.7 s + learn 3.7 s for PPO on Pong).
``OverlappedCollector`` runs the collector in a background thread with a copy of the policy (the
*behaviour* policy), so that::

    pull k   -> waits for rollout k (collected with version k-1), starts rollout k+1 with the weights
                published before this pull (version k), returns rollout k
    learn k  -> the learner, at version k, learns from rollout k while rollout k+1 is being collected

Every rollout after the first is thus collected by the policy one version behind the learner, and by one
version only (never a mix: the weights a rollout is collected with are taken when it starts, from a copy
made when they were published). The algorithm corrects for that lag: PPO's probability ratio is taken
against the stored log-probabilities of the policy that acted, and its clip bounds the step from that
policy; APPO's V-trace weights each step by the same ratio. Algorithms without such a correction (A2C,
PQN) refuse ``overlap`` (``AlgoConfig.lag_correction``).

Both sides run torch on the same device (the behaviour copy lives where the learner does: on a GPU the
collection's inference is batched there); env workers step in their processes meanwhile. Observation
statistics (PPO's ``obs_norm``) belong to the learner: the behaviour copy counts what it saw
(``observe_only``) and each rollout hands its moments over with it.

Off-policy algorithms (DQN, SAC, TD3, ...) overlap the same way: the thread collects the next
``steps_per_iteration`` vector steps of transitions while the learner runs this round's updates. They need no
correction (replay learns from transitions of any behaviour policy); each transition carries the version that
collected it (``max_staleness`` counts from it), and the copy follows the run's progress (DQN's epsilon, SAC's
random warm-up: ``set_progress``, called by the loop before every pull).

An error in the collection (a user's env raising, a dead worker) is raised by the ``pull`` that waits for
that rollout, as it would be without overlap.
"""

from __future__ import annotations

import contextlib
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np
import torch

from relayrl.core import Policy, SampleSource
from relayrl.errors import ConfigError
from relayrl.options import RunConfig
from relayrl.policy.normalizer import RunningMeanStd
from relayrl.training.collector import OffPolicyCollector, OnPolicyCollector
from relayrl.training.double_buffer import DoubleBufferedCollector, DoubleBufferedReplayCollector
from relayrl.types import Batch

__all__ = ["OverlappedCollector", "check_overlap", "owned_weights"]


Collector = OnPolicyCollector | DoubleBufferedCollector | OffPolicyCollector | DoubleBufferedReplayCollector
TRANSITIONS = (OffPolicyCollector, DoubleBufferedReplayCollector)  # the collectors of replay's transitions


class _Collected(NamedTuple):
    """One rollout (or chunk of transitions) and what came with it, handed from the collecting thread to ``pull``."""

    rollout: Batch
    steps: int  # env steps it took
    version: int  # of the policy that collected it
    moments: dict[str, np.ndarray] | None  # of the observations it saw (obs_norm)
    episodes: tuple[list[float], list[int]]  # returns and lengths of the episodes that ended in it


def owned_weights(weights: Any) -> Any:
    """A copy of a nested ``get_weights()`` state whose tensors and arrays nothing else holds: a policy's
    weights on the CPU are its live parameters, which the learner goes on updating in place."""
    if isinstance(weights, torch.Tensor):
        return weights.detach().clone()
    if isinstance(weights, np.ndarray):
        return weights.copy()
    if isinstance(weights, dict):
        return {key: owned_weights(value) for key, value in weights.items()}
    if isinstance(weights, (list, tuple)):
        return type(weights)(owned_weights(value) for value in weights)
    return weights


class OverlappedCollector(SampleSource):
    """A collector acting with its own policy copy, one pull ahead in a thread (module docstring): rollouts from an
    ``OnPolicyCollector`` or ``DoubleBufferedCollector``, transitions from an ``OffPolicyCollector`` or
    ``DoubleBufferedReplayCollector``.

    ``collector.policy`` must be a copy of the learner's policy, not the policy itself; it is put in
    ``observe_only`` mode here.
    """

    # How often the interpreter hands the GIL to another thread that wants it (Python's default: 5 ms). The collecting
    # thread takes the GIL back after every wait (an env step, a device copy); with the learner's thread running
    # Python meanwhile, each take waits out the interval: 300 steps of 8 ALE envs took 2.18 s beside a thread
    # running Python at 5 ms, 0.58 s at 0.5 ms, 0.32 s alone (this 2-core machine). Set while the thread lives.
    SWITCH_INTERVAL_S: float | None = 0.0005

    def __init__(self, collector: Collector):
        self.collector = collector
        self.transitions = isinstance(collector, TRANSITIONS)  # (rows stamped with the collecting version)
        self.policy: Policy = collector.policy
        self.policy.observe_only()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="relayrl-collect")
        self._interval = sys.getswitchinterval()  # (restored at close)
        if self.SWITCH_INTERVAL_S is not None:
            sys.setswitchinterval(self.SWITCH_INTERVAL_S)
        # on CUDA the collection's kernels go on a stream of their own, so they do not queue behind the learner's
        self._stream = (torch.cuda.stream(torch.cuda.Stream(self.policy.device)) if self.policy.device.type == "cuda"
                        else contextlib.nullcontext())
        self._ahead: Future | None = None  # the rollout under way
        self._weights: tuple[Any, int] | None = None  # published, not yet taken by a rollout
        self._progress: tuple[int, int] | None = None  # (env_steps, total_steps), not yet taken by a rollout
        self._seen: RunningMeanStd | None = None  # moments of the observations of the rollouts pulled
        self.collected_version = -1  # the policy version the last rollout pulled was collected with
        self._returns: list[float] = []  # episodes that ended in the rollouts pulled
        self._lengths: list[int] = []

    def reset(self, seed: int | None) -> None:
        self._settle()
        self.collector.reset(seed)

    def publish(self, weights: dict[str, Any], version: int) -> None:
        self._weights = (owned_weights(weights), version)

    def set_progress(self, env_steps: int, total_steps: int) -> None:
        self._progress = (env_steps, total_steps)

    def _collect(self, weights: tuple[Any, int] | None, progress: tuple[int, int] | None) -> _Collected:
        with self._stream:
            if weights is not None:
                self.policy.set_weights(*weights)
            if progress is not None:
                self.policy.set_progress(*progress)
            rollout, steps = self.collector.pull()  # (its arrays are on the host: the stream's work is done)
        version = self.policy.version
        if self.transitions and rollout:
            rollout["version"] = np.full(len(next(iter(rollout.values()))), version, np.int64)
        return _Collected(rollout, steps, version, self.policy.pop_observation_moments(),
                          self.collector.pop_episodes())

    def _start(self) -> Future:
        weights, self._weights = self._weights, None
        progress, self._progress = self._progress, None
        return self._executor.submit(self._collect, weights, progress)

    def pull(self) -> tuple[Batch, int]:
        current = self._ahead if self._ahead is not None else self._start()
        self._ahead = None
        got = current.result()  # (an error in the collection is raised here)
        self._ahead = self._start()  # with the weights published before this pull
        self.collected_version = got.version
        if got.moments is not None:
            if self._seen is None:
                self._seen = RunningMeanStd(np.shape(got.moments["mean"]))
            self._seen.merge_state(got.moments)
        self._returns += got.episodes[0]
        self._lengths += got.episodes[1]
        return got.rollout, got.steps

    def pop_observation_moments(self) -> dict[str, np.ndarray] | None:
        seen, self._seen = self._seen, None
        return None if seen is None else seen.state_dict()

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        episodes = self._returns, self._lengths
        self._returns, self._lengths = [], []
        return episodes

    def _settle(self) -> None:
        """Wait for the rollout under way, if any, and drop it (its envs are about to be reset or closed)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            try:
                ahead.result()
            except Exception:  # (dropped with its rollout: the run is resetting or ending)
                pass

    def close(self) -> None:
        self._settle()
        self._executor.shutdown(wait=True)
        sys.setswitchinterval(self._interval)


def check_overlap(config: RunConfig, on_policy: bool, offline: bool = False) -> None:
    """Refuse ``overlap: true`` where it cannot work, naming the fix (before any env or worker starts)."""
    algo = config.algo
    if offline:
        raise ConfigError(f"overlap overlaps collection with learning; {algo} learns from a dataset and collects "
                          "nothing: drop overlap")
    if on_policy and config.algo_config.lag_correction is None:
        raise ConfigError(f"{algo} has no correction for rollouts collected one policy version behind the learner: "
                          "overlap is for ppo and appo and for the algorithms that learn from replay; drop overlap")
    if config.net.server is not None or config.workers > 1 or config.backend in ("mp", "ray"):
        raise ConfigError("overlap collects on the learner's own envs in a thread beside it; rollout workers "
                          "(--workers, --backend mp/ray, --server) already collect while the learner learns: drop "
                          "overlap")
