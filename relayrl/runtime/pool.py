"""The learner's side of the rollout workers, whatever carries their chunks: the ``samples=`` source
and ``publish=`` sink of ``run_trainer()`` (training/trainer.py).

A ``Backend`` (runtime/backends) is the transport: workers in this process (inline), local processes
(mp), Ray actors (ray), or remote workers through a relay (``relayrl.net.backend``). Whatever the
transport, this module is the one place where chunks are gated by policy version, filtered by lag,
tagged with env columns and counted, under one set of names (docs/usage.md, "Worker metrics"):

- ``chunks``: chunks taken (their env steps, episodes and observation moments count);
- ``too_old``: taken, but more than ``max_lag`` versions behind the learner: not learned from;
- ``other_version``: on-policy chunks of a version other than the one they are needed for (PPO: the
  version just published; APPO: a version newer than the learner's, from a previous run's weights):
  dropped, their env steps not counted;
- ``surplus``: PPO: a second chunk of the version from one worker, or one beyond the rollouts needed.

Off-policy (Ape-X style): workers collect continuously with the newest weights they have; ``pull()``
returns whatever chunks have arrived (waiting up to WAIT_SLICE_S for the first, then returning empty so
the loop can look at its stop values), ``poll()`` never waits.

On-policy (synchronous, PPO): ``pull()`` asks the workers for one chunk collected with the version
just published and waits for ``backend.num_workers`` of them from distinct workers, joined along the
env axis in worker order.

On-policy, asynchronous (APPO): workers collect continuously; ``pull()`` returns the rollout chunks
that have arrived within ``max_lag`` (at least one), joined in the order they arrived: a worker that
finished two chunks while the learner was busy contributes both, its earlier chunk first. Each
worker's columns sit at slot ``worker_id % num_workers``.

On-policy rollouts carry ``column`` ([T, N] ints, constant over T): slot * num_envs + k for env k of
the chunk's worker, so per-env learner state (PPO's running return for reward scaling) follows each
env whatever order workers deliver in. A column can appear more than once in an APPO rollout
(consecutive chunks of one env, in collection order); APPO's reward scaling takes the repeats one
after the other. On-policy ``poll()`` returns a whole rollout if one is ready, else nothing.

How long silence is normal is the backend's call (``Backend.silent``): local workers that send
nothing for two minutes are stuck, remote workers may simply not be running yet.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from typing import Any

import numpy as np

from relayrl.core import SampleSource
from relayrl.data.replay import ReplaySpec
from relayrl.envs.masks import allow_all_where_unmasked
from relayrl.errors import ConfigError
from relayrl.policy.normalizer import RunningMeanStd
from relayrl.runtime.backends import Backend
from relayrl.runtime.messages import InsertTransitions, LoadParams
from relayrl.runtime.service import ReplayService
from relayrl.runtime.shard import ShardOptions
from relayrl.types import COLUMN, Batch

WAIT_SLICE_S = 1.0  # a pull waits this long per receive; off-policy it then returns, empty


class WorkerPool(SampleSource):
    """``max_lag``: chunks collected more than this many versions behind the learner count their env
    steps and are not learned from (``too_old``; null: learn from all)."""

    can_poll = True

    def __init__(self, backend: Backend, max_lag: int | None = None):
        self.backend, self.max_lag = backend, max_lag
        self.version = -1
        self.env_steps = 0
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.counts = {"chunks": 0, "too_old": 0, "other_version": 0, "surplus": 0}  # over the run
        self.worker_steps = np.zeros(backend.num_workers, dtype=np.int64)  # over the run, by worker id
        self._per_worker = np.zeros_like(self.worker_steps)  # since the last stats()
        self._timed = np.zeros_like(self.worker_steps)  # of those, steps of chunks whose collect time is known
        self._collect_s = np.zeros(backend.num_workers)  # and that time, by worker id
        self._lags: list[int] = []
        self._publish_s = 0.0
        self._since = time.monotonic()
        self._silent_s = 0.0  # waited without a chunk since the last one came (learning time not counted)
        self._steps = 0  # env steps of the chunks taken since the last pull
        self._moments: RunningMeanStd | None = None  # what the workers saw since the learner last merged

    # ---------------------------------------------------------------- loop interface

    def reset(self, seed: int | None) -> None:
        self.backend.start(0 if seed is None else seed)

    def publish(self, weights: dict[str, Any], version: int) -> None:
        start = time.perf_counter()
        self.backend.publish(LoadParams(version, weights), self.env_steps)
        self._publish_s = time.perf_counter() - start
        self.version = version

    def pull(self) -> tuple[Batch, int]:
        while True:
            out = self._take()
            if out is not None:
                return out
            if not self._receive(WAIT_SLICE_S) and self._returns_empty:
                return {}, 0

    def poll(self) -> tuple[Batch, int]:
        self._file(self.backend.receive(timeout=0.0))
        out = self._take()
        return ({}, 0) if out is None else out

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        out = (self.returns, self.lengths)
        self.returns, self.lengths = [], []
        return out

    def pop_observation_moments(self) -> dict[str, np.ndarray] | None:
        moments, self._moments = self._moments, None
        return None if moments is None else moments.state_dict()

    def stats(self) -> dict[str, float]:
        elapsed = max(time.monotonic() - self._since, 1e-9)
        lags = np.asarray(self._lags) if self._lags else np.zeros(1)
        p50, p90 = np.percentile(lags, [50, 90])
        out = {"workers/lag_mean": float(lags.mean()), "workers/lag_p50": float(p50), "workers/lag_p90": float(p90),
               "workers/lag_max": float(lags.max()), "workers/publish_s": self._publish_s,
               **{f"workers/{name}": float(n) for name, n in self.counts.items()}}
        for k, steps in enumerate(self._per_worker):
            out[f"workers/worker{k}_steps_per_s"] = float(steps) / elapsed
        out.update(self._rates(elapsed))
        self._lags, self._since = [], time.monotonic()
        self._per_worker[:] = 0
        self._timed[:] = 0
        self._collect_s[:] = 0.0
        return {**out, **self.backend.stats()}

    def _rates(self, elapsed: float) -> dict[str, float]:
        """roadrunner's sampling figures since the last stats(): the rate seen here (env steps taken per second),
        the ideal one (each worker's own rate while collecting, summed: what they would deliver with no waiting,
        transport or learning between chunks) and the overhead, 1 - seen / ideal."""
        seen = float(self._per_worker.sum()) / elapsed
        timed = self._collect_s > 0
        if not timed.any():  # (workers that do not measure: an older relayrl worker)
            return {"workers/steps_per_s": seen}
        ideal = float((self._timed[timed] / self._collect_s[timed]).sum())
        return {"workers/steps_per_s": seen, "workers/ideal_steps_per_s": ideal,
                "workers/overhead": 1.0 - seen / ideal}

    def close(self) -> None:
        self.backend.close()

    # ---------------------------------------------------------------- receiving

    _returns_empty = False  # pull() returns empty after a slice without chunks (off-policy)

    def _receive(self, timeout: float) -> bool:
        """File what arrives within ``timeout``; tell the backend how long it has been silent otherwise."""
        msgs = self.backend.receive(timeout=timeout)
        if msgs:
            self._silent_s = 0.0
            self._file(msgs)
            return True
        self._silent_s += timeout
        self.backend.silent(self._silent_s, self._waiting_for())
        return False

    @abstractmethod
    def _file(self, msgs: list[InsertTransitions]) -> None:
        """Gate and keep the chunks that arrived."""

    @abstractmethod
    def _take(self) -> tuple[Batch, int] | None:
        """What is ready to learn from and the env steps taken since the last take (None: nothing yet)."""

    @abstractmethod
    def _waiting_for(self) -> str:
        """What a pull still waits for, for the backend's notices."""

    def _accept(self, msg: InsertTransitions) -> None:
        """Count a chunk that is taken: its env steps, episodes, observation moments and lag."""
        if msg.obs_moments is not None:
            if self._moments is None:
                self._moments = RunningMeanStd(np.shape(msg.obs_moments["mean"]))
            self._moments.merge_state(msg.obs_moments)
        self.counts["chunks"] += 1
        self.env_steps += msg.env_steps
        self._steps += msg.env_steps
        self.returns.extend(msg.episode_returns)
        self.lengths.extend(msg.episode_lengths)
        self._lags.append(self.version - msg.version)
        if msg.worker_id >= len(self.worker_steps):  # (a relay's workers come as they connect)
            grow = msg.worker_id + 1 - len(self.worker_steps)
            self.worker_steps = np.concatenate([self.worker_steps, np.zeros(grow, np.int64)])
            self._per_worker = np.concatenate([self._per_worker, np.zeros(grow, np.int64)])
            self._timed = np.concatenate([self._timed, np.zeros(grow, np.int64)])
            self._collect_s = np.concatenate([self._collect_s, np.zeros(grow)])
        self._per_worker[msg.worker_id] += msg.env_steps
        if msg.collect_s > 0:
            self._timed[msg.worker_id] += msg.env_steps
            self._collect_s[msg.worker_id] += msg.collect_s
        self.worker_steps[msg.worker_id] += msg.env_steps

    def _too_old(self, msg: InsertTransitions) -> bool:
        if self.max_lag is not None and self.version - msg.version > self.max_lag:
            self.counts["too_old"] += 1
            return True
        return False

    def _steps_taken(self) -> int:
        steps, self._steps = self._steps, 0
        return steps


class OffPolicyPool(WorkerPool):
    _returns_empty = True
    service: ReplayService | None = None  # the shards the workers insert into, when the learner asked for them

    def __init__(self, backend: Backend, max_lag: int | None = None):
        super().__init__(backend, max_lag)
        self._kept: list[Batch] = []
        self._filed = False  # a chunk came since the last take

    def replay_service(self, spec: ReplaySpec) -> ReplayService | None:
        if not self.backend.serves_replay:  # (inline and remote workers feed the learner's replay through pull)
            return None
        limited = spec.samples_per_insert is not None
        if limited:
            self._check_limited_shards(spec)
        options = ShardOptions(capacity=-(-spec.capacity // spec.shards), sampler="prioritized" if spec.prioritized
                               else "uniform", alpha=spec.alpha, layout=spec.layout, max_use=spec.max_use, seed=spec.seed,
                               columns=spec.columns, max_staleness=spec.max_staleness,
                               samples_per_insert=spec.samples_per_insert,
                               spi_min_size=-(-spec.spi_min_size // spec.shards),
                               spi_error_buffer=spec.spi_error_buffer / spec.shards)
        # (under the limiter the learner samples one batch ahead, not prefetch x batches_per_request: what the
        # shards have served and the learner not yet learned from is slack in the bound)
        self.service = self.backend.replay_service(options, spec.shards, batch_size=spec.batch_size,
                                                   prioritized=spec.prioritized, beta=spec.beta,
                                                   beta_steps=spec.beta_steps, seed=spec.seed,
                                                   max_staleness=spec.max_staleness,
                                                   **({"prefetch": 1, "batches_per_request": 1} if limited else {}))
        return self.service

    def _check_limited_shards(self, spec: ReplaySpec) -> None:
        """The rate limiter over replay shards: a backend whose shards hold inserts back, every shard fed by a
        worker (a shard without one could never let the learner on), and room for the shards' slack."""
        backend = type(self.backend).__name__
        if not self.backend.limits_inserts:
            raise ConfigError(f"samples_per_insert with replay_shards > 0 needs shards that hold the workers' "
                              f"inserts back, which {backend}'s do not (built for --backend mp): train with "
                              "--backend mp, or set replay_shards=0 to keep the replay in the learner")
        if spec.shards > self.backend.num_workers:
            raise ConfigError(f"samples_per_insert with replay_shards={spec.shards} and {self.backend.num_workers} "
                              "workers: a shard that no worker inserts into never reaches its share of the bound; "
                              f"set replay_shards to at most {self.backend.num_workers}")

    def _file(self, msgs: list[InsertTransitions]) -> None:
        if self.service is not None:  # what the proxies inserted on the learner's behalf
            self.service.note_inserted(sum(m.stored_rows for m in msgs))
        for msg in msgs:
            self._filed = True
            self._accept(msg)
            if not self._too_old(msg) and msg.batch:  # (with the version that collected each row: staleness)
                rows = len(next(iter(msg.batch.values())))
                self._kept.append({**msg.batch, "version": np.full(rows, msg.version, np.int64)})

    def _take(self) -> tuple[Batch, int] | None:
        if not self._filed:
            return None
        batches = allow_all_where_unmasked(self._kept, 1)
        self._kept, self._filed = [], False
        batch = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]} if batches else {}
        return batch, self._steps_taken()

    def _waiting_for(self) -> str:
        return "no samples"


def _join_rollouts(parts: list[tuple[int, Batch]]) -> Batch:
    """[T, n] rollouts joined along the env axis in the order given, each tagged with the env columns of
    its slot."""
    batches = allow_all_where_unmasked([batch for _, batch in parts], 2)
    tagged = []
    for (slot, _), batch in zip(parts, batches):
        steps, width = batch["reward"].shape[:2]
        tagged.append({**batch, COLUMN: np.broadcast_to(slot * width + np.arange(width), (steps, width))})
    return {k: np.concatenate([p[k] for p in tagged], axis=1) for k in tagged[0]}


class OnPolicyPool(WorkerPool):
    """PPO: one rollout from each of ``backend.num_workers`` workers, of the version just published."""

    def __init__(self, backend: Backend, max_lag: int | None = None):
        super().__init__(backend, max_lag)
        self._pending: dict[int, InsertTransitions] = {}  # worker id -> its chunk of this version

    def publish(self, weights: dict[str, Any], version: int) -> None:
        super().publish(weights, version)
        self.counts["other_version"] += len(self._pending)  # chunks of the version before: no longer usable
        self._pending = {}

    def pull(self) -> tuple[Batch, int]:
        self.backend.request(self.version)
        return super().pull()

    def _file(self, msgs: list[InsertTransitions]) -> None:
        for msg in msgs:
            if msg.version != self.version:
                self.counts["other_version"] += 1
            elif msg.worker_id in self._pending or len(self._pending) >= self.backend.num_workers:
                self.counts["surplus"] += 1  # e.g. a remote worker that collected again when no new weights came
            else:
                self._pending[msg.worker_id] = msg

    def _take(self) -> tuple[Batch, int] | None:
        if len(self._pending) < self.backend.num_workers:
            return None
        ordered = [self._pending[k] for k in sorted(self._pending)]
        self._pending = {}
        for msg in ordered:
            self._accept(msg)
        return _join_rollouts([(slot, msg.batch) for slot, msg in enumerate(ordered)]), self._steps_taken()

    def _waiting_for(self) -> str:
        have = (f" ({', '.join(self.backend.worker_name(k) for k in sorted(self._pending))})"
                if self._pending else "")
        return (f"{len(self._pending)} of the {self.backend.num_workers} rollouts of policy version {self.version} "
                f"(--workers {self.backend.num_workers}) came{have}, nothing more")


class AsyncOnPolicyPool(WorkerPool):
    """APPO: whatever rollouts within ``max_lag`` have arrived, at least one."""

    def __init__(self, backend: Backend, max_lag: int | None = None):
        super().__init__(backend, max_lag)
        self._ready: list[InsertTransitions] = []

    def _file(self, msgs: list[InsertTransitions]) -> None:
        for msg in msgs:
            if msg.version > self.version:  # a previous run's weights, kept by a remote worker
                self.counts["other_version"] += 1
                continue
            self._accept(msg)
            if not self._too_old(msg):
                self._ready.append(msg)

    def _take(self) -> tuple[Batch, int] | None:
        if not self._ready:
            return None
        parts = [(msg.worker_id % self.backend.num_workers, msg.batch) for msg in self._ready]
        self._ready = []
        return _join_rollouts(parts), self._steps_taken()

    def _waiting_for(self) -> str:
        return "no rollouts" + (f" within max_policy_lag {self.max_lag}" if self.max_lag is not None else "")
