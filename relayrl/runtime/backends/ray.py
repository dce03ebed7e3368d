"""Rollout workers on a Ray cluster, through one node proxy per node (the ray extra: ``python -m pip install -c constraints.txt -e '.[ray]'``).

``--ray-address auto|HOST:PORT`` joins a running cluster (``ray start`` on every node, relayrl
installed on each); without it a local Ray is started for the run and stopped after.

The WorkerProxy role: one ``_NodeProxy`` actor is pinned to each node and hosts that node's share
of the workers as local processes (the mp backend, run by the proxy). Weights go into the object
store once per version; each proxy receives the version once (one transfer per node, not per
worker) and writes its node's shared-memory weight board, which its workers read. Samples fan in
the same way: one long-poll call per proxy returns every chunk its workers have finished.

Inside a node, the proxy restarts dead or hung workers (as the mp backend does on one machine).
A proxy that dies (its node lost, or killed) or stops answering is replaced, on the same node if it
is still alive, and given the current weights; the chunks its workers owed are asked for again.
Every answer of a proxy carries its ``Heartbeat`` (restarts, queue depth, inserts).

With a replay service (``replay_shards`` > 0, runtime/service.py) the shards are Ray actors too
(``RayShards``), started before the proxies; each proxy inserts its workers' chunks straight into
shard ``worker_id % N`` and sends the learner the chunks without their transitions (env steps and
episodes, what the learner counts). ``close`` sends ``Stop`` with a deadline to every proxy and shard
and kills what is left after it.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from typing import Any

from relayrl.algos import get_algo
from relayrl.config import config_model
from relayrl.errors import ConfigError, RelayRLError, install_hint
from relayrl.options import RunConfig
from relayrl.runtime.backends import ManagedBackend
from relayrl.runtime.messages import Heartbeat, InsertTransitions, LoadParams, Stop
from relayrl.runtime.service import ReplayService, Shards, ShardLost
from relayrl.runtime.shard import ReplayShard, ShardOptions
from relayrl.runtime.weights import flatten

try:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError:  # pragma: no cover - exercised only without the extra
    ray = None

POLL_S = 0.5  # a proxy's long-poll returns after this long even with nothing to deliver
MAX_INSERTS_IN_FLIGHT = 16  # a proxy's inserts not yet stored by their shard, before it waits for them
PUBLISH_MIN_S = 0.05  # off-policy: at most 20 weight versions a second go to the nodes
STOP_S = 10.0  # what close() gives every role to stop before it is killed


class _NodeProxy:
    """Runs on one node: the mp backend for that node's workers, driven by actor calls."""

    def __init__(self, config_data: dict, worker_ids: list[int], seed: int, max_restarts: int, index: int = 0,
                 shards: list | None = None):
        from relayrl.runtime.backends.mp import MpBackend

        config = config_model(config_data["algo"]).model_validate(config_data)
        self.backend = MpBackend(config, len(worker_ids), worker_ids=worker_ids, max_restarts=max_restarts)
        self.backend.start(seed)
        self.index = index
        self.versions_received = 0
        self.shards = shards or []  # replay shard actors to insert into (none: chunks go to the learner)
        self.inserts: list = []  # insert calls not yet answered
        self.counters = {"chunks": 0, "inserted_chunks": 0, "insert_failures": 0}

    def set_shards(self, shards: list) -> None:
        """New shard handles (after a shard was restarted)."""
        self.shards = shards

    def _insert(self, msgs: list[InsertTransitions]) -> list[InsertTransitions]:
        """Chunks into their shards; what the learner gets instead: the chunks without transitions."""
        out = []
        for msg in msgs:
            if msg.batch:
                self.inserts.append(self.shards[msg.worker_id % len(self.shards)].insert.remote(msg))
                msg = dataclasses.replace(msg, batch={}, stored_rows=len(next(iter(msg.batch.values()))))
            out.append(msg)
        done, self.inserts = ray.wait(self.inserts, num_returns=len(self.inserts), timeout=0)
        if len(self.inserts) > MAX_INSERTS_IN_FLIGHT:  # the shards lag: wait (the workers queue, then block)
            more, self.inserts = ray.wait(self.inserts, num_returns=len(self.inserts) - MAX_INSERTS_IN_FLIGHT)
            done += more
        for ref in done:
            try:
                ray.get(ref)
                self.counters["inserted_chunks"] += 1
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError):
                self.counters["insert_failures"] += 1  # its shard died: the learner counts the chunk lost
        return out

    def publish(self, version: int, arrays: dict, kinds: dict, env_steps: int) -> None:
        self.backend.publish_flat(arrays, kinds, version, env_steps)
        self.versions_received += 1

    def request(self, version: int) -> None:
        self.backend.request(version)

    def receive(self) -> tuple[list[InsertTransitions], Heartbeat, list[str]]:
        """Finished chunks (waiting up to POLL_S for the first), this proxy's heartbeat, its failures."""
        msgs: list[InsertTransitions] = []
        if not self.backend.started:  # the first publish (which starts the workers) is still running
            time.sleep(POLL_S)
        else:
            msgs = self.backend.receive(timeout=POLL_S)
            self.counters["chunks"] += len(msgs)
            if self.shards:
                msgs = self._insert(msgs)
        started = self.backend.started
        beat = Heartbeat("proxy", self.index, time.time(), {
            "restarts": float(self.backend.restarts if started else 0),
            "queue_depth": float(self.backend.queue_depth() if started else 0),
            **{k: float(v) for k, v in self.counters.items()}})
        return msgs, beat, list(self.backend.failures)

    def info(self) -> dict[str, Any]:
        return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "worker_pids": self.backend.pids(), "versions_received": self.versions_received}

    def stop(self, msg: Stop) -> None:
        """Stop the workers by ``msg.deadline`` and let the last inserts land."""
        self.backend.close()
        if self.inserts:
            ray.wait(self.inserts, num_returns=len(self.inserts), timeout=max(0.0, msg.deadline - time.time()))

    def close(self) -> None:
        self.backend.close()


class RayShards(Shards):
    """Replay shards as Ray actors, spread over the cluster's nodes (runtime/service.py)."""

    def __init__(self, options: ShardOptions, num_shards: int):
        self.options, self.num_shards = options, num_shards
        self._cls = ray.remote(num_cpus=0, max_restarts=0)(ReplayShard)
        self.actors: list[Any] = [None] * num_shards

    def start(self, k: int, snapshot_path: str | None) -> None:
        nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
        strategy = NodeAffinitySchedulingStrategy(nodes[k % len(nodes)], soft=True)
        self.actors[k] = self._cls.options(scheduling_strategy=strategy).remote(k, self.options, snapshot_path)

    def call(self, k: int, method: str, *args: Any) -> Any:
        return getattr(self.actors[k], method).remote(*args)

    def ready(self, handles: list[Any], timeout: float) -> list[Any]:
        first, rest = ray.wait(handles, num_returns=1, timeout=timeout)
        if first and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            first += more
        return first

    def get(self, handle: Any) -> Any:
        try:
            return ray.get(handle)
        except ray.exceptions.RayActorError as exc:
            raise ShardLost(str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__) from None
        except ray.exceptions.RayTaskError as exc:
            raise RelayRLError(f"a replay shard failed: {str(exc).strip().splitlines()[-1]}") from None

    def kill(self, k: int) -> None:
        try:
            ray.kill(self.actors[k])
        except Exception:
            pass

    def handle_of(self, k: int) -> Any:
        return self.actors[k]


def start_ray(address: str | None, num_cpus: int, needs: str) -> bool:
    """Ray for this run: the cluster at ``address``, or a new local one of ``num_cpus`` that the run owns (True); the
    Ray already started in this process, if any (False). ``needs``: what asks for it, for the message without Ray."""
    if ray is None:
        raise ConfigError(f"{needs} needs Ray: install relayrl's ray extra, {install_hint('ray')}")
    if ray.is_initialized():
        return False
    # ray.init replaces the SIGTERM handler with sys.exit; the run's own (relayrl train: stop as on Ctrl-C, with a
    # checkpoint and the summary) is put back
    on_sigterm = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    try:
        if address:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
            return False
        # address="local": a new Ray for this run, even when another one runs on this machine
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
        return True
    except ConnectionError as exc:
        raise ConfigError(f"cannot reach the Ray cluster at {address!r} ({exc}); start it with `ray start --head` "
                          "or drop --ray-address to run a local Ray") from None
    finally:
        if on_sigterm is not None:
            signal.signal(signal.SIGTERM, on_sigterm)


class RayBackend(ManagedBackend):
    serves_replay = True  # replay shards as Ray actors
    def __init__(self, config: RunConfig, num_workers: int, *, address: str | None = None,
                 max_restarts: int = 10):
        self.config, self.num_workers, self.max_restarts = config, num_workers, max_restarts
        self.worker_timeout = config.worker_timeout
        self._owns_ray = start_ray(address, max(os.cpu_count() or 1, num_workers), "backend 'ray'")
        self._proxy_cls = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=2)(_NodeProxy)
        self._on_request = get_algo(config.algo).collect_on_request
        self._proxies: list[Any] = []
        self._nodes: list[str] = []  # node id of each proxy
        self._shares: list[list[int]] = []  # worker ids of each proxy
        self._polls: dict[Any, tuple[int, float]] = {}  # in-flight receive -> (proxy index, submit time)
        self._weights: tuple[Any, dict, int, int] | None = None  # (object ref, kinds, version, env_steps)
        self._pending: int | None = None  # on-policy: the version requested
        self._deferred: tuple[LoadParams, int] | None = None  # a version not yet sent (publish's rate limit)
        self._published_at = 0.0
        self._seed = 0
        self._proxy_restarts = 0
        self._worker_restarts: list[int] = []  # as the current proxy of each node last reported
        self._retired_restarts = 0  # worker restarts reported by proxies since replaced
        self._retired_insert_failures = 0
        self._depths: list[int] = []
        self.insert_failures: list[int] = []  # chunks each proxy could not insert (their shard had died)
        self.failures: list[str] = []
        self.service: ReplayService | None = None  # the replay shards, when the learner asked for them

    # ---- counters the pool reads
    @property
    def restarts(self) -> int:
        """Proxy replacements plus worker restarts, never decreasing: a replacement proxy counts its
        own restarts from 0, so what its predecessor reported is kept."""
        return self._proxy_restarts + self._retired_restarts + sum(self._worker_restarts)

    def queue_depth(self) -> int:
        return sum(self._depths)

    def replay_service(self, options: ShardOptions, num_shards: int, **service_options: Any) -> ReplayService:
        """Replay shards as Ray actors, which the proxies insert into (started by ``start``)."""
        self.service = ReplayService(RayShards(options, num_shards), **service_options)
        self.service.on_restart = self._new_shard
        return self.service

    def _new_shard(self, k: int) -> None:
        handles = self._shard_handles()
        for proxy in self._proxies:
            proxy.set_shards.remote(handles)

    def _shard_handles(self) -> list | None:
        if self.service is None:
            return None
        return [self.service.shards.handle_of(k) for k in range(self.service.num_shards)]

    def start(self, seed: int) -> None:
        self._seed = seed
        if self.service is not None:  # the shards first, then (at the first publish) the workers
            self.service.start()

    def _spawn_proxies(self) -> None:
        alive = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        nodes = alive[:self.num_workers]
        self._nodes = nodes
        self._shares = [list(range(k, self.num_workers, len(nodes))) for k in range(len(nodes))]
        self._proxies = [self._spawn(k) for k in range(len(nodes))]
        self._worker_restarts = [0] * len(nodes)
        self._depths = [0] * len(nodes)
        self.insert_failures = [0] * len(nodes)

    def _spawn(self, k: int, restart: int = 0) -> Any:
        # first placement: exactly that node; a replacement may go elsewhere if the node is gone
        strategy = NodeAffinitySchedulingStrategy(self._nodes[k], soft=restart > 0)
        return self._proxy_cls.options(scheduling_strategy=strategy).remote(
            self.config.model_dump(mode="json"), self._shares[k], self._seed + 7919 * restart, self.max_restarts, k,
            self._shard_handles())

    def _poll(self, k: int) -> None:
        self._polls[self._proxies[k].receive.remote()] = (k, time.monotonic())

    def publish(self, params: LoadParams, env_steps: int) -> None:
        """Weights to every node. Off-policy learners publish after every update (``update_model_interval``),
        hundreds of times a second: a version is sent at most every PUBLISH_MIN_S, the newest one pending
        when the interval has passed (at the next publish or receive), which bounds what broadcasting costs
        the learner (a put and a call per node took a third of its time at one version per update)."""
        if not self._on_request and self._proxies and time.monotonic() - self._published_at < PUBLISH_MIN_S:
            self._deferred = (params.snapshot(), env_steps)  # (sent later: the learner's updates change the tensors)
            return
        self._deferred = None
        self._published_at = time.monotonic()
        arrays, kinds = flatten(params.weights)
        ref = ray.put(arrays)  # once per version, whatever the number of nodes and workers
        self._weights = (ref, kinds, params.version, env_steps)
        first = not self._proxies
        if first:
            self._spawn_proxies()
        for proxy in self._proxies:
            proxy.publish.remote(params.version, ref, kinds, env_steps)
        if first:
            for k in range(len(self._proxies)):
                self._poll(k)

    def request(self, version: int) -> None:
        self._pending = version
        for proxy in self._proxies:
            proxy.request.remote(version)

    def receive(self, timeout: float = 0.0) -> list[InsertTransitions]:
        deadline = time.monotonic() + timeout
        while True:
            out = self._receive_ready(max(0.0, min(1.0, deadline - time.monotonic())))
            if out or time.monotonic() >= deadline:
                return out

    def _receive_ready(self, timeout: float) -> list[InsertTransitions]:
        if self._deferred is not None and time.monotonic() - self._published_at >= PUBLISH_MIN_S:
            self.publish(*self._deferred)
        self._replace_unresponsive()
        ready, _ = ray.wait(list(self._polls), num_returns=1, timeout=timeout)
        if ready and len(self._polls) > 1:
            more, _ = ray.wait([r for r in self._polls if r not in ready], num_returns=len(self._polls) - 1,
                               timeout=0)
            ready = ready + more
        out: list[InsertTransitions] = []
        for ref in ready:
            k, _ = self._polls.pop(ref)
            try:
                msgs, beat, failures = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
                lines = str(exc).strip().splitlines()
                reason = lines[-1] if lines else type(exc).__name__
                if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(exc.cause, RelayRLError) \
                        and exc.cause.exit_code == 2:  # a mistake in the user's env (envs/checks.py): no restart fixes it
                    raise exc.cause from None
                if isinstance(exc, ray.exceptions.RayTaskError) and "RelayRLError" in str(exc):
                    raise RelayRLError(f"node {self._nodes[k][:8]}: {reason}") from None
                self._restart(k, reason)
                continue
            self._worker_restarts[k], self._depths[k] = int(beat.counters["restarts"]), int(beat.counters["queue_depth"])
            self.insert_failures[k] = int(beat.counters["insert_failures"])
            if self.service is not None:
                self.service.lost_chunks = self._retired_insert_failures + sum(self.insert_failures)
            self.failures[len(self.failures):] = [f for f in failures if f not in self.failures]
            out.extend(msgs)
            self._poll(k)
        return out

    def _replace_unresponsive(self) -> None:
        # A healthy proxy can be silent for a while: restarting one of its hung workers takes the
        # worker_timeout plus the restart itself, and a new proxy first starts Python and its workers.
        # A limit of just worker_timeout replaced busy proxies over and over on a loaded machine.
        limit = max(2 * self.worker_timeout, self.worker_timeout + 30.0) + POLL_S
        now = time.monotonic()
        for ref, (k, submitted) in list(self._polls.items()):
            if now - submitted > limit:
                del self._polls[ref]
                self._restart(k, f"node proxy did not answer for {limit:g} s")

    def _restart(self, k: int, reason: str) -> None:
        self.failures.append(f"node proxy {k} ({self._nodes[k][:8]}): {reason}")
        if self.restarts >= self.max_restarts:
            raise RelayRLError(f"rollout workers failed {self.restarts + 1} times (last: node proxy {k}, "
                               f"{reason}); fix the env or raise max_restarts")
        try:
            ray.kill(self._proxies[k])
        except Exception:
            pass
        time.sleep(min(2.0, 0.05 * 2 ** min(self._proxy_restarts, 6)))
        self._proxy_restarts += 1
        self._retired_restarts += self._worker_restarts[k]
        self._retired_insert_failures += self.insert_failures[k]
        self.insert_failures[k] = 0
        self._worker_restarts[k], self._depths[k] = 0, 0
        proxy = self._spawn(k, restart=self._proxy_restarts)
        self._proxies[k] = proxy
        ref, kinds, version, env_steps = self._weights
        proxy.publish.remote(version, ref, kinds, env_steps)
        if self._on_request and self._pending is not None:
            proxy.request.remote(self._pending)  # the chunks its workers owed
        self._poll(k)

    # ---- for tests and tools
    def proxy(self, k: int) -> Any:
        return self._proxies[k]

    def info(self) -> list[dict[str, Any]]:
        return ray.get([p.info.remote() for p in self._proxies])

    def close(self) -> None:
        """Stop: every proxy (its workers, its last inserts), then every shard, by one deadline; kill the rest."""
        deadline = time.time() + STOP_S
        stopping = [p.stop.remote(Stop("training ended", deadline)) for p in self._proxies]
        try:
            ray.wait(stopping, num_returns=len(stopping), timeout=STOP_S)
        except Exception:
            pass
        for proxy in self._proxies:
            try:
                ray.kill(proxy)
            except Exception:
                pass
        self._proxies, self._polls = [], {}
        if self.service is not None:
            self.service.stop(deadline)
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
