"""A relay in a background thread for tests and benchmarks: ``with running_relay() as relay: ...``; a remote
worker's loop in one: ``with running_worker(worker): ...``."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from relayrl.net.relay import Relay, RelayOptions


@contextmanager
def running_relay(**options: Any) -> Iterator[Relay]:
    """A relay on 127.0.0.1 (an ephemeral port unless ``bind`` is given); ``relay.address`` is
    HOST:PORT for clients. Stopped and its socket closed on exit."""
    options.setdefault("bind", "127.0.0.1:0")
    options.setdefault("heartbeat_s", 0.1)
    options.setdefault("peer_timeout_s", 2.0)
    relay = Relay(RelayOptions(**options))
    relay.address = relay.endpoint.removeprefix("tcp://")  # type: ignore[attr-defined]
    with _in_thread(lambda stop: relay.serve(stop, None)):
        yield relay


@contextmanager
def running_worker(worker: Any) -> Iterator[Any]:
    """A ``net.remote_worker.RemoteWorker``'s ``run()`` in a thread once its client is connected (an AssertionError if it
    does not connect within 10 s); stopped, joined and closed on exit."""
    assert worker.client.wait_connected(10), "the worker did not reach the relay within 10 s"
    try:
        with _in_thread(lambda stop: worker.run(stop=stop, log=None)):
            yield worker
    finally:
        worker.close(flush_timeout=0)


@contextmanager
def _in_thread(loop: Callable[[threading.Event], Any]) -> Iterator[None]:
    """``loop(stop)`` in a daemon thread until the block ends: then ``stop`` is set and the thread joined."""
    stop = threading.Event()
    thread = threading.Thread(target=loop, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


def deliver(pool: Any, msgs: list) -> tuple[dict, int]:
    """``msgs`` (wire messages) as if the relay had just delivered them to ``pool``'s relay backend, then what
    ``pool.poll()`` makes of them: transitions off-policy, a whole rollout on-policy (``({}, 0)``: none ready)."""
    pool.backend.pending.extend(msgs)
    return pool.poll()
