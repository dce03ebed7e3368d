"""Rollout workers as Ray actors (``pip install relayrl[ray]``).

``--ray-address auto|HOST:PORT`` joins a running cluster (``ray start`` on every node, relayrl
installed on each); without it a local Ray is started for the run and stopped after. Workers are
spread over the cluster's nodes. Weights go into Ray's object store once per version
(``ray.put``); Ray moves an object to a node once and every worker there reads the same copy,
which is the node-proxy fan-out. Chunks come back as actor call results. Each worker has one call
in flight at a time, so a worker is never more than one chunk ahead of the weights it was sent.

A dead actor (killed, node lost, or its env raising) or a hung one (a chunk in flight for more than
``worker_timeout`` seconds) is replaced with backoff, up to ``max_restarts`` in total; its
outstanding chunk is requested again from the replacement.
"""

from __future__ import annotations

import time
from typing import Any

from relayrl.algos import get_algo
from relayrl.config import RunConfig, config_model
from relayrl.errors import ConfigError, RelayRLError
from relayrl.runtime.backends import WORKER_SEED_STRIDE
from relayrl.runtime.messages import InsertTransitions, LoadParams
from relayrl.runtime.weights import flatten, unflatten

try:
    import ray
except ImportError:  # pragma: no cover - exercised only without the extra
    ray = None


class _ActorShell:
    """What runs inside the actor: a RolloutWorker built from plain config data."""

    def __init__(self, worker_id: int, config_data: dict, seed: int):
        import torch

        from relayrl.runtime.worker import RolloutWorker

        torch.set_num_threads(1)
        config = config_model(config_data["algo"]).model_validate(config_data)
        self.worker = RolloutWorker(worker_id, config, seed)

    def load(self, version: int, arrays: dict, kinds: dict, env_steps: int) -> None:
        self.worker.load(LoadParams(version, unflatten(arrays, kinds)), env_steps)

    def collect(self) -> InsertTransitions:
        return self.worker.collect()

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def pid(self) -> int:
        import os

        return os.getpid()


class RayBackend:
    def __init__(self, config: RunConfig, num_workers: int, *, address: str | None = None,
                 max_restarts: int = 10, num_cpus_per_worker: float = 1.0):
        if ray is None:
            raise ConfigError("backend 'ray' needs Ray: pip install 'relayrl[ray]'")
        self.config, self.num_workers, self.max_restarts = config, num_workers, max_restarts
        self._owns_ray = False
        if not ray.is_initialized():
            try:
                if address:
                    ray.init(address=address, include_dashboard=False, log_to_driver=False)
                else:
                    import os

                    ray.init(num_cpus=max(os.cpu_count() or 1, num_workers), include_dashboard=False,
                             log_to_driver=False)
                    self._owns_ray = True
            except ConnectionError as exc:
                raise ConfigError(f"cannot reach the Ray cluster at {address!r} ({exc}); start it with "
                                  "`ray start --head` or drop --ray-address to run a local Ray") from None
        self._actor_cls = ray.remote(num_cpus=num_cpus_per_worker, max_restarts=0)(_ActorShell)
        self._actors: list[Any] = []
        self._inflight: dict[Any, tuple[int, float]] = {}  # object ref -> (worker id, submit time)
        self.worker_timeout = config.worker_timeout
        self._weights_ref: Any = None
        self._weights: tuple[int, int] | None = None  # (version, env_steps) of _weights_ref
        self._loaded: list[int] = []  # version each actor was last sent
        self._on_request = get_algo(config.algo).collect_on_request  # else workers collect continuously
        self._seed = 0
        self.restarts = 0
        self.failures: list[str] = []

    def start(self, seed: int) -> None:
        self._seed = seed

    def _spawn(self, worker_id: int, restart: int = 0) -> Any:
        seed = self._seed + WORKER_SEED_STRIDE * worker_id + 7919 * restart
        return self._actor_cls.options(scheduling_strategy="SPREAD").remote(
            worker_id, self.config.model_dump(mode="json"), seed)

    def publish(self, params: LoadParams, env_steps: int) -> None:
        arrays, kinds = flatten(params.weights)
        self._kinds = kinds
        self._weights_ref = ray.put(arrays)  # once per version, whatever the number of workers
        self._weights = (params.version, env_steps)
        if not self._actors:
            self._actors = [self._spawn(k) for k in range(self.num_workers)]
            self._loaded = [-1] * self.num_workers
            if not self._on_request:
                for k in range(self.num_workers):
                    self._submit(k)

    def _submit(self, worker_id: int) -> None:
        actor = self._actors[worker_id]
        version, env_steps = self._weights
        if self._loaded[worker_id] != version:  # actor calls run in order: load, then collect
            actor.load.remote(version, self._weights_ref, self._kinds, env_steps)
            self._loaded[worker_id] = version
        self._inflight[actor.collect.remote()] = (worker_id, time.monotonic())

    def request(self, version: int) -> None:
        for k in range(self.num_workers):
            self._submit(k)

    def receive(self, timeout: float = 0.0) -> list[InsertTransitions]:
        deadline = time.monotonic() + timeout
        while True:
            out = self._receive_ready(max(0.0, deadline - time.monotonic()))
            if out or time.monotonic() >= deadline or not self._inflight:
                return out

    def _receive_ready(self, timeout: float) -> list[InsertTransitions]:
        if not self._inflight:
            return []
        self._replace_hung()
        refs = list(self._inflight)
        ready, _ = ray.wait(refs, num_returns=1, timeout=min(timeout, 1.0))
        if ready and len(refs) > 1:  # whatever else is done too, without waiting
            more, _ = ray.wait([r for r in refs if r not in ready], num_returns=len(refs) - 1, timeout=0)
            ready = ready + more
        out = []
        for ref in ready:
            worker_id, _ = self._inflight.pop(ref)
            try:
                out.append(ray.get(ref))
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
                lines = str(exc).strip().splitlines()
                self._restart(worker_id, lines[-1] if lines else type(exc).__name__)
                self._submit(worker_id)  # the chunk it owed, from the replacement
                continue
            if not self._on_request:
                self._submit(worker_id)
        return out

    def queue_depth(self) -> int:
        """Chunks finished by workers and not yet taken by the learner."""
        if not self._inflight:
            return 0
        ready, _ = ray.wait(list(self._inflight), num_returns=len(self._inflight), timeout=0)
        return len(ready)

    def _replace_hung(self) -> None:
        now = time.monotonic()
        for ref, (worker_id, submitted) in list(self._inflight.items()):
            if now - submitted > self.worker_timeout:
                del self._inflight[ref]
                self._restart(worker_id, f"no progress for {self.worker_timeout:g} s (a hung env step?); "
                                         "raise worker_timeout if a chunk legitimately takes longer")
                self._submit(worker_id)

    def _restart(self, worker_id: int, reason: str) -> None:
        self.failures.append(f"worker {worker_id}: {reason}")
        if self.restarts >= self.max_restarts:
            raise RelayRLError(f"rollout workers failed {self.restarts + 1} times (last: worker {worker_id}, "
                               f"{reason}); fix the env or raise max_restarts")
        try:
            ray.kill(self._actors[worker_id])
        except Exception:
            pass
        time.sleep(min(2.0, 0.05 * 2 ** min(self.restarts, 6)))
        self.restarts += 1
        self._actors[worker_id] = self._spawn(worker_id, restart=self.restarts)
        self._loaded[worker_id] = -1

    def actor(self, worker_id: int) -> Any:
        return self._actors[worker_id]

    def close(self) -> None:
        for actor in self._actors:
            try:
                ray.kill(actor)
            except Exception:
                pass
        self._actors, self._inflight = [], {}
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
