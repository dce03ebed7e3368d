"""The relay and a remote worker as Python objects, for scripts (TMRL's Server and RolloutWorker); the trainer is
``relayrl.train(algo, env, {"net": {"server": "HOST:PORT"}})``. docs/library.md, "A robot in Python", shows the
three scripts.

    from relayrl.remote import Relay, Worker

    Relay(bind="127.0.0.1:5555").serve()                                   # the relay's script: blocks
    Worker("sac", "Pendulum-v1", server="127.0.0.1:5555").run()            # each worker's script: blocks

A thin layer over ``relayrl.net.relay.Relay`` and ``relayrl.net.remote_worker.RemoteWorker``, the code of
``relayrl serve`` and ``relayrl worker``: the same defaults, the same checks and messages. What it adds for
scripts: Ctrl-C (and SIGTERM, in the main thread) ends ``serve()`` and ``run()`` cleanly, and a worker stops with
a ``RelayRLError`` when no relay answers within ``net.connect_timeout_s`` of its start, as the trainer does.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from relayrl.api import EnvLike, run_config
from relayrl.errors import ConfigError, RelayRLError
from relayrl.net import relay as relay_module
from relayrl.net import wire
from relayrl.net.remote_worker import RemoteWorker
from relayrl.options import RunConfig

__all__ = ["Relay", "Worker"]

RELAY_OPTIONS = tuple(f.name for f in dataclasses.fields(relay_module.RelayOptions))


class Relay:
    """The relay (``relayrl serve``): ``Relay(bind, keys, **options).serve()``. ``options`` are the other fields
    of ``relayrl.net.relay.RelayOptions`` (``max_workers``, ``max_queue``, ``peer_timeout_s``, ...); a bind
    reachable from other machines needs ``keys`` (or ``insecure=True``), as on the command line. The socket is
    bound here: ``address`` is the HOST:PORT clients connect to (the port chosen when ``bind`` ends in ``:0``)."""

    def __init__(self, bind: str = "127.0.0.1:5555", keys: str | Path | None = None, **options: Any):
        unknown = sorted(set(options) - set(RELAY_OPTIONS))
        if unknown:
            raise ConfigError(f"Relay({', '.join(unknown)}=...): no such relay option; the options are "
                              f"{', '.join(RELAY_OPTIONS)}")
        self.relay = relay_module.Relay(relay_module.RelayOptions(
            bind=bind, keys=None if keys is None else str(keys), **options))
        self.address = self.relay.endpoint.removeprefix("tcp://")

    def serve(self, stop: threading.Event | None = None, log=sys.stderr) -> None:
        """Relay until ``stop`` is set, Ctrl-C or SIGTERM; then the socket is closed. ``log``: where the
        relay's metrics and notices go (None: nowhere)."""
        stop = stop or threading.Event()
        if log is not None:
            keys = self.relay.options.keys
            print(f"relay listening on {self.address} ({'CURVE keys from ' + keys if keys else 'no encryption'})",
                  file=log, flush=True)
        with _stop_on_sigterm(stop):
            try:
                self.relay.serve(stop, log)
            except KeyboardInterrupt:
                pass

    def stats(self) -> dict[str, float]:
        """The relay's counters (chunks in and out, drops, rejects, ...), as its metrics lines give them."""
        return self.relay.stats()


class Worker:
    """A remote rollout worker (``relayrl worker``): ``Worker(algo, env, config, server=...).run()``.

    ``algo``, ``env`` and ``config`` are ``relayrl.train``'s (use the trainer's, so the policies match: the same
    algorithm, env and policy options); ``server``, ``keys`` and ``seed`` override the config's ``net.server``,
    ``net.keys`` and ``seed``. ``name``: unique per relay (default role-host-pid-random); ``expert``: send samples
    and never load weights (off-policy algorithms); ``weights``: start from a saved weights file or a run's
    checkpoint; ``policy``: a scripted or human policy, ``function(obs) -> actions`` or ``"module:function"``,
    acting instead of the trainer's weights (an expert worker; off-policy algorithms). The env is built here (an
    error in it stops the constructor)."""

    def __init__(self, algo: str = "sac", env: EnvLike | None = None,
                 config: dict[str, Any] | str | Path | RunConfig | None = None, *, server: str | None = None,
                 keys: str | Path | None = None, seed: int | None = None, name: str | None = None,
                 expert: bool = False, weights: str | Path | None = None,
                 policy: str | Callable[[np.ndarray], Any] | None = None):
        overrides = {"seed": seed, "net.server": server, "net.keys": None if keys is None else str(keys)}
        cfg, local = run_config(algo, env, config, overrides)
        if cfg.net.server is None:
            raise ConfigError("Worker(...) needs the relay's address: server=\"HOST:PORT\" (or net.server in the "
                              "config)")
        if local:  # (a factory defined in a script: this process's env manager only)
            cfg = cfg.model_copy(update={"env": cfg.env.model_copy(update={"manager": "sync"})})
        self.config = cfg
        self.worker = RemoteWorker(cfg, name=name, expert=expert, weights=weights, policy=policy)
        self.name = self.worker.client.name
        self._ran = False

    @property
    def version(self) -> int:
        """The version of the policy's weights (0 until the trainer's first arrive)."""
        return self.worker.worker.version

    def run(self, max_steps: int | None = None, stop: threading.Event | None = None, log=sys.stderr) -> dict:
        """Collect and send until ``max_steps`` env steps, ``stop`` is set, Ctrl-C or SIGTERM; then send what is
        pending, close, and return the worker's statistics (``env_steps``, ``version``, ``sent``, ``acked``, ...);
        once per Worker.
        A ``RelayRLError`` if no relay answers within ``net.connect_timeout_s`` of the start; once connected, the
        worker rides out relay restarts (it reconnects and resends)."""
        if self._ran:
            raise RelayRLError(f"worker {self.name} has run and closed its connection and envs: make a new Worker "
                               "to run again")
        self._ran = True
        stop = stop or threading.Event()
        interrupted = False
        try:
            with _stop_on_sigterm(stop):
                self._connect(stop, log)
                if log is not None:
                    print(f"worker {self.name} -> {self.config.net.server} ({self.config.env.id}, {self.config.algo})",
                          file=log, flush=True)
                self.worker.run(max_steps=max_steps, stop=stop, log=log)
        except KeyboardInterrupt:
            interrupted = True
        finally:  # (the command line's waits for acknowledgements: short when stopped, none without a trainer)
            client = self.worker.client
            if interrupted:
                flush = 1.0 if client.connected.is_set() and client.trainer_present() else 0.0
            else:
                flush = 5.0 if stop.is_set() else 30.0
            self.worker.close(flush_timeout=flush if client.connected.is_set() else 0.0)
        return self.worker.stats()

    def _connect(self, stop: threading.Event, log) -> None:
        net, client = self.config.net, self.worker.client
        started = time.monotonic()
        while not client.wait_connected(0.25):
            if stop.is_set():
                return
            if time.monotonic() - started >= net.connect_timeout_s:
                raise RelayRLError(f"no answer from the relay at {net.server} within {net.connect_timeout_s:g} s: is "
                                   f"the relay running there (Relay(bind=\"{net.server}\").serve(), or `relayrl serve "
                                   f"--bind {net.server}`), of this relayrl release (wire protocol {wire.PROTOCOL}), "
                                   "and do the keys match? (net.connect_timeout_s waits longer)")


@contextmanager
def _stop_on_sigterm(stop: threading.Event) -> Iterator[None]:
    """SIGTERM sets ``stop`` while the block runs (in the main thread; elsewhere signals cannot be handled)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
