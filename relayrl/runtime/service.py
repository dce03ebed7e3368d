"""The replay service: replay shards on Ray, and the learner's handle on them (``ReplayService``).

``replay_shards: N`` (an off-policy algorithm's option) with the Ray backend starts N shard actors
(runtime/shard.py) before the learner's first sample and before any worker. Node proxies insert
their workers' chunks straight into a shard (``worker_id % N``) and send the learner only what it
counts (env steps, episodes); the learner asks the shards for batches through this module:

    service = ReplayService(RayShards(options, 2), batch_size=256, prioritized=True, beta=0.4, beta_steps=10**5)
    service.start()                                  # the shards, in order, before anything else
    batch = service.sample(256)                      # prefetched: the next requests are already in flight
    service.update_priorities(batch["index"], td)    # routed back to each item's shard
    service.stats()                                  # sizes, rates, restarts, lost items, refusals
    service.save(path); service.stop(deadline)

``ReplayService`` offers what the replay loop uses of a ``ReplayBuffer`` (``sample``,
``update_priorities``, ``add``, ``__len__``, ``stats``, ``save``, ``load``), so ``ReplayRounds``
runs unchanged on either. Requests are split by sharding.py and ``prefetch`` of them are kept in
flight, so the learner waits on a round trip only when it outruns the shards. One request draws
``batches_per_request`` batches' worth of i.i.d. items at once (one call per shard, not one per
update: a Ray call costs the learner ~0.3 ms), and priority updates travel together with the next
request, so priorities reach the shards up to ``prefetch * batches_per_request`` updates late, as
in Ape-X, where the learner also samples ahead of its updates.

Orchestration: the service sends every shard a heartbeat request every ``heartbeat_s``; a shard that
dies (its actor lost) or does not answer within ``timeout_s`` is killed and started again, restoring
its last snapshot (written by ``save``, i.e. with every ``last`` checkpoint); the items it held beyond
that snapshot are counted in ``replay/lost_items``, never silently. ``stop`` sends ``Stop`` with a
deadline: shards finish the call in hand and return; whatever is left at the deadline is killed.
"""

from __future__ import annotations

import collections
import logging
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable

import numpy as np

from relayrl.data.replay import SHARD_FILE, Replay
from relayrl.errors import RelayRLError
from relayrl.runtime.messages import BatchTrainingData, Heartbeat, InsertTransitions, SampleBatch, Stop
from relayrl.runtime.sharding import ShardedSampling
from relayrl.types import Batch

log = logging.getLogger("relayrl")



class ShardLost(Exception):
    """A shard's call failed because the shard is gone (died, killed, or its node lost)."""


class Shards(ABC):
    """Where the shards run. Calls return handles, resolved by ``wait``/``get``."""

    num_shards: int

    @abstractmethod
    def start(self, k: int, snapshot_path: str | None) -> None:
        """Start (or restart) shard k, restoring ``snapshot_path`` if that file exists."""

    @abstractmethod
    def call(self, k: int, method: str, *args: Any) -> Any:
        """Call ``ReplayShard.<method>(*args)`` of shard k; returns a handle."""

    @abstractmethod
    def ready(self, handles: list[Any], timeout: float) -> list[Any]:
        """The handles among ``handles`` that are resolved, waiting up to ``timeout`` for the first."""

    @abstractmethod
    def get(self, handle: Any) -> Any:
        """The result of a resolved handle; ShardLost if the shard died."""

    @abstractmethod
    def kill(self, k: int) -> None:
        """Stop shard k at once."""

    def handle_of(self, k: int) -> Any:
        """What a node proxy needs to insert into shard k directly (None: inserts go through ``add``)."""
        return None


class ReplayService(Replay):
    """The learner's replay when the replay runs as shards (module docstring)."""

    def __init__(self, shards: Shards, *, batch_size: int, prioritized: bool, beta: float = 0.4,
                 beta_steps: int = 100_000, prefetch: int = 2, batches_per_request: int = 8, heartbeat_s: float = 1.0,
                 timeout_s: float = 30.0,
                 max_restarts: int = 10, seed: int = 0, max_staleness: int | None = None):
        """``max_staleness``: the shards' (ShardOptions), said here for the replay loop, which then passes the
        learner's version to ``sample``; requests carry the version of when they are sent, so with prefetching
        a shard judges staleness up to ``(prefetch + 1) x batches_per_request`` updates late (the requests in
        flight and the batches in use)."""
        self.shards, self.num_shards = shards, shards.num_shards
        self.max_staleness = max_staleness
        self._version = 0  # the learner's, at its last sample (sent with the next requests)
        self.sampling = ShardedSampling(self.num_shards, prioritized, beta, beta_steps, seed)
        self.batch_size, self.prefetch, self.batches_per_request = batch_size, prefetch, batches_per_request
        self._ready: list[Batch] = []  # batches of the last answered request, not yet learned from
        self._priorities: list[tuple[np.ndarray, np.ndarray]] = []  # updates not yet sent
        self.heartbeat_s, self.timeout_s, self.max_restarts = heartbeat_s, timeout_s, max_restarts
        self._requests: list[tuple[int, list[tuple[int, Any]]]] = []  # (request id, [(shard, handle)])
        self._next_request = 0
        self._beats: dict[int, tuple[Any, float]] = {}  # shard -> (heartbeat handle, sent at)
        self._next_beat = 0.0
        self._snapshot_paths: list[str | None] = [None] * self.num_shards
        self._counters = [dict[str, float]() for _ in range(self.num_shards)]
        self._insert_k = 0
        self.restarts = 0
        self.lost_items = 0
        self.refusals: collections.deque[str] = collections.deque(maxlen=100)  # the newest shards' refusals
        self.reported: set[str] = set()
        self.sampled = 0
        self.noted = 0  # rows the inserters said they inserted (``note_inserted``)
        self._retired_inserted = 0.0  # inserts counted by shards since restarted (their counters start at 0)
        self.capacity = 0  # of every shard together (from their first heartbeats)
        self.lost_chunks = 0  # chunks whose shard died before storing them (reported by the node proxies)
        self.on_restart: Callable[[int], None] | None = None  # tells the inserters about a new shard k
        self.started = False

    # ---- orchestration
    def start(self) -> None:
        """Start every shard and wait for its first heartbeat (shards come before learner and workers)."""
        if self.started:
            return
        for k in range(self.num_shards):
            self.shards.start(k, self._snapshot_paths[k])
        self._ask_all(wait=True)
        self._next_beat = time.monotonic() + self.heartbeat_s
        self.started = True

    def _send_beat(self, k: int) -> None:
        self._beats[k] = (self.shards.call(k, "beat"), time.monotonic())

    def _collect_beats(self, wait_all: bool = False) -> None:
        deadline = time.monotonic() + self.timeout_s
        while self._beats:
            handles = {h: k for k, (h, _) in self._beats.items()}
            timeout = max(0.0, deadline - time.monotonic()) if wait_all else 0.0
            for handle in self.shards.ready(list(handles), timeout):
                k = handles[handle]
                del self._beats[k]
                try:
                    beat, refusals = self.shards.get(handle)
                except ShardLost as exc:
                    self._restart(k, str(exc))
                    continue
                self._observe_beat(beat, refusals)
            if not wait_all or time.monotonic() >= deadline:
                break
        now = time.monotonic()
        for k, (_, sent) in list(self._beats.items()):
            if now - sent > self.timeout_s:
                del self._beats[k]
                self._restart(k, f"no heartbeat for {self.timeout_s:g} s")

    def _observe_beat(self, beat: Heartbeat, refusals: list[str]) -> None:
        self.sampling.observe(beat)
        if not self._counters[beat.role_id]:
            self.capacity += int(beat.counters["capacity"])
        self._counters[beat.role_id] = dict(beat.counters)
        for reason in refusals:
            self.refusals.append(reason)
            cause = reason.split(": ", 1)[-1]
            if cause not in self.reported:  # once per kind of problem, not per chunk
                self.reported.add(cause)
                log.warning("%s", reason)

    def check(self) -> None:
        """Heartbeats: send them when due, take the answers, restart shards that died or hang."""
        self._collect_beats()
        now = time.monotonic()
        if now >= self._next_beat:
            self._next_beat = now + self.heartbeat_s
            self._ask_all()  # (and take what has answered already)

    def _ask_all(self, wait: bool = False) -> None:
        """A heartbeat request to every shard not already asked; take the answers (waiting for all: ``wait``)."""
        for k in range(self.num_shards):
            if k not in self._beats:
                self._send_beat(k)
        self._collect_beats(wait_all=wait)

    def _restart(self, k: int, reason: str) -> None:
        if self.restarts >= self.max_restarts:
            raise RelayRLError(f"replay shard {k} failed ({reason}) after {self.restarts} restarts of replay shards; "
                               "look at the shard's log (Ray: /tmp/ray/session_latest/logs on its node) for why")
        held = int(self._counters[k].get("size", 0))
        self._retired_inserted += self._counters[k].get("inserted", 0.0)
        self.shards.kill(k)
        self.shards.start(k, self._snapshot_paths[k])
        self.restarts += 1
        self.sampling.forget(k)
        self._beats.pop(k, None)
        handle = self.shards.call(k, "beat")
        try:
            beat, refusals = self.shards.get(self.shards.ready([handle], self.timeout_s)[0])
        except (ShardLost, IndexError):
            raise RelayRLError(f"replay shard {k} did not come back after a restart ({reason})") from None
        restored = int(beat.counters.get("restored", 0))
        self.lost_items += max(0, held - restored)
        self._observe_beat(beat, refusals)
        log.warning("replay shard %d restarted (%s): %d items restored from its snapshot, %d lost", k, reason,
                    restored, max(0, held - restored))
        # requests in flight to the dead shard are dropped (the others' answers still make a batch)
        self._requests = [(rid, [(j, h) for j, h in parts if j != k]) for rid, parts in self._requests]
        if self.on_restart is not None:
            self.on_restart(k)

    # ---- sampling
    def _request(self) -> None:
        counts = self.sampling.split(self.batch_size * self.batches_per_request)
        if counts is None and len(self):  # items were inserted that no shard has reported yet: ask them now
            self._ask_all(wait=True)
            counts = self.sampling.split(self.batch_size * self.batches_per_request)
        if counts is None:
            return
        self._flush_priorities()  # before the shards sample again
        rid, self._next_request = self._next_request, self._next_request + 1
        parts = [(k, self.shards.call(k, "sample", SampleBatch(rid, int(n), self._version)))
                 for k, n in enumerate(counts) if n > 0]
        self._requests.append((rid, parts))

    def sample(self, n: int, version: int | None = None) -> Batch | None:
        """A batch of n items over every shard, or None when the shards hold nothing yet."""
        if n != self.batch_size:
            raise ValueError(f"this replay service samples batches of {self.batch_size}, not {n}")
        if version is not None:
            self._version = version
        if not self._ready:
            self._next_batches()
        if not self._ready:
            return None
        batch = self._ready.pop()
        self.sampled += len(batch["index"])
        return batch

    def _next_batches(self) -> None:
        """Take the oldest request's answers (waiting for them) into ``_ready``; send the next request."""
        self.check()
        while len(self._requests) < self.prefetch:
            before = len(self._requests)
            self._request()
            if len(self._requests) == before:
                return  # no shard has reported any items
        _, parts = self._requests.pop(0)
        answers: list[BatchTrainingData] = []
        for k, handle in parts:
            if not self.shards.ready([handle], self.timeout_s):
                self._restart(k, f"a sample request took over {self.timeout_s:g} s")
                continue
            try:
                answers.append(self.shards.get(handle))
            except ShardLost as exc:
                self._restart(k, str(exc))
        self._request()
        merged = self.sampling.merge(answers)
        if merged is None:
            return
        # i.i.d. draws in a random order, cut into batches (the last may be short after a shard was lost)
        order = self.sampling.rng.permutation(len(merged["index"]))
        cuts = range(0, len(order), self.batch_size)
        self._ready = [{k: v[order[c:c + self.batch_size]] for k, v in merged.items()} for c in reversed(cuts)]

    def update_priorities(self, index: np.ndarray, priority: np.ndarray) -> int:
        """Queue new priorities for the items' shards; they are sent with the next sample request (a
        shard that has since overwritten an item skips it and counts it)."""
        index = np.asarray(index).reshape(-1)
        self._priorities.append((index, np.asarray(priority).reshape(-1)))
        return len(index)

    def _flush_priorities(self) -> None:
        if not self._priorities:
            return
        index = np.concatenate([i for i, _ in self._priorities])
        priority = np.concatenate([p for _, p in self._priorities])
        self._priorities = []
        for msg in self.sampling.route(index, priority):
            self.shards.call(msg.shard_id, "update_priority", msg)

    # ---- inserts that come through the learner (sources without a shard handle)
    def add(self, batch: Batch) -> None:
        if not batch:
            return
        n = len(next(iter(batch.values())))
        self.shards.call(self._insert_k, "insert", InsertTransitions(-1, 0, -1, batch, n))
        self._insert_k = (self._insert_k + 1) % self.num_shards

    def note_inserted(self, rows: int) -> None:
        """Rows inserted into the shards by others (node proxies), which the shards may not have reported yet."""
        self.noted += rows

    def inserted_elsewhere(self) -> int:
        return self.noted

    def __len__(self) -> int:
        """Items held: as the shards last reported (heartbeats, answers), plus the inserts noted since
        that the shards had not yet counted, up to the capacity."""
        self.check()
        confirmed = sum(c.get("inserted", 0.0) for c in self._counters) + self._retired_inserted
        in_flight = max(0, int(self.noted - confirmed))
        return min(self.sampling.size() + in_flight, self.capacity)

    def stats(self) -> dict[str, float]:
        self.check()
        total = lambda key: float(sum(c.get(key, 0.0) for c in self._counters))  # noqa: E731
        out = {"replay/size": float(len(self)), "replay/sampled": float(self.sampled),
               "replay/inserted": total("inserted") + self._retired_inserted,  # (restarted shards count from 0)
               "replay/refused_chunks": total("refused_chunks"),
               "replay/early_requests": total("early_requests"), "replay/priority_skipped": total("priority_skipped"),
               "replay/shard_restarts": float(self.restarts), "replay/lost_items": float(self.lost_items),
               "replay/lost_chunks": float(self.lost_chunks),
               "replay/evicted": total("evicted"),
               "replay/insert_waits": total("insert_waits"), "replay/insert_wait_s": total("insert_wait_s")}
        inserted = out["replay/inserted"]
        out["replay/samples_per_insert"] = self.sampled / inserted if inserted else 0.0  # (updates_per_step x batch)
        for k, counters in enumerate(self._counters):
            out[f"replay/shard{k}_size"] = counters.get("size", 0.0)
        return out

    # ---- persistence: one snapshot per shard, beside where one buffer's file would go
    def _paths(self, path: str | Path) -> list[str]:
        folder = Path(path).parent
        return [str(folder / SHARD_FILE.format(k=k)) for k in range(self.num_shards)]

    def save(self, path: str | Path) -> None:
        self._snapshot_paths = self._paths(path)
        handles = [self.shards.call(k, "snapshot_to", p) for k, p in enumerate(self._snapshot_paths)]
        for k, handle in enumerate(handles):
            for attempt in range(2):  # a shard found dead is restarted (from its last snapshot), then asked again
                if not self.shards.ready([handle], self.timeout_s):
                    raise RelayRLError(f"replay shard {k} did not write its snapshot within {self.timeout_s:g} s")
                try:
                    self.shards.get(handle)
                    break
                except ShardLost as exc:
                    if attempt:
                        raise RelayRLError(f"replay shard {k} died twice while writing its snapshot ({exc})") from None
                    self._restart(k, str(exc))
                    handle = self.shards.call(k, "snapshot_to", self._snapshot_paths[k])

    def load(self, path: str | Path) -> None:
        """On a resume: shards start from the snapshots saved beside ``path`` (before ``start``)."""
        paths = self._paths(path)
        self._snapshot_paths = [p if Path(p).is_file() else None for p in paths]

    def stop(self, deadline: float | None = None) -> None:
        """Send Stop to every shard; kill what has not answered by ``deadline`` (time.time())."""
        deadline = time.time() + 5.0 if deadline is None else deadline
        handles = [(k, self.shards.call(k, "stop", Stop("training ended", deadline))) for k in range(self.num_shards)]
        for k, handle in handles:
            self.shards.ready([handle], max(0.0, deadline - time.time()))
            self.shards.kill(k)
        self._requests, self._beats, self._ready = [], {}, []
