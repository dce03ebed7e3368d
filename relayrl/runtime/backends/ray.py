"""Rollout workers on a Ray cluster, through one node proxy per node (``pip install relayrl[ray]``).

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
"""

from __future__ import annotations

import os
import time
from typing import Any

from relayrl.algos import get_algo
from relayrl.config import RunConfig, config_model
from relayrl.errors import ConfigError, RelayRLError
from relayrl.runtime.messages import InsertTransitions, LoadParams
from relayrl.runtime.weights import flatten

try:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError:  # pragma: no cover - exercised only without the extra
    ray = None

POLL_S = 0.5  # a proxy's long-poll returns after this long even with nothing to deliver


class _NodeProxy:
    """Runs on one node: the mp backend for that node's workers, driven by actor calls."""

    def __init__(self, config_data: dict, worker_ids: list[int], seed: int, max_restarts: int):
        from relayrl.runtime.backends.mp import MpBackend

        config = config_model(config_data["algo"]).model_validate(config_data)
        self.backend = MpBackend(config, len(worker_ids), worker_ids=worker_ids, max_restarts=max_restarts)
        self.backend.start(seed)
        self.versions_received = 0

    def publish(self, version: int, arrays: dict, kinds: dict, env_steps: int) -> None:
        self.backend.publish_flat(arrays, kinds, version, env_steps)
        self.versions_received += 1

    def request(self, version: int) -> None:
        self.backend.request(version)

    def receive(self) -> tuple[list[InsertTransitions], int, list[str], int]:
        """Finished chunks (waiting up to POLL_S for the first), restarts, failures, queue depth."""
        if not self.backend.started:  # the first publish (which starts the workers) is still running
            time.sleep(POLL_S)
            return [], 0, [], 0
        msgs = self.backend.receive(timeout=POLL_S)
        return msgs, self.backend.restarts, list(self.backend.failures), self.backend.queue_depth()

    def info(self) -> dict[str, Any]:
        return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "worker_pids": self.backend.pids(), "versions_received": self.versions_received}

    def close(self) -> None:
        self.backend.close()


class RayBackend:
    def __init__(self, config: RunConfig, num_workers: int, *, address: str | None = None,
                 max_restarts: int = 10):
        if ray is None:
            raise ConfigError("backend 'ray' needs Ray: pip install 'relayrl[ray]'")
        self.config, self.num_workers, self.max_restarts = config, num_workers, max_restarts
        self.worker_timeout = config.worker_timeout
        self._owns_ray = False
        if not ray.is_initialized():
            try:
                if address:
                    ray.init(address=address, include_dashboard=False, log_to_driver=False)
                else:
                    ray.init(num_cpus=max(os.cpu_count() or 1, num_workers), include_dashboard=False,
                             log_to_driver=False)
                    self._owns_ray = True
            except ConnectionError as exc:
                raise ConfigError(f"cannot reach the Ray cluster at {address!r} ({exc}); start it with "
                                  "`ray start --head` or drop --ray-address to run a local Ray") from None
        self._proxy_cls = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=2)(_NodeProxy)
        self._on_request = get_algo(config.algo).collect_on_request
        self._proxies: list[Any] = []
        self._nodes: list[str] = []  # node id of each proxy
        self._shares: list[list[int]] = []  # worker ids of each proxy
        self._polls: dict[Any, tuple[int, float]] = {}  # in-flight receive -> (proxy index, submit time)
        self._weights: tuple[Any, dict, int, int] | None = None  # (object ref, kinds, version, env_steps)
        self._pending: int | None = None  # on-policy: the version requested
        self._seed = 0
        self._proxy_restarts = 0
        self._worker_restarts: list[int] = []  # as the current proxy of each node last reported
        self._retired_restarts = 0  # worker restarts reported by proxies since replaced
        self._depths: list[int] = []
        self.failures: list[str] = []

    # ---- counters the pool reads
    @property
    def restarts(self) -> int:
        """Proxy replacements plus worker restarts, never decreasing: a replacement proxy counts its
        own restarts from 0, so what its predecessor reported is kept."""
        return self._proxy_restarts + self._retired_restarts + sum(self._worker_restarts)

    def queue_depth(self) -> int:
        return sum(self._depths)

    def start(self, seed: int) -> None:
        self._seed = seed

    def _spawn_proxies(self) -> None:
        alive = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        nodes = alive[:self.num_workers]
        self._nodes = nodes
        self._shares = [list(range(k, self.num_workers, len(nodes))) for k in range(len(nodes))]
        self._proxies = [self._spawn(k) for k in range(len(nodes))]
        self._worker_restarts = [0] * len(nodes)
        self._depths = [0] * len(nodes)

    def _spawn(self, k: int, restart: int = 0) -> Any:
        # first placement: exactly that node; a replacement may go elsewhere if the node is gone
        strategy = NodeAffinitySchedulingStrategy(self._nodes[k], soft=restart > 0)
        return self._proxy_cls.options(scheduling_strategy=strategy).remote(
            self.config.model_dump(mode="json"), self._shares[k], self._seed + 7919 * restart, self.max_restarts)

    def _poll(self, k: int) -> None:
        self._polls[self._proxies[k].receive.remote()] = (k, time.monotonic())

    def publish(self, params: LoadParams, env_steps: int) -> None:
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
                msgs, restarts, failures, depth = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
                lines = str(exc).strip().splitlines()
                reason = lines[-1] if lines else type(exc).__name__
                if isinstance(exc, ray.exceptions.RayTaskError) and "RelayRLError" in str(exc):
                    raise RelayRLError(f"node {self._nodes[k][:8]}: {reason}") from None
                self._restart(k, reason)
                continue
            self._worker_restarts[k], self._depths[k] = restarts, depth
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
        closing = [p.close.remote() for p in self._proxies]
        try:
            ray.wait(closing, num_returns=len(closing), timeout=10)
        except Exception:
            pass
        for proxy in self._proxies:
            try:
                ray.kill(proxy)
            except Exception:
                pass
        self._proxies, self._polls = [], {}
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
