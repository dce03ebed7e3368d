"""The learner's side of the workers: the ``samples=`` source and ``publish=`` sink of ``train()``.

Off-policy (Ape-X style): workers collect continuously with the newest weights they have;
``pull()`` returns whatever chunks have arrived (waiting for the first), ``poll()`` never waits.

On-policy (synchronous, roadrunner): ``pull()`` asks every worker for one chunk collected with the
version just published and waits for all of them; a chunk of any other version is rejected and
counted. Every worker collects exactly the chunk it was asked for, so there is no leftover
collection to cancel. The chunks are joined along the env axis in worker order.

On-policy, asynchronous (APPO): workers collect continuously; ``pull()`` returns the rollout
chunks that have arrived, whatever their versions (V-trace corrects for the lag), joined in the
order they arrived: a worker that finished two chunks while the learner was busy contributes both,
its earlier chunk first.

On-policy rollouts carry ``column`` ([T, N] ints, constant over T): the global env column
(``worker_id * num_envs + k``) of each env, so per-env learner state (PPO's running return for
reward scaling) follows each env whatever order workers deliver in. A column can appear more than
once in an APPO rollout (consecutive chunks of one env, in collection order); APPO's reward
scaling takes the repeats one after the other.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from relayrl.core import SampleSource
from relayrl.data.replay import ReplaySpec
from relayrl.errors import RelayRLError
from relayrl.policy.normalizer import RunningMeanStd
from relayrl.runtime.backends import Backend
from relayrl.runtime.messages import InsertTransitions, LoadParams
from relayrl.runtime.service import ReplayService
from relayrl.runtime.shard import ShardOptions
from relayrl.types import COLUMN, Batch

RECEIVE_TIMEOUT_S = 120.0  # no chunk at all for this long: the workers are stuck


class WorkerPool(SampleSource):
    """``max_lag``: drop (and count in ``rejected``) chunks collected more than this many versions
    behind the learner (null: keep all); their env steps still count, their data is not learned from."""

    def __init__(self, backend: Backend, max_lag: int | None = None):
        self.backend, self.max_lag = backend, max_lag
        self.version = -1
        self.env_steps = 0
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.rejected = 0
        self._lags: list[int] = []
        self._per_worker = np.zeros(backend.num_workers, dtype=np.int64)  # since the last stats()
        self.worker_steps = np.zeros(backend.num_workers, dtype=np.int64)  # over the run
        self._broadcast_s = 0.0
        self._since = time.monotonic()
        self._moments: RunningMeanStd | None = None  # what the workers saw since the learner last merged

    def reset(self, seed: int | None) -> None:
        self.backend.start(0 if seed is None else seed)

    def publish(self, weights: dict[str, Any], version: int) -> None:
        start = time.perf_counter()
        self.backend.publish(LoadParams(version, weights), self.env_steps)
        self._broadcast_s = time.perf_counter() - start
        self.version = version

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        out = (self.returns, self.lengths)
        self.returns, self.lengths = [], []
        return out

    def pop_observation_moments(self) -> dict[str, np.ndarray] | None:
        moments, self._moments = self._moments, None
        return None if moments is None else moments.state_dict()

    def _accept(self, msg: InsertTransitions) -> None:
        if msg.obs_moments is not None:
            if self._moments is None:
                self._moments = RunningMeanStd(np.shape(msg.obs_moments["mean"]))
            self._moments.merge_state(msg.obs_moments)
        self.env_steps += msg.env_steps
        self.returns.extend(msg.episode_returns)
        self.lengths.extend(msg.episode_lengths)
        self._lags.append(self.version - msg.version)
        self._per_worker[msg.worker_id] += msg.env_steps
        self.worker_steps[msg.worker_id] += msg.env_steps

    def _fresh(self, msgs: list[InsertTransitions]) -> tuple[list[InsertTransitions], int]:
        """Accept every chunk; return those within ``max_lag`` and the env steps of all of them."""
        keep = []
        for msg in msgs:
            self._accept(msg)
            if self.max_lag is not None and self.version - msg.version > self.max_lag:
                self.rejected += 1
            else:
                keep.append(msg)
        return keep, sum(m.env_steps for m in msgs)

    def _receive(self) -> list[InsertTransitions]:
        msgs = self.backend.receive(timeout=RECEIVE_TIMEOUT_S)
        if not msgs:
            raise RelayRLError(f"no samples from any of the {self.backend.num_workers} rollout workers for "
                               f"{RECEIVE_TIMEOUT_S:.0f} s: check the env's step time and the worker logs")
        return msgs

    def stats(self) -> dict[str, float]:
        elapsed = max(time.monotonic() - self._since, 1e-9)
        lags = np.asarray(self._lags) if self._lags else np.zeros(1)
        p50, p90 = np.percentile(lags, [50, 90])
        out = {"runtime/lag_mean": float(lags.mean()), "runtime/lag_p50": float(p50), "runtime/lag_p90": float(p90),
               "runtime/lag_max": float(lags.max()), "runtime/restarts": float(self.backend.restarts),
               "runtime/rejected": float(self.rejected), "runtime/broadcast_s": self._broadcast_s,
               "runtime/queue_depth": float(self.backend.queue_depth())}
        for k, steps in enumerate(self._per_worker):
            out[f"runtime/worker{k}_steps_per_s"] = float(steps) / elapsed
        self._lags, self._since = [], time.monotonic()
        self._per_worker[:] = 0
        return out

    def close(self) -> None:
        self.backend.close()


class OffPolicyPool(WorkerPool):
    can_poll = True
    service: ReplayService | None = None  # the shards the workers insert into, when the learner asked for them

    def replay_service(self, spec: ReplaySpec) -> ReplayService | None:
        if not self.backend.serves_replay:  # (inline workers feed the learner's replay through pull)
            return None
        options = ShardOptions(capacity=-(-spec.capacity // spec.shards), sampler="prioritized" if spec.prioritized
                               else "uniform", alpha=spec.alpha, layout=spec.layout, max_use=spec.max_use, seed=spec.seed,
                               columns=spec.columns)
        self.service = self.backend.replay_service(options, spec.shards, batch_size=spec.batch_size,
                                                   prioritized=spec.prioritized, beta=spec.beta,
                                                   beta_steps=spec.beta_steps, seed=spec.seed)
        return self.service

    def pull(self) -> tuple[Batch, int]:
        return self._combine(self._receive())

    def poll(self) -> tuple[Batch, int]:
        return self._combine(self.backend.receive(timeout=0.0))

    def _combine(self, msgs: list[InsertTransitions]) -> tuple[Batch, int]:
        if self.service is not None:  # what the proxies inserted on the learner's behalf
            self.service.note_inserted(sum(m.stored_rows for m in msgs))
        keep, steps = self._fresh(msgs)
        batches = [m.batch for m in keep if m.batch]
        batch = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]} if batches else {}
        return batch, steps


def _join_rollouts(msgs: list[InsertTransitions]) -> Batch:
    """[T, n_k] chunks joined along the env axis in the order given (one worker's chunks arrive in
    the order it collected them), each tagged with its global env columns."""
    parts = []
    for msg in msgs:
        steps, width = msg.batch["reward"].shape[:2]
        column = np.broadcast_to(msg.worker_id * width + np.arange(width), (steps, width))
        parts.append({**msg.batch, COLUMN: column})
    return {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}


class OnPolicyPool(WorkerPool):
    def pull(self) -> tuple[Batch, int]:
        self.backend.request(self.version)
        chunks: dict[int, InsertTransitions] = {}
        while len(chunks) < self.backend.num_workers:
            for msg in self._receive():
                if msg.version != self.version or msg.worker_id in chunks:
                    self.rejected += 1  # on-policy: a chunk of another version cannot be used
                    continue
                chunks[msg.worker_id] = msg
        ordered = [chunks[k] for k in sorted(chunks)]
        for msg in ordered:
            self._accept(msg)
        return _join_rollouts(ordered), sum(m.env_steps for m in ordered)


class AsyncOnPolicyPool(WorkerPool):
    def pull(self) -> tuple[Batch, int]:
        steps = 0
        while True:  # until some chunk is recent enough to learn from
            keep, received = self._fresh(self._receive())
            steps += received
            if keep:
                return _join_rollouts(keep), steps
