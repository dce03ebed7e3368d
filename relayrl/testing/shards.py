"""Replay shards in the caller's own process, for tests of the replay service (runtime/service.py): real
``ReplayShard`` objects behind the ``Shards`` calls, answered at once, and a ``kill`` that loses one the way a
dead shard process or actor is lost::

    service = ReplayService(LocalShards(ShardOptions(capacity=100), 2), batch_size=16, prioritized=False)
"""

from __future__ import annotations

from typing import Any

from relayrl.runtime.service import ShardLost, Shards
from relayrl.runtime.shard import ReplayShard, ShardOptions

__all__ = ["LocalShards"]


class _Done:
    """A local call's result (a handle, hashed by identity as Ray's are by id)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class LocalShards(Shards):
    """Shards in this process: every call is answered when it is made; a killed shard's calls raise ShardLost."""

    def __init__(self, options: ShardOptions, num_shards: int):
        self.options, self.num_shards = options, num_shards
        self.shards: list[ReplayShard | None] = [None] * num_shards

    def start(self, k: int, snapshot_path: str | None) -> None:
        self.shards[k] = ReplayShard(k, self.options, snapshot_path)

    def call(self, k: int, method: str, *args: Any) -> Any:
        shard = self.shards[k]
        if shard is None:
            return _Done(ShardLost(f"shard {k} is not running"))
        return _Done(getattr(shard, method)(*args))

    def ready(self, handles: list[Any], timeout: float) -> list[Any]:
        return list(handles)

    def get(self, handle: Any) -> Any:
        if isinstance(handle.value, ShardLost):
            raise handle.value
        return handle.value

    def kill(self, k: int) -> None:
        self.shards[k] = None
