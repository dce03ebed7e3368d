"""Every worker in this process, stepped in worker order: deterministic, the debugging backend."""

from __future__ import annotations

from relayrl.algos import get_algo
from relayrl.options import RunConfig
from relayrl.runtime.backends import WORKER_SEED_STRIDE, ManagedBackend
from relayrl.runtime.messages import InsertTransitions, LoadParams
from relayrl.runtime.rollout_worker import RolloutWorker
from relayrl.runtime.weights import flatten, unflatten


class InlineBackend(ManagedBackend):
    def __init__(self, config: RunConfig, num_workers: int):
        self.config, self.num_workers = config, num_workers
        self.workers: list[RolloutWorker] = []
        self.restarts = 0
        self._pending: list[int] = []  # on-policy: workers asked for a chunk

    def start(self, seed: int) -> None:
        if not self.workers:
            self.workers = [RolloutWorker(k, self.config, seed + WORKER_SEED_STRIDE * k)
                            for k in range(self.num_workers)]

    def publish(self, params: LoadParams, env_steps: int) -> None:
        arrays, kinds = flatten(params.weights)  # each worker gets its own copy, as over a transport
        for worker in self.workers:
            worker.load(LoadParams(params.version, unflatten(arrays, kinds)), env_steps)

    def request(self, version: int) -> None:
        self._pending = list(range(self.num_workers))

    def receive(self, timeout: float = 0.0) -> list[InsertTransitions]:
        if get_algo(self.config.algo).collect_on_request:
            ids, self._pending = self._pending, []
            return [self.workers[k].collect() for k in ids]
        return [worker.collect() for worker in self.workers]

    def queue_depth(self) -> int:
        return 0

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        self.workers = []
