"""The trainer's end of the relay: ``relayrl train ALGO --env ENV --server HOST:PORT``.

``RelayBackend`` is the relay as one more transport under the worker pool (runtime/pool.py), beside
the mp and Ray backends: ``publish`` broadcasts the weights as safetensors bytes through the relay,
``receive`` returns what remote workers sent, checked, and the pool gates, filters by lag, joins and
counts those chunks as it does for local workers (docs/usage.md, "Worker metrics"). Remote workers
are numbered as they first send (the pool's worker ids): PPO joins the rollouts of ``config.workers``
distinct workers in that order; APPO puts worker k's env columns at slot k % ``config.workers``.
``relay_pool`` builds the pool over it.

Every chunk is acknowledged once received (the worker then forgets it); a chunk seen before, by
(worker, incarnation, seq), is acknowledged and dropped (``net/duplicates``), so a resend after a
relay restart is never learned from twice, while a restarted worker process that reuses its name
(seqs from 0 again, a newer incarnation) is learned from as new (its old process's chunks still in
flight: ``net/stale``).

A chunk the trainer cannot use (net/chunk_checks.py: another env or algo, a buggy compressor, a NaN
reward, ...) is *refused*: acknowledged like any other with the reason on the ack, which the relay
passes to the worker (wire protocol 2.1, an ack's ``refusals``); counted in ``net/refused`` and
``net/refused/<cause>``; and logged for the first refusal of each cause from each worker, naming the
worker, what was expected and what came. It contributes nothing: no samples, env steps or episode
returns. Training goes on with the other workers.

Workers describe their env's spaces in every chunk (``meta.spaces``, envs/space_data.py). With
``net.remote_env`` the trainer builds no env: ``await_spaces()`` takes the spaces from the first
chunk that carries them (that chunk, and those before it, are kept and used).

Waits are the relay's to explain (``silent``): the trainer says when it waits for the relay, when no
worker has sent anything yet, and every WAITING_NOTICE_S what the pool still waits for. ``stop``: set
by the first Ctrl-C (``relayrl train``); a wait on the relay or the workers then ends within
STOP_CHECK_S with KeyboardInterrupt.
"""

from __future__ import annotations

import sys
import threading
import time

import gymnasium as gym
import numpy as np

from relayrl.algos import get_algo
from relayrl.errors import ConfigError, RelayRLError
from relayrl.net import wire
from relayrl.net.chunk_checks import ChunkChecks, Refusal, decode_spaces, finite_numbers
from relayrl.net.client import Backoff, RelayClient
from relayrl.net.seen import Senders
from relayrl.options import RunConfig
from relayrl.runtime import pool_for
from relayrl.runtime.backends import Backend
from relayrl.runtime.messages import InsertTransitions, LoadParams
from relayrl.runtime.pool import WorkerPool
from relayrl.types import Batch

WAITING_NOTICE_S = 30.0
NOTICE_S = 1.0  # a wait for the relay, or for the first chunk, is said after this long
STOP_CHECK_S = 0.2  # waits look at the stop event this often


class RelayBackend(Backend):
    """Remote workers through the relay at ``config.net.server``; ``observation_space``/``action_space``: the
    env's (None with ``net.remote_env`` until ``await_spaces()`` has them from a worker)."""

    def __init__(self, config: RunConfig, observation_space: gym.Space | None = None,
                 action_space: gym.Space | None = None, stop: threading.Event | None = None):
        net = config.net
        if net.server is None:
            raise RelayRLError("RelayBackend needs net.server (relayrl train --server HOST:PORT)")
        if (observation_space is None) != (action_space is None):
            raise RelayRLError("RelayBackend takes both spaces, or neither (net.remote_env: from the workers)")
        if observation_space is None and not net.remote_env:
            raise RelayRLError("RelayBackend needs the env's spaces, or net.remote_env=true to take them from the "
                               "workers")
        self.config = config
        self.on_policy = get_algo(config.algo).on_policy
        self.num_workers = config.workers  # on-policy: the rollouts (PPO) or column slots (APPO) of one learner rollout
        self.server, self.connect_timeout = net.server, net.connect_timeout_s
        self.stop = stop
        self.client = RelayClient(net.server, "trainer", keys=net.keys, heartbeat_s=net.heartbeat_s,
                                  timeout_s=net.timeout_s, max_message_mb=net.max_message_mb, backoff=Backoff.of(net))
        self.checks = ChunkChecks(config, observation_space, action_space)
        self.seen = Senders()  # per worker name, its newest process's seqs
        self.names: list[str] = []  # worker id -> name, in the order workers first sent
        self._ids: dict[str, int] = {}
        self.counts = {"duplicates": 0, "stale": 0, "refused": 0}
        self.refused: dict[str, int] = {}  # cause -> chunks refused for it
        self.pending: list[wire.Message] = []  # messages received and not yet taken (those await_spaces read)
        self.test_returns: list[float] = []  # since the last stats() (net/test_return)
        self._test_pending: list[float] = []  # since the last pop_test_returns()
        self.timing: dict[str, dict[str, float]] = {}  # worker -> its real-time clock statistics
        self._reported: set[tuple[str, str]] = set()  # (worker, cause) already logged
        self._heard = False  # a message came since the last notice
        self._any_heard = False  # any message has come (the first wait for one is said sooner)
        self._told_at = 0.0  # the silence, in seconds, when a wait was last said
        self._lost_told = False  # the lost connection to the relay was said

    @property
    def observation_space(self) -> gym.Space | None:
        return self.checks.observation_space

    @property
    def action_space(self) -> gym.Space | None:
        return self.checks.action_space

    # ---------------------------------------------------------------- the pool's calls

    def start(self, seed: int) -> None:
        self.connect()
        if self.observation_space is None:
            self.await_spaces()

    def publish(self, params: LoadParams, env_steps: int) -> None:
        self.client.publish_weights(params.version, wire.weights_to_bytes(params.weights))

    def request(self, version: int) -> None:
        """(Remote workers collect a rollout whenever new weights come.)"""

    def receive(self, timeout: float = 0.0) -> list[InsertTransitions]:
        msgs = self._messages(timeout)
        if not msgs:
            return []
        self._heard = self._any_heard = True
        chunks, refusals = [], []
        for msg in msgs:
            batch = self._admit(msg, refusals)
            if batch is None or (not batch and (self.on_policy or msg.version < 0)):
                continue  # a duplicate, a refusal, or a worker's announcement (its spaces, no samples yet)
            meta = msg.meta
            if msg.sender not in self._ids:
                self._ids[msg.sender] = len(self.names)
                self.names.append(msg.sender)
            chunks.append(InsertTransitions(
                self._ids[msg.sender], msg.seq, msg.version, batch, meta["env_steps"],
                tuple(float(r) for r in finite_numbers(meta.get("returns"))),
                tuple(int(n) for n in finite_numbers(meta.get("lengths"))), meta.get("obs_moments"),
                collect_s=_seconds(meta.get("collect_s"))))
        self.client.ack(msgs, refusals)
        return chunks

    def silent(self, seconds: float, waiting_for: str) -> None:
        """Say what the trainer waits for: the workers' first message after NOTICE_S, then ``waiting_for`` every
        WAITING_NOTICE_S without one (a lost relay is said as it happens)."""
        if self._heard or seconds < self._told_at:
            self._heard, self._told_at = False, seconds
            return
        if not self.client.connected.is_set():
            return
        if not self._any_heard and seconds >= NOTICE_S:
            print(f"relayrl: waiting for workers: none has sent anything through the relay at {self.server} yet "
                  f"(`relayrl worker --server {self.server} --env {self.config.env.id} --algo {self.config.algo}`)",
                  file=sys.stderr, flush=True)
            self._any_heard, self._told_at = True, seconds  # (then every WAITING_NOTICE_S)
        elif seconds - self._told_at >= WAITING_NOTICE_S:
            print(f"relayrl: {waiting_for} from the relay at {self.server} for {seconds:.0f} s: are workers running "
                  f"(`relayrl worker --server {self.server} --algo {self.config.algo} ...`)?", file=sys.stderr,
                  flush=True)
            self._told_at = seconds

    def worker_name(self, worker_id: int) -> str:
        return self.names[worker_id]

    def stats(self) -> dict[str, float]:
        out = {"net/workers_seen": float(len(self.seen)), **{f"net/{k}": float(v) for k, v in self.counts.items()},
               **{f"net/refused/{cause}": float(n) for cause, n in self.refused.items()},
               "net/reconnects": float(self.client.stats["reconnects"]),
               "net/bytes_in": float(self.client.stats["bytes_in"])}
        if self.timing:
            out["net/rt_late_steps"] = sum(t.get("late_steps", 0.0) for t in self.timing.values())
            out["net/rt_jitter_max"] = max(t.get("jitter", 0.0) for t in self.timing.values())
        if self.test_returns:
            out["net/test_return"] = float(np.mean(self.test_returns))
            self.test_returns = []
        return out

    def close(self) -> None:
        self.client.close()

    # ---------------------------------------------------------------- the relay

    def connect(self) -> None:
        """Wait for the relay (``net.connect_timeout_s``), saying so after NOTICE_S; a RelayRLError naming
        the fix if it does not answer."""
        started = time.monotonic()
        told = False
        while not self.client.wait_connected(STOP_CHECK_S):
            self._check_stop()
            waited = time.monotonic() - started
            if waited >= self.connect_timeout:
                self.client.close(timeout=0)
                raise RelayRLError(f"no answer from the relay at {self.server} within {self.connect_timeout:.0f} s: "
                                   f"is `relayrl serve --bind {self.server}` running there, of this relayrl release "
                                   f"(wire protocol {wire.PROTOCOL}; a relay of protocol 2 does not answer newer "
                                   "clients), and does --keys hold the keys it accepts? (net.connect_timeout_s waits "
                                   "longer)")
            if not told and waited >= NOTICE_S:
                print(f"relayrl: waiting for the relay at {self.server} (up to {self.connect_timeout:.0f} s, "
                      "net.connect_timeout_s)", file=sys.stderr, flush=True)
                told = True
        if told:
            print(f"relayrl: connected to the relay at {self.server}", file=sys.stderr, flush=True)

    def await_spaces(self, timeout: float | None = None) -> tuple[gym.Space, gym.Space]:
        """The env's spaces, from the first chunk that describes them (net.remote_env). Every message
        received meanwhile is kept for the pool."""
        if self.observation_space is not None:
            return self.observation_space, self.action_space
        self.connect()
        timeout = self.connect_timeout if timeout is None else timeout
        started = time.monotonic()
        told = False
        while time.monotonic() < started + timeout:
            msgs = self.client.receive(min(STOP_CHECK_S, max(0.0, started + timeout - time.monotonic())))
            if not msgs and self.client.closed:
                break
            self._check_stop()
            if not msgs and not told and time.monotonic() - started >= NOTICE_S:
                print(f"relayrl: waiting for a worker to describe its env's spaces through the relay at {self.server} "
                      f"(net.remote_env; up to {timeout:.0f} s)", file=sys.stderr, flush=True)
                told = True
            self.pending.extend(msgs)
            for msg in msgs:
                spaces = decode_spaces(msg.meta.get("spaces"))
                if isinstance(spaces, tuple):
                    print(f"relayrl: the env's spaces, from worker {msg.sender!r}: observation {spaces[0]}, action "
                          f"{spaces[1]}", file=sys.stderr, flush=True)
                    self.checks.bind(*spaces)
                    return spaces
        raise RelayRLError(f"net.remote_env: no worker described its env's spaces through the relay at {self.server} "
                           f"within {timeout:.0f} s: start `relayrl worker --server {self.server} --env ENV --algo "
                           f"{self.config.algo}` (workers of this release describe them in every chunk), or drop "
                           "--remote-env so the trainer builds the env itself (net.connect_timeout_s waits longer)")

    def pop_test_returns(self) -> list[float]:
        """Returns of the workers' deterministic test episodes (net.test_episode_interval) since the last call."""
        out, self._test_pending = self._test_pending, []
        return out

    def _check_stop(self) -> None:
        """Ctrl-C (the stop event) ends a wait on a peer at once: no round to finish while nothing comes."""
        if self.stop is not None and self.stop.is_set():
            raise KeyboardInterrupt

    def _messages(self, timeout: float) -> list[wire.Message]:
        """What the relay delivered within ``timeout``, looking at the stop event and the connection meanwhile."""
        if self.pending:
            msgs, self.pending = self.pending, []
            return msgs
        deadline = time.monotonic() + timeout
        while True:
            msgs = self.client.receive(max(0.0, min(STOP_CHECK_S, deadline - time.monotonic())))
            self._check_stop()
            self._notice_connection()
            if msgs:
                return msgs
            if self.client.closed:
                raise RelayRLError(f"the connection to the relay at {self.server} was closed while the trainer "
                                   f"waited for {'rollouts' if self.on_policy else 'samples'}")
            if time.monotonic() >= deadline:
                return []

    def _notice_connection(self) -> None:
        """Say when the connection to the relay is lost, and when it is back."""
        connected = self.client.connected.is_set()
        if connected == self._lost_told:
            self._lost_told = not connected
            print(f"relayrl: lost the relay at {self.server}; waiting for the relay at {self.server} (reconnecting)"
                  if not connected else f"relayrl: connected to the relay at {self.server} again",
                  file=sys.stderr, flush=True)

    def _admit(self, msg: wire.Message, refusals: list) -> Batch | None:
        """The chunk's arrays, or None for a duplicate, a stale or a refused chunk (counted; a refusal
        is added to ``refusals`` for the ack). Test returns and timing are taken from every admitted chunk."""
        seen = self.seen.get(msg.sender, msg.incarnation)
        if seen is None:  # from a process since replaced by a newer one of its name (the relay delivers
            self.counts["stale"] += 1  # in order, so only a second live process of one name gets here)
            return None
        if not seen.add(msg.seq):
            self.counts["duplicates"] += 1
            return None
        try:
            batch = self.checks.check(msg)
        except Refusal as refusal:
            self._refuse(msg, refusal)
            refusals.append((msg, refusal.cause, f"the trainer refused it: {refusal}"))
            return None
        meta = msg.meta
        tests = [float(r) for r in finite_numbers(meta.get("test_returns"))]
        self.test_returns.extend(tests)
        self._test_pending.extend(tests)
        timing = meta.get("timing")
        if isinstance(timing, dict):  # a real-time env's clock, latest per worker
            self.timing[msg.sender] = {k: float(v) for k, v in timing.items()
                                       if k in ("late_steps", "jitter") and isinstance(v, (int, float)) and np.isfinite(v)}
        return batch

    def _refuse(self, msg: wire.Message, refusal: Refusal) -> None:
        """Count a refused chunk; log the first of each cause from each worker."""
        self.counts["refused"] += 1
        self.refused[refusal.cause] = self.refused.get(refusal.cause, 0) + 1
        if (msg.sender, refusal.cause) not in self._reported:
            self._reported.add((msg.sender, refusal.cause))
            print(f"relayrl: refused chunk {msg.seq} of worker {msg.sender!r} ({refusal.cause}): {refusal.problem}; "
                  f"{refusal.fix}. The worker was told; later refusals of this kind from it are only counted "
                  f"(net/refused/{refusal.cause})", file=sys.stderr, flush=True)


def relay_pool(config: RunConfig, observation_space: gym.Space | None = None, action_space: gym.Space | None = None,
               stop: threading.Event | None = None) -> WorkerPool:
    """The loop's ``samples=`` source and ``publish=`` sink for remote workers: the worker pool over a
    ``RelayBackend`` (its ``backend``)."""
    return pool_for(config, RelayBackend(config, observation_space, action_space, stop))


def make_relay_source(config: RunConfig, stop: threading.Event | None = None
                      ) -> tuple[WorkerPool, RelayBackend, tuple[gym.Space, gym.Space] | None]:
    """The trainer's end of a relay (``--server``): remote workers instead of local ones. Returns the
    pool, its relay backend and, with ``net.remote_env``, the spaces the workers reported (the trainer
    builds no env and evaluates from their test episodes, ``RelayBackend.pop_test_returns``); otherwise
    None: the trainer's own evaluation envs give them.

    On-policy, ``config.workers`` is how many remote workers' rollouts make one learner rollout
    (PPO) or how many column slots their rollouts fill (APPO). ``stop``: the Ctrl-C event."""
    entry = get_algo(config.algo)
    if config.backend not in ("auto", "inline"):
        raise ConfigError(f"--server learns from the workers connected to the relay, not from --backend "
                          f"{config.backend}: drop --backend (start `relayrl worker --server ...` on each machine)")
    if config.workers != 1 and not entry.on_policy:
        raise ConfigError(f"--server with {config.algo} learns from whatever workers are connected to the relay: drop "
                          "--workers (it counts the remote workers whose rollouts make one rollout of ppo or appo)")
    config.algo_config.check_placement(config.algo, "relay")  # e.g. PPO's prenorm needs the trainer's own envs
    if config.net.remote_env:
        backend = RelayBackend(config, stop=stop)
        try:
            spaces = backend.await_spaces()
        except BaseException:
            backend.close()
            raise
        return pool_for(config, backend), backend, spaces
    from relayrl.envs.registry import make

    env = make(config.env.id, **config.env.wrapping(), **config.env.kwargs)
    try:
        backend = RelayBackend(config, env.observation_space, env.action_space, stop)
    finally:
        env.close()
    return pool_for(config, backend), backend, None


def _seconds(value: object) -> float:
    """A chunk's meta.collect_s: its worker's collecting time; 0.0 (unknown) when absent or not a sane number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e9:
        return float(value)
    return 0.0
