"""The replay service against the in-learner replay: inserts/s, samples/s and the learner's CPU share.

SAC-like transitions (obs 17, action 6, reward, next_obs 17, terminated) in chunks of 256, as
rollout workers send them. Systems, all alive at once and measured in turn within every round
(this machine's speed drifts; the order rotates each round):

- ``learner``: today's path without shards: 2 producer processes put chunks on one bounded queue,
  the learner takes them and adds them to its ``ReplayBuffer``;
- ``mp x1`` / ``mp x2``: 1 or 2 shard processes (backends/mp_shards.py); 2 producer processes put
  chunks straight on their shard's channel (``worker_id % N``), as mp workers do;
- ``ray x1`` / ``ray x2``: 1 or 2 shard actors (``RayShards``); 2 producer actors insert straight
  into their shard with at most 16 inserts in flight, as node proxies do (``ray.init(num_cpus=2)``).

Phases, each ``--seconds`` long, uniform and prioritized buffers apart:
- insert: transitions stored per second, with the producers running flat out;
- sample: the learner's ``sample(256)`` per second (prioritized: plus ``update_priorities``), in
  transitions/s, with nothing inserting.
During each, the learner process's CPU time (``resource.getrusage``: every thread of it) over wall
time is its CPU share. Printed: medians over rounds.

    python benchmarks/replay_service.py --rounds 3 --seconds 1.0
"""

from __future__ import annotations

import argparse
import os
import queue
import resource
import statistics
import time
from typing import Any, Callable

import numpy as np

OBS, ACT, CHUNK, BATCH, CAPACITY, PRODUCERS = 17, 6, 256, 256, 100_000, 2
MAX_IN_FLIGHT = 16
WARM_UP_S = 0.5


def chunk(n: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"obs": rng.random((n, OBS), dtype=np.float32), "action": rng.random((n, ACT), dtype=np.float32),
            "reward": rng.random(n, dtype=np.float32), "next_obs": rng.random((n, OBS), dtype=np.float32),
            "terminated": rng.random(n) < 0.01}


def message(worker: int, seq: int, batch: dict) -> Any:
    from relayrl.runtime.messages import InsertTransitions

    return InsertTransitions(worker, seq, 0, batch, CHUNK)


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def proc_cpu_s(pids: list[int]) -> float:
    """CPU seconds of other processes of this machine (the shards), from /proc."""
    total = 0
    for pid in pids:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def measure(fn: Callable[[float], float], seconds: float, shard_pids: list[int]) -> dict[str, float]:
    """Of ``fn(deadline) -> items``: items per second, the learner's CPU share, and the CPU time per
    item of the learner and of the shard processes."""
    wall, cpu, shard_cpu = time.perf_counter(), cpu_s(), proc_cpu_s(shard_pids)
    items = fn(time.perf_counter() + seconds)
    wall, cpu, shard_cpu = time.perf_counter() - wall, cpu_s() - cpu, proc_cpu_s(shard_pids) - shard_cpu
    items = max(items, 1.0)
    return {"rate": items / wall, "share": cpu / wall, "learner_us": cpu / items * 1e6,
            "shard_us": shard_cpu / items * 1e6}


# ---- producers (processes of their own, or Ray actors)
def _queue_producer(out: Any, worker: int, stop: Any) -> None:
    batch, seq = chunk(CHUNK, worker), 0
    while not stop.is_set():
        try:
            out.put(message(worker, seq, batch), timeout=0.1)
            seq += 1
        except queue.Full:
            pass


def _channel_producer(channel: Any, worker: int, stop: Any) -> None:
    batch, seq = chunk(CHUNK, worker), 0
    while not stop.is_set():
        if channel.put(message(worker, seq, batch), timeout=0.1):
            seq += 1



def _sample_until(replay: Any, prioritized: bool, deadline: float) -> float:
    """Items sampled (with a priority update per batch when prioritized) until ``deadline``."""
    prio, n = np.random.default_rng(0).random(BATCH) + 0.1, 0
    while time.perf_counter() < deadline:
        batch = replay.sample(BATCH)
        if prioritized:
            replay.update_priorities(batch["index"], prio)
        n += BATCH
    return n


class RayProducer:
    """A node proxy's inserts: straight into its shard, at most MAX_IN_FLIGHT unanswered."""

    def start(self, shards: list, worker: int) -> None:
        import threading

        self.running = True
        self.thread = threading.Thread(target=self._loop, args=(shards[worker % len(shards)], worker), daemon=True)
        self.thread.start()

    def _loop(self, shard: Any, worker: int) -> None:
        import ray

        batch, seq, in_flight = chunk(CHUNK, worker), 0, []
        while self.running:
            in_flight.append(shard.insert.remote(message(worker, seq, batch)))
            seq += 1
            if len(in_flight) > MAX_IN_FLIGHT:
                _, in_flight = ray.wait(in_flight, num_returns=len(in_flight) - MAX_IN_FLIGHT)
        ray.get(in_flight)

    def stop(self) -> None:
        self.running = False
        self.thread.join()


# ---- systems
class Learner:
    """The in-learner replay: chunks come to the learner on a queue; it stores them."""

    def __init__(self, ctx: Any, prioritized: bool):
        from relayrl.data.replay import ReplayBuffer

        self.ctx, self.prioritized = ctx, prioritized
        self.buffer = ReplayBuffer(CAPACITY, sampler="prioritized" if prioritized else "uniform", seed=0)
        self.buffer.add(chunk(CAPACITY, 99))

    def begin_inserts(self) -> None:
        self.queue, self.stop = self.ctx.Queue(maxsize=4 * PRODUCERS), self.ctx.Event()
        self.procs = [self.ctx.Process(target=_queue_producer, args=(self.queue, w, self.stop), daemon=True)
                      for w in range(PRODUCERS)]
        for p in self.procs:
            p.start()

    def insert(self, deadline: float) -> float:
        from relayrl.data.dtypes import store_transitions

        stored = 0
        while time.perf_counter() < deadline:
            try:
                msg = self.queue.get(timeout=0.1)
            except queue.Empty:
                continue
            self.buffer.add(store_transitions(dict(msg.batch)))
            stored += msg.env_steps
        return stored

    def end_inserts(self) -> None:
        self.stop.set()
        _drain_and_join(self.queue, self.procs)

    def sample(self, deadline: float) -> float:
        return _sample_until(self.buffer, self.prioritized, deadline)

    def pids(self) -> list[int]:
        return []

    def close(self) -> None:
        pass


def _drain_and_join(q: Any, procs: list) -> None:
    for p in procs:
        while p.is_alive():
            try:
                q.get(timeout=0.05)
            except queue.Empty:
                pass
        p.join()


class Sharded:
    """A ReplayService over mp shard processes or Ray shard actors."""

    def __init__(self, kind: str, num_shards: int, prioritized: bool, ctx: Any):
        from relayrl.runtime.service import ReplayService
        from relayrl.runtime.shard import ShardOptions

        options = ShardOptions(capacity=CAPACITY // num_shards, sampler="prioritized" if prioritized else "uniform")
        if kind == "mp":
            from relayrl.runtime.backends.mp_shards import MpShards

            self.shards: Any = MpShards(options, num_shards, ctx)
        else:
            import ray

            from relayrl.runtime.backends.ray import RayShards

            self.shards = RayShards(options, num_shards)
            self.producers = [ray.remote(num_cpus=0)(RayProducer).remote() for _ in range(PRODUCERS)]
        self.kind, self.ctx, self.prioritized = kind, ctx, prioritized
        self.service = ReplayService(self.shards, batch_size=BATCH, prioritized=prioritized, timeout_s=60.0)
        self.service.start()
        for k in range(num_shards):
            self.service.add(chunk(CAPACITY // num_shards, 99 + k))
        while len(self.service) < CAPACITY - num_shards:  # the heartbeats report the prefill
            self.service.check()
            time.sleep(0.05)
        if kind == "mp":
            self._pids = list(self.shards.pids().values())
        else:
            import ray

            self._pids = ray.get([self.shards.handle_of(k).__ray_call__.remote(lambda _: os.getpid())
                                  for k in range(num_shards)])

    def pids(self) -> list[int]:
        return self._pids

    def inserted(self) -> float:
        handles = [self.shards.call(k, "heartbeat") for k in range(self.shards.num_shards)]
        total = 0.0
        for handle in handles:
            assert self.shards.ready([handle], 60.0)
            total += self.shards.get(handle).counters["inserted"]
        return total

    def begin_inserts(self) -> None:
        if self.kind == "mp":
            self.stop = self.ctx.Event()
            self.procs = [self.ctx.Process(target=_channel_producer, args=(self.shards.channel_of(w), w, self.stop),
                                           daemon=True) for w in range(PRODUCERS)]
            for p in self.procs:
                p.start()
        else:
            import ray

            handles = [self.shards.handle_of(k) for k in range(self.shards.num_shards)]
            ray.get([p.start.remote(handles, w) for w, p in enumerate(self.producers)])

    def insert(self, deadline: float) -> float:
        """The learner does nothing: it only reads the shards' counters at both ends of the window."""
        before = self.inserted()
        time.sleep(max(0.0, deadline - time.perf_counter()))
        return self.inserted() - before

    def end_inserts(self) -> None:
        if self.kind == "mp":
            self.stop.set()
            for p in self.procs:
                p.join()
        else:
            import ray

            ray.get([p.stop.remote() for p in self.producers])

    def sample(self, deadline: float) -> float:
        return _sample_until(self.service, self.prioritized, deadline)

    def close(self) -> None:
        self.service.stop()
        if self.kind == "mp":
            self.shards.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()

    from relayrl.runtime.backends.mp import process_context

    ctx = process_context(shards=True)
    if not args.no_ray:
        import ray

        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never a running cluster
    systems: dict[tuple[str, bool], Any] = {}
    for prioritized in (False, True):
        systems[("learner", prioritized)] = Learner(ctx, prioritized)
        for kind in ("mp",) + (() if args.no_ray else ("ray",)):
            for n in (1, 2):
                systems[(f"{kind} x{n}", prioritized)] = Sharded(kind, n, prioritized, ctx)
    names = list(dict.fromkeys(name for name, _ in systems))
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                for prioritized in (False, True):
                    system, sampler = systems[(name, prioritized)], "prioritized" if prioritized else "uniform"
                    system.begin_inserts()
                    time.sleep(WARM_UP_S)  # producers started and running flat out
                    inserts = measure(system.insert, args.seconds, system.pids())
                    system.end_inserts()
                    samples = measure(system.sample, args.seconds, system.pids())
                    results.setdefault((name, f"insert {sampler}"), []).append(inserts)
                    results.setdefault((name, f"sample {sampler}"), []).append(samples)
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    finally:
        for system in systems.values():
            system.close()
    load = os.getloadavg()
    print(f"\nmedians over {args.rounds} rounds of {args.seconds:g} s; chunks of {CHUNK}, batches of {BATCH}; "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs")
    for phase in dict.fromkeys(phase for _, phase in results):
        print(f"\n{phase}: {'k items/s':>10} {'learner CPU':>12} {'learner us/item':>16} {'shards us/item':>15}")
        for name in names:
            runs = results[(name, phase)]
            med = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
            shard = f"{med['shard_us']:>15.2f}" if name != "learner" else f"{'-':>15}"
            print(f"{name:>{len(phase) + 1}} {med['rate'] / 1000:>10.1f} {med['share']:>12.0%} "
                  f"{med['learner_us']:>16.2f} {shard}")


if __name__ == "__main__":
    main()
