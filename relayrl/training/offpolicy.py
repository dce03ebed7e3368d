"""The off-policy side of the training loop (TMRL's TrainingOffline semantics).

Each iteration collects ``steps_per_iteration`` vector steps into the replay buffer (through an
n-step accumulator), then runs the updates that are due:

- none until the buffer holds ``start_training`` transitions;
- ``updates_per_step`` updates per env step collected since then, in arrears;
- never more than ``max_training_steps_per_env_step`` updates per env step overall: the learner
  pauses when it gets ahead of collection (what keeps real-time workers and the learner in balance).

With ``samples_per_insert`` set, a ``RateLimiter`` (data/replay/ratelimit.py) replaces that schedule:
the updates due are those the limiter allows (the learner waits when none are); rows past the bound are
held here and stored as updates make room, and while any are held the round takes nothing from the
sample source (the local collector collects less; rollout workers block once their chunks in transit fill
the transport's bound). Held rows are not checkpointed: at most one pull's, lost on a resume.

``ReplayRounds.gather`` returns the updates to run (``UpdatesDue``); ``ReplayUpdates.learn`` runs them
from the buffer, so the Learner and its hooks drive off-policy algorithms exactly like PPO. The
local collector, ``OffPolicyCollector``, is in training/collector.py with the on-policy one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np


from relayrl.core import Algorithm, Policy, SampleSource
from relayrl.data.datasets import load_dataset
from relayrl.data.dtypes import store_transitions, stored_dtype
from relayrl.data.replay import REPLAY_FILE, Replay, ReplayBuffer, ReplaySpec, choose_layout
from relayrl.data.replay.custom import build_memory, check_batch, probe_spaces, probe_transitions
from relayrl.data.replay.ratelimit import RateLimiter
from relayrl.errors import ConfigError
from relayrl.options import ReplayLoopConfig
from relayrl.training.rounds import Rounds, UpdatesDue
from relayrl.training.sample_transform import SampleTransform
from relayrl.types import Batch



def replay_columns(policy: Policy) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
    """The columns of the transitions ``policy``'s collectors store that its spaces fix in advance, as
    (name, dtype, row shape): obs and next_obs (Box observations) and action. A replay shard checks
    every chunk against them, the first one included."""
    columns = []
    space = policy.observation_space
    if isinstance(space, gym.spaces.Box):
        obs = (stored_dtype(space.dtype).str, tuple(space.shape))
        columns += [("obs", *obs), ("next_obs", *obs)]
    action = np.dtype(np.float32) if np.dtype(policy.action_dtype).kind == "f" else np.dtype(policy.action_dtype)
    columns.append(("action", action.str, tuple(policy.action_shape)))
    return tuple(columns)


def replay_layout(space: gym.Space, requested: str = "auto") -> str:
    """The replay layout for observations of ``space``: ``requested``, or for "auto" "frames" (each frame
    held once) for images of 4 KB or more, else "plain"."""
    if requested != "auto":
        return requested
    if not isinstance(space, gym.spaces.Box):
        return "plain"
    return choose_layout(space.shape, stored_dtype(space.dtype).itemsize)


class ReplayRounds(Rounds[UpdatesDue]):
    """Collection into replay plus the update schedule; ``gather`` returns (``UpdatesDue``, env steps)."""

    learning: ReplayUpdates

    def __init__(self, algo: Algorithm, samples: SampleSource, cfg: ReplayLoopConfig, seed: int, total_steps: int,
                 publish: Callable[[dict, int], None] | None = None, layout: str = "plain", name: str = "algo"):
        """``samples``: where transitions come from (a local ``OffPolicyCollector``, workers, the relay);
        ``publish(weights, version)``: where weights go every ``update_model_interval`` updates (None:
        the collectors act with ``algo.policy``); ``layout``: the replay's ("frames" for images:
        ``replay_layout(observation_space)``); ``name``: the algorithm's config section, for messages."""
        self.algo, self.cfg, self.total_steps, self.name = algo, cfg, total_steps, name
        self.samples = samples
        # one of N data-parallel learners (algo.learners, bound before the rounds are made) samples batch_size / N
        # rows of its own replay, which holds its own share of the transitions
        self.batch_size = cfg.batch_size // algo.learners.size
        self.capacity = -(-cfg.buffer_size // algo.learners.size)  # (the group's replay holds buffer_size in all)
        self.limiter = None if cfg.samples_per_insert is None else RateLimiter.from_tolerance(
            cfg.samples_per_insert, cfg.spi_tolerance, cfg.transitions_before_learning() // algo.learners.size,
            self.batch_size, name, cfg.replay_shards)
        self._updates_seen = 0  # learning.updates at the last gather (the limiter counts what ran since)
        self._due = 0  # updates the last gather handed the learner
        self._updates_handed = 0  # learning.updates then
        self._held: Batch | None = None  # rows taken from the source that the limiter has not let in yet
        self.buffer: Replay = (self._service(cfg, seed, total_steps, layout) if cfg.replay_shards
                               else self._memory(cfg, seed) if cfg.replay is not None
                               else self._buffer(cfg, seed, total_steps, layout, self.capacity))
        transform = None if cfg.sample_transform is None else self._transform(cfg.sample_transform, seed)
        self.learning = ReplayUpdates(algo, self.buffer, self.batch_size, publish, cfg.update_model_interval,
                                      transform=transform)
        self.prefilled = 0  # transitions a dataset put into replay (no env steps)
        self.first_added: Batch | None = None  # (with your own memory: its first sample is checked against it)
        self.dataset_columns: set[str] | None = None  # (with a dataset: until the first collected transitions)
        if cfg.dataset is not None:  # checked against the spaces before the run directory is written
            self._load_dataset(cfg.dataset)
        if cfg.update_buffer_interval is not None and self.samples.can_poll:
            self.learning.refill, self.learning.refill_every = self._poll, cfg.update_buffer_interval
        self.polled_steps = 0  # env steps received mid-round
        self.steps_at_start: int | None = None  # env steps when the buffer first reached start_training

    @staticmethod
    def _buffer(cfg: ReplayLoopConfig, seed: int, total_steps: int, layout: str, capacity: int) -> ReplayBuffer:
        options: dict[str, Any] = {"alpha": cfg.priority_alpha, "beta": cfg.priority_beta,
                                   "beta_steps": max(1, total_steps)} if cfg.prioritized else {}
        return ReplayBuffer(capacity, sampler="prioritized" if cfg.prioritized else "uniform",
                            max_use=cfg.max_use, max_staleness=cfg.max_staleness, seed=seed, layout=layout, **options)

    def _memory(self, cfg: ReplayLoopConfig, seed: int) -> Replay:
        """Your own memory (``cfg.replay``), built and checked (data/replay/custom.py)."""
        policy = self.algo.policy
        return build_memory(cfg.replay, f"{self.name}.replay", prioritized=cfg.prioritized,
                            capacity=self.capacity, observation_space=policy.observation_space,
                            action_space=policy.action_space, seed=seed, batch_size=cfg.batch_size)

    def _transform(self, reference: str, seed: int) -> SampleTransform:
        """The sampled-batch hook, checked on transitions drawn from the spaces where they can be (before any file)."""
        transform, policy = SampleTransform(reference, f"{self.name}.sample_transform"), self.algo.policy
        if probe_spaces(policy.observation_space, policy.action_space):
            transform.check(probe_transitions(policy.observation_space, policy.action_space, self.cfg.batch_size, seed),
                            f"{self.cfg.batch_size} transitions drawn from the spaces")
        return transform

    def _load_dataset(self, path: str) -> None:
        """The transitions of the dataset ``path`` into replay (the offline algorithms' loader, data/datasets.py)."""
        policy = self.algo.policy
        data = load_dataset(path, policy.observation_space, policy.action_space)
        rows = len(data["obs"])
        if rows > self.cfg.buffer_size:
            raise ConfigError(f"{self.name}.dataset {path!r} holds {rows} transitions, more than "
                              f"{self.name}.buffer_size={self.cfg.buffer_size}: raise buffer_size to at least "
                              f"{rows} (or give a smaller dataset)")
        data.pop("truncated", None)  # the columns the collectors send (a truncated transition still bootstraps)
        data["discount"] = np.full(rows, self.cfg.gamma, np.float32)  # (one-step: what the n-step accumulator adds)
        self._store(data)
        self.prefilled = rows
        self.dataset_columns = set(data)  # the collectors' first transitions must have the same (``_store``)

    def _check_columns(self, columns: set[str]) -> None:
        """The collectors' first transitions have the columns of the dataset the replay started with."""
        extra, missing = sorted(columns - self.dataset_columns), sorted(self.dataset_columns - columns)
        if extra or missing:
            raise ConfigError(f"{self.name}.dataset {self.cfg.dataset!r} has the columns "
                              f"{', '.join(sorted(self.dataset_columns))}, and this env's transitions "
                              + (f"also carry {', '.join(extra)} (e.g. action masks), which no dataset gives"
                                 if extra else f"lack {', '.join(missing)}")
                              + f": train without {self.name}.dataset on this env")
        self.dataset_columns = None

    def _service(self, cfg: ReplayLoopConfig, seed: int, total_steps: int, layout: str) -> Replay:
        """The replay shards the sample source's collectors insert into (the replay service)."""
        service = self.samples.replay_service(ReplaySpec(
            cfg.replay_shards, cfg.buffer_size, cfg.batch_size, cfg.prioritized, cfg.priority_alpha, cfg.priority_beta,
            max(1, total_steps), layout, cfg.max_use, seed, replay_columns(self.algo.policy),
            cfg.max_staleness, cfg.samples_per_insert, cfg.transitions_before_learning(),
            0.0 if self.limiter is None else self.limiter.error_buffer))
        if service is None:
            raise ConfigError(f"replay_shards={cfg.replay_shards} runs the replay as shards on Ray or in local "
                              "processes, which this experience source cannot feed: train with rollout workers "
                              "(--backend mp|ray --workers N), or set replay_shards=0 to keep the replay in the learner")
        return service

    def _poll(self) -> None:
        if self.limiter is not None:  # (mid-round: the held rows first, and nothing new while some are held)
            self._count_samples()
            self._insert_held()
            if self._held is not None:
                return
            batch, steps = self.samples.poll()
            self._held, self.polled_steps = batch or None, self.polled_steps + steps
            self._insert_held()
            return
        batch, steps = self.samples.poll()
        self._store(batch)
        self.polled_steps += steps

    def _store(self, batch: Batch) -> None:
        """Transitions into replay, in their stored dtypes whatever the source (data/dtypes.py)."""
        if batch:
            batch = store_transitions(batch)
            collected = batch.pop("version", None)  # the collecting policy's version, per row (rollout workers)
            if self.dataset_columns is not None:
                self._check_columns(set(batch))
            rows = len(next(iter(batch.values())))
            if self.cfg.max_staleness is not None:  # the version that collected them: the workers' or, for a
                # local collector (it acts with the learner's policy, before this round's updates), the learner's
                batch["version"] = (np.asarray(collected, np.int64) if collected is not None
                                    else np.full(rows, self.algo.policy.version, np.int64))
            if self.limiter is not None:
                self.limiter.insert(rows)
            if self.first_added is None and self.cfg.replay is not None:
                self.first_added = {key: np.asarray(value)[:1] for key, value in batch.items()}
                self.learning.expected = self.first_added
                self.learning.memory = f"{self.name}.replay {self.cfg.replay!r}"
            self.buffer.add(batch)

    def gather(self, env_steps: int, updates: int) -> tuple[UpdatesDue, int]:
        self.algo.set_progress(env_steps, self.total_steps)
        self.samples.set_progress(env_steps, self.total_steps)
        if self.limiter is not None:
            return self._limited(env_steps)
        batch, steps = self.samples.pull()
        self._store(batch)
        env_steps += steps
        threshold = max(self.cfg.start_training // self.algo.learners.size, self.batch_size)
        if len(self.buffer) < threshold:
            return UpdatesDue(0), steps
        if self.steps_at_start is None:  # the env step at which the buffer reached the threshold
            # (transitions past the threshold were collected since it, unless a dataset put them there: those
            # are no env steps, and counting them would make the first round's updates due all at once)
            self.steps_at_start = env_steps - max(0, len(self.buffer) - max(threshold, self.prefilled))
        due = int((env_steps - self.steps_at_start) * self.cfg.updates_per_step) - self.learning.updates
        cap = self.cfg.max_training_steps_per_env_step
        if cap is not None:
            due = min(due, int(env_steps * cap) - updates)
        return UpdatesDue(max(0, due)), steps

    def _count_samples(self) -> None:
        """Rows the updates run since the last call sampled, into the limiter."""
        self.limiter.sample((self.learning.updates - self._updates_seen) * self.batch_size)
        self._updates_seen = self.learning.updates

    def _limited(self, env_steps: int) -> tuple[UpdatesDue, int]:
        """``gather`` under the rate limiter: store what the bound allows of the rows held from earlier rounds
        (the insert side waits while any are held); take from the source only when none are (so the local
        collector collects less, and rollout workers block once the transport's bound is full), the learner
        waiting if no update is allowed meanwhile; then hand the learner the updates the limiter allows."""
        limiter, ran = self.limiter, self.learning.updates - self._updates_handed
        self._count_samples()
        self._count_inserted_elsewhere()
        # (a round that could run none of its updates: everything was evicted, max_use/max_staleness; only
        # new transitions help, so they are stored whatever the limiter says)
        everything = self._due > 0 and ran == 0
        self._insert_held(everything)
        steps = 0
        if self._held is None:
            if (limiter.updates_allowed(self.batch_size) == 0
                    and len(self.buffer) >= self.cfg.transitions_before_learning() // self.algo.learners.size):
                limiter.wait("learner", time.monotonic())  # (until the source's next rows allow an update)
            batch, steps = self.samples.pull()
            self._held = batch or None
            self._insert_held(everything)
            self._count_inserted_elsewhere()
        due = limiter.updates_allowed(self.batch_size)
        if due:
            limiter.resume("learner", time.monotonic())
        if self.steps_at_start is None and due:
            self.steps_at_start = env_steps + steps
        self._due, self._updates_handed = due, self.learning.updates
        return UpdatesDue(due), steps

    def _count_inserted_elsewhere(self) -> None:
        """Replay shards: the rows the workers inserted into them (held back at the shards, not here)."""
        inserted = self.buffer.inserted_elsewhere()
        if inserted is not None:
            self.limiter.inserted = inserted

    def _insert_held(self, everything: bool = False) -> None:
        """Store the held rows as far as the limiter allows (all of them with ``everything``)."""
        if self._held is None:
            return
        rows = len(next(iter(self._held.values())))
        n = rows if everything else self.limiter.insertable(rows)
        if n:
            self._store({key: np.asarray(value)[:n] for key, value in self._held.items()} if n < rows else self._held)
        self._held = None if n == rows else {key: np.asarray(value)[n:] for key, value in self._held.items()}
        now = time.monotonic()
        if self._held is None:
            self.limiter.resume("insert", now)
        else:
            self.limiter.wait("insert", now)

    def stats(self) -> dict[str, float]:
        out = super().stats()
        if self.limiter is not None:
            self._count_samples()
            out.update(self.limiter.stats(time.monotonic()))
            if self.cfg.replay_shards:  # (the insert side waits at the shards)
                shards = self.buffer.stats()
                out["limiter/insert_waits"] = shards["replay/insert_waits"]
                out["limiter/insert_wait_s"] = shards["replay/insert_wait_s"]
        return out

    def steps_received_while_learning(self) -> int:
        steps, self.polled_steps = self.polled_steps, 0
        return steps

    def save(self, folder: Path) -> None:
        self.buffer.save(folder / REPLAY_FILE)
        super().save(folder)

    def state(self) -> dict[str, Any]:
        out = {"steps_at_start": -1 if self.steps_at_start is None else self.steps_at_start,
               "replay_updates": self.learning.updates, **super().state()}
        if self.limiter is not None:
            self._count_samples()
            out["limiter"] = self.limiter.state()
        return out

    def restore(self, folder: Path, state: dict[str, Any]) -> None:
        super().restore(folder, state)
        if self.cfg.replay_shards or (folder / REPLAY_FILE).is_file():  # (shards look for their own files)
            self.buffer.load(folder / REPLAY_FILE)
        start = int(state.get("steps_at_start", -1))
        self.steps_at_start = None if start < 0 else start
        self.learning.updates = self._updates_seen = self._updates_handed = int(state.get("replay_updates", 0))
        if self.limiter is not None:
            self.limiter.restore(state.get("limiter", {}))


class ReplayUpdates:
    """The off-policy ``LearningStep`` the Learner drives: ``learn(UpdatesDue(n))`` runs n replay updates,
    each sampling a minibatch, learning from it, writing its new priorities back and publishing the
    weights every ``publish_every`` updates."""

    def __init__(self, algo: Algorithm, buffer: Replay, batch_size: int,
                 publish: Callable[[dict, int], None] | None = None, publish_every: int = 1,
                 transform: Callable[[Batch], Batch] | None = None):
        self.algo, self.buffer, self.batch_size = algo, buffer, batch_size
        self.transform = transform  # the sampled-batch hook (sample_transform)
        self.priorities = type(buffer).update_priorities is not Replay.update_priorities  # (does it take them?)
        self.memory = "the replay"  # (your memory, as the config names it: for messages)
        self.expected: Batch | None = None  # a row of the first transitions added: the next sample is checked on it
        self.publish, self.publish_every = publish, publish_every
        self.refill: Callable[[], None] | None = None  # drains a sample source mid-round
        self.refill_every = 0
        self.updates = 0
        self.staleness_sum, self.staleness_max, self.staleness_n = 0.0, 0, 0  # sampled rows' versions behind

    def learn(self, due: UpdatesDue, progress: float = 0.0) -> dict[str, float]:
        sums: dict[str, float] = {}
        staleness, start = self.buffer.max_staleness is not None, self.updates
        for _ in range(due.n):
            # Ctrl-C: the round's remaining updates wait for no one; a None batch: everything was evicted (max_use,
            # max_staleness), wait for new transitions. Data-parallel learners stop together (one learner's any_ is
            # its own flag)
            stop = self.algo.stopping()
            batch = None if stop else self.buffer.sample(self.batch_size, version=self.algo.policy.version
                                                         if staleness else None)
            if self.algo.learners.any_(stop or batch is None):
                break
            if self.expected is not None:  # your own memory's first sample (data/replay/custom.py)
                check_batch(self.expected, batch, self.batch_size, f"{self.memory}: sample({self.batch_size}) "
                            "after the first transitions of the run")
                self.expected = None
            if "version" in batch:  # (stored with max_staleness: the version that collected each row)
                ages = self.algo.policy.version - np.asarray(batch["version"])
                self.staleness_sum, self.staleness_max = self.staleness_sum + float(ages.mean()), max(
                    self.staleness_max, int(ages.max()))
                self.staleness_n += 1
            if self.transform is not None:
                batch = self.transform(batch)
            metrics = self.algo.learn(batch, progress=progress)
            priorities = self.algo.pop_priorities()  # (algorithms that report none leave them as they are)
            if priorities is not None and self.priorities:
                self.buffer.update_priorities(batch["index"], priorities)
            for key, value in metrics.items():
                sums[key] = sums.get(key, 0.0) + value
            self.updates += 1
            if self.publish is not None and self.updates % self.publish_every == 0:
                self.publish(self.algo.policy.get_weights(), self.algo.policy.version)
            if self.refill is not None and self.updates % self.refill_every == 0:
                self.refill()
        done = self.updates - start
        out = {key: value / done for key, value in sums.items()} if done else {}
        out["updates"] = float(done)
        if self.staleness_n:  # sampled rows' age in versions, this round: mean over its updates, and the largest
            out["replay/sampled_staleness_mean"] = self.staleness_sum / self.staleness_n
            out["replay/sampled_staleness_max"] = float(self.staleness_max)
            self.staleness_sum, self.staleness_max, self.staleness_n = 0.0, 0, 0
        out.update(self.buffer.stats())
        return out
