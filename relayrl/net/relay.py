"""The relay (``relayrl serve``): the one address the trainer and the rollout workers all connect to.

TMRL's model, made safe: samples are consumables (each worker chunk reaches the trainer once, in
order per worker), weights are broadcasts (latest wins; a worker that joins gets them at once), one
trainer at a time, up to ``max_workers`` workers. Workers learn from ``welcome`` and ``pong`` which
trainer process is connected (``meta.trainer``, its incarnation: its run) and collect only for it;
the relay forgets the weights of a trainer process when one of another incarnation says hello. It holds no RL logic and never unpickles: every
message's header and array descriptors are checked by ``wire.decode`` (``arrays=False``: the relay
builds no array, and the body frame need only have the bytes the descriptors say) and forwarded as
the frames it arrived as, uncopied. What is in the arrays is the trainer's to check: its own full
decode and its schema are the trust boundary for samples; the relay refuses what would harm it
(oversize messages, malformed headers, chunks under another worker's name).

Delivery is end to end: a worker keeps each chunk until the trainer's ACK comes back through the
relay, and resends what is unacknowledged when it reconnects, so a relay restart loses nothing.
The relay and the trainer both drop resends they have seen, by (worker, incarnation, seq): the
incarnation tells a restarted worker process that reuses its name from the old one, whose seqs
started at 0 too. A worker may only send chunks under its own name and incarnation. The queue to the
trainer is bounded in bytes (``max_queue_mb``) and in chunks (``max_queue``). The overflow policy
(``overflow``) says what a full queue does. ``drop-oldest`` (the default): the oldest chunks are
dropped, counted (``drops``, ``dropped_bytes``), and their workers are told so they stop holding
them. ``block``: nothing is dropped; a chunk that arrives while the queue is full is not taken but
*held* back to its worker (an ack's ``held``: it stays in the worker's backlog, unsent), and so is
every later chunk of that worker until the held one comes again (order per worker is kept). The
worker stops sending chunks until the relay's ``resume`` (sent once the queue is down to half of
both bounds); its backlog stays unacknowledged, so its credit-based flow control stops its env
stepping meanwhile. Counted: ``held`` (chunks turned back), ``pauses`` (times a worker was paused).
An explicit message rather than ZeroMQ's high-water mark: one ROUTER socket reads every peer, so
not reading would stall the trainer's acks and every heartbeat too (peers would be dropped as
silent), and whatever sat in socket buffers would be lost with a dead trainer's connection; a held
chunk instead stays with its worker, which a dead trainer cannot harm (workers collect nothing
without a trainer, and what the relay held for one goes back to the queue, beyond its bound by at
most ``window`` chunks, not dropped). A block relay refuses workers whose hello does not say they
hold (``meta.holds``, wire protocol 3.2). At most ``window`` chunks are in flight to the trainer; if
the trainer goes away they go back to the front of the queue.

Acknowledgements to workers are batched: what the trainer's acks (and the relay's own drops and
refusals) say about a worker's chunks is gathered while the relay drains its socket, and each
worker gets one ``ack`` per drain naming all of them.

Malformed messages are dropped and counted (``rejects``, and ``rejects/<cause>``). A chunk that is
well formed but carries a value the protocol rules out (``meta.env_steps`` that is not an integer in
[0, 2**63)) is *refused*: acknowledged to its worker with the reason (an ack's ``refusals``), so the
worker stops resending it and says why, and counted (``chunks_refused``, ``chunks_refused/<cause>``).
The trainer's own refusals (a chunk that does not fit its env) reach the worker the same way.

A client of another protocol version that says hello gets one ``refused`` in its own header
format, naming both versions (its later messages are only counted, as ``rejects/proto``).

One thread, one ROUTER socket; it sleeps in ``poll`` between messages (no busy-waiting).
"""

from __future__ import annotations

import json
import secrets
import sys
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from threading import Event
from typing import Any

import zmq

from relayrl.errors import ConfigError
from relayrl.net import wire
from relayrl.net.seen import Senders, SeenSet
from relayrl.net.transport import parse_address, server_socket

TRAINER, WORKER = "trainer", "worker"
DROP_OLDEST, BLOCK = "drop-oldest", "block"
OVERFLOW_POLICIES = (DROP_OLDEST, BLOCK)
DRAIN = 1000  # messages handled between housekeeping turns (and batched worker acks)
# plain ints: pyzmq's Flag enums cost more than the send itself when combined per frame
_MORE = int(zmq.NOBLOCK) | int(zmq.SNDMORE)
_LAST = int(zmq.NOBLOCK)


@dataclass
class RelayOptions:
    bind: str = "127.0.0.1:5555"
    keys: str | None = None  # folder written by `relayrl keys generate`, its server/ part
    insecure: bool = False  # allow a non-loopback bind without keys
    max_workers: int = -1  # -1: unlimited
    max_queue: int = 4096  # chunks queued for the trainer; overflow drops the oldest
    max_queue_mb: float = 256.0  # bytes (all frames) queued for the trainer; overflow drops the oldest
    overflow: str = DROP_OLDEST  # what a full queue does: drop-oldest, or block (workers hold their chunks)
    window: int = 128  # chunks sent to the trainer and not yet acknowledged
    heartbeat_s: float = 1.0
    peer_timeout_s: float = 10.0  # a peer silent this long is dropped
    max_message_mb: float = 64.0
    metrics: str | None = None  # JSONL file of relay metrics
    metrics_every_s: float = 10.0


@dataclass
class Peer:
    ident: bytes
    role: str
    name: str
    last_seen: float
    done: SeenSet = field(default_factory=SeenSet)  # worker chunks delivered or dropped
    incarnation: int = 0  # the worker process's, from its hello
    pulls: bool = False  # a worker that fetches weights at its own period (get_weights with if_newer): no broadcasts


class Relay:
    def __init__(self, options: RelayOptions, context: zmq.Context | None = None):
        bad = [f"--{name.replace('_', '-')} {value}" for name, value in
               (("max_queue", options.max_queue), ("max_queue_mb", options.max_queue_mb), ("window", options.window))
               if not value > 0]
        if bad:
            raise ConfigError(f"{', '.join(bad)}: the relay's queue bounds and window must be greater than 0 "
                              f"(defaults: --max-queue 4096 --max-queue-mb 256 --window 128)")
        if options.overflow not in OVERFLOW_POLICIES:
            raise ConfigError(f"--overflow {options.overflow}: the overflow policy is one of "
                              f"{', '.join(OVERFLOW_POLICIES)} (default {DROP_OLDEST})")
        self.block = options.overflow == BLOCK
        self.options = options
        self.session = secrets.token_hex(8)  # clients notice a restarted relay by a new session
        self.context = context or zmq.Context.instance()
        host, _ = parse_address(options.bind, bind=True)
        if options.keys is None and not _is_loopback(host):
            if not options.insecure:
                raise ConfigError(f"--bind {options.bind} is reachable from other machines, and without --keys "
                                  "anyone who reaches it could feed the trainer and read the weights: create keys "
                                  "with `relayrl keys generate DIR` and pass --keys DIR/server, or pass --insecure "
                                  "on a network you trust")
            warnings.warn(f"relay on {options.bind} without encryption or authentication (--insecure)",
                          stacklevel=2)
        self.max_bytes = int(options.max_message_mb * 2**20)
        self.socket, self._auth, self.roles = server_socket(self.context, options.bind, options.keys, self.max_bytes)
        self.owners: dict[str, str] = {}  # with keys: client name -> the public key that first used it
        self.endpoint = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self.peers: dict[bytes, Peer] = {}
        self.trainer: Peer | None = None
        # worker name -> its newest incarnation's seqs delivered or dropped (outlives reconnects)
        self.done = Senders()
        # chunks are named (worker, incarnation, seq); the queue holds (worker, incarnation, seq, frames, bytes)
        self.queue: deque[tuple[str, int, int, list, int]] = deque()
        self.queued: set[tuple[str, int, int]] = set()
        self.queued_bytes = 0
        self.max_queue_bytes = int(options.max_queue_mb * 2**20)
        self.inflight: dict[tuple[str, int, int], tuple[list, int]] = {}
        self._acks: dict[tuple[str, int], dict[str, list]] = {}  # (worker, incarnation) -> ack meta to send
        # block: (worker, incarnation) -> the lowest seq held back (later ones are held until it comes again)
        self.held_from: dict[tuple[str, int], int] = {}
        self.paused: set[tuple[str, int]] = set()  # block: workers told to hold, not yet told to resume
        self.weights: tuple[int, list] | None = None  # (version, frames) of the latest broadcast
        self.weights_run = 0  # the incarnation of the trainer process that published them
        self.counters = {"chunks_in": 0, "chunks_out": 0, "duplicates": 0, "drops": 0,
                         "dropped_bytes": 0, "rejects": 0, "refused": 0, "chunks_refused": 0, "bytes_in": 0, "bytes_out": 0, "weights_in": 0,
                         "weights_out": 0,
                         "held": 0, "pauses": 0}
        self.causes: dict[str, int] = {}  # "rejects/<cause>" and "chunks_refused/<cause>" -> count
        self._reported: set[tuple[str, str]] = set()  # (worker, cause) of refusals already logged
        self._log: Any = None
        self._rates = {"bytes_in": 0, "bytes_out": 0, "at": time.monotonic()}
        self._metrics_file = Path(options.metrics) if options.metrics else None

    # ---------------------------------------------------------------- loop

    def serve(self, stop: Event | None = None, log=sys.stderr) -> None:
        """Run until ``stop`` is set (checked every heartbeat) or Ctrl-C."""
        stop = stop or Event()
        self._log = log
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        next_metrics = time.monotonic() + self.options.metrics_every_s
        try:
            while not stop.is_set():
                if poller.poll(int(self.options.heartbeat_s * 1000)):
                    self.drain()
                now = time.monotonic()
                self._expire(now)
                self._resume()
                self._flush_acks()  # (drops of chunks put back by a vanished trainer)
                if now >= next_metrics:
                    self._write_metrics(log)
                    next_metrics = now + self.options.metrics_every_s
        finally:
            self.close()

    def close(self) -> None:
        self.socket.close(linger=0)
        if self._auth is not None:
            self._auth.stop()
            self._auth = None

    def drain(self) -> None:
        """Handle what has arrived (up to ``DRAIN`` messages, so housekeeping runs under a flood),
        then send the workers' batched acks."""
        recv = self.socket.recv_multipart
        for _ in range(DRAIN):
            try:
                frames = recv(_LAST, copy=False)
            except zmq.Again:
                break
            self.handle(frames)
        self._flush_acks()

    def handle(self, frames: list) -> None:
        ident, payload = frames[0].bytes, frames[1:]
        nbytes = sum(map(len, payload))  # (zmq Frames and bytes: their length in bytes)
        self.counters["bytes_in"] += nbytes + len(ident)
        try:
            msg = wire.decode(payload, self.max_bytes, arrays=False)
        except wire.WireError as exc:
            self._reject(exc.cause)
            if exc.cause == "proto":
                self._other_protocol(ident, payload)
            return
        peer = self.peers.get(ident)
        if msg.type == wire.HELLO:
            self._hello(ident, msg, _user_id(payload[0]) if self.roles is not None else None)
            return
        if peer is None:
            if msg.type != wire.BYE:
                self._send(ident, wire.encode(wire.REHELLO, meta={"session": self.session}))
            return
        peer.last_seen = time.monotonic()
        handler = _HANDLERS.get((peer.role, msg.type))
        if handler is None:  # e.g. a worker sending weights: not allowed for its role
            self._reject("role")
            return
        handler(self, peer, msg, payload, nbytes)

    def _other_protocol(self, ident: bytes, payload: list) -> None:
        """Answer a hello of another protocol version with one refusal its sender can read."""
        theirs = wire.other_protocol_hello(payload)
        if theirs is None:
            return
        self.counters["refused"] += 1
        reason = (f"this relay speaks wire protocol {wire.PROTOCOL} and this client speaks {theirs}: run the same "
                  "relayrl release on the relay, the trainer and the workers")
        self._send(ident, wire.refusal_for(theirs, reason))

    def _reject(self, cause: str) -> None:
        """Count a message dropped as malformed or not allowed (no answer: it may not even be ours)."""
        self.counters["rejects"] += 1
        self.causes[f"rejects/{cause}"] = self.causes.get(f"rejects/{cause}", 0) + 1

    # ---------------------------------------------------------------- handshake and peers

    def _hello(self, ident: bytes, msg: wire.Message, key: str | None) -> None:
        role, name = msg.meta.get("role"), msg.sender
        if role not in (TRAINER, WORKER) or not name:
            return self._refuse(ident, "a hello must name a role (trainer or worker) and a sender")
        if self.roles is not None:  # CURVE: what a key may do was fixed when the keys were made
            key_role = self.roles.get(key or "")
            if key_role != role:
                return self._refuse(ident, f"this client's key is authorized as a {key_role}, not as a {role} "
                                           "(`relayrl keys generate DIR --clients NAME --trainers NAME` makes "
                                           "trainer keys)")
            if self.owners.setdefault(name, key) != key:  # type: ignore[arg-type]
                return self._refuse(ident, f"the name {name!r} is used by another client's key: give each "
                                           "worker its own --name")
        old = self.peers.get(ident)
        if old is not None and old.role != role:
            self._drop(old)
        if role == TRAINER:
            if self.trainer is not None and self.trainer.ident != ident:
                # retry_after: when the relay would drop the other trainer if it has died (a restarted
                # trainer waits that long once, then takes the slot; a live one keeps it)
                silent = time.monotonic() - self.trainer.last_seen
                return self._refuse(ident, f"another trainer ({self.trainer.name!r}) is connected to this relay; "
                                           "stop it first, or wait for the relay to notice it is gone "
                                           f"({self.options.peer_timeout_s:.0f} s after its last heartbeat)",
                                    retry_after=max(0.0, self.options.peer_timeout_s - silent))
        else:
            newest = self.done.newest(name)
            if newest is not None and msg.incarnation < newest:  # a process older than one seen: never the restart
                return self._refuse(ident, f"another worker process named {name!r}, started after this one, has "
                                           "connected to this relay: give each worker process its own --name, and "
                                           "stop this one if it was replaced (or, if this machine's clock was set "
                                           "back, restart this worker)")
            for other in [p for p in self.peers.values() if p.role == WORKER and p.name == name and p.ident != ident]:
                self._drop(other)  # the same worker on a new connection
            if self.block and msg.meta.get("holds") is not True:
                return self._refuse(ident, "this relay runs with --overflow block, in which workers hold their "
                                           "chunks while the trainer's queue is full, and this worker does not say "
                                           "it can (wire protocol 3.2): run a relayrl worker of the relay's release")
            workers = sum(p.role == WORKER for p in self.peers.values() if p.ident != ident)
            if 0 <= self.options.max_workers <= workers:
                return self._refuse(ident, f"the relay already has its maximum of {self.options.max_workers} "
                                           "workers (relayrl serve --max-workers)")
        done = self.done.get(name, msg.incarnation) if role == WORKER else None  # (fresh for a newer process)
        peer = Peer(ident, role, name, time.monotonic(), SeenSet() if done is None else done, msg.incarnation,
                    pulls=role == WORKER and msg.meta.get("pull") is True)
        self.peers[ident] = peer
        if role == TRAINER:
            self.trainer = peer
            if self.weights is not None and self.weights_run != peer.incarnation:
                self.weights = None  # another trainer process's (an earlier run): workers wait for this one's
        version = self.weights[0] if self.weights else -1
        self._send(ident, wire.encode(wire.WELCOME, version=version, meta={"session": self.session,
                                                                         "trainer": self._trainer_run(),
                                                                         "pulls": True}))
        if role == TRAINER:
            self._dispatch()
        elif self.weights is not None:  # (a pulling worker too: its first weights come at once)
            self._send(ident, self.weights[1])
            self.counters["weights_out"] += 1

    def _refuse(self, ident: bytes, reason: str, retry_after: float | None = None) -> None:
        self.counters["refused"] += 1
        meta: dict[str, Any] = {"reason": reason, "session": self.session}
        if retry_after is not None:
            meta["retry_after"] = retry_after
        self._send(ident, wire.encode(wire.REFUSED, meta=meta))

    def _drop(self, peer: Peer) -> None:
        self.peers.pop(peer.ident, None)
        if peer is self.trainer:
            self.trainer = None
            for key in reversed(list(self.inflight)):  # undelivered: back to the front, in order
                frames, nbytes = self.inflight.pop(key)
                self.queue.appendleft((*key, frames, nbytes))
                self.queued.add(key)  # so a resend of it is still recognised as a duplicate
                self.queued_bytes += nbytes
            self._overflow()

    def _expire(self, now: float) -> None:
        for peer in [p for p in self.peers.values() if now - p.last_seen > self.options.peer_timeout_s]:
            self._drop(peer)

    # ---------------------------------------------------------------- samples, acks, weights

    def _samples(self, peer: Peer, msg: wire.Message, payload: list, nbytes: int = 0) -> None:
        if msg.sender != peer.name or msg.incarnation != peer.incarnation:
            # the trainer dedups and acknowledges by the header's names: a worker speaking for another
            # could have that one's chunks dropped as duplicates, or acknowledged without delivery
            self._reject("sender")
            return
        key = (peer.name, peer.incarnation, msg.seq)
        if peer.done.contains(msg.seq):  # delivered before; its ACK was lost: say it again
            self.counters["duplicates"] += 1
            self._tell_worker(peer.name, peer.incarnation, "seqs", msg.seq)
            return
        if key in self.queued or key in self.inflight:
            self.counters["duplicates"] += 1
            return
        problem = wire.env_steps_problem(msg.meta) if "env_steps" in msg.meta else None
        if problem is not None:  # (a chunk without env_steps is the trainer's to refuse: the relay needs none)
            self._refuse_chunk(peer, msg.seq, "env_steps", problem,
                               "env_steps counts the env steps its transitions took, an integer >= 0: run a "
                               "relayrl worker of the relay's release (a client of your own must follow "
                               "docs/wire-protocol.md)")
            return
        if self.block and self._hold(peer, msg.seq, nbytes):
            return
        self.counters["chunks_in"] += 1
        self.queue.append((*key, payload, nbytes))
        self.queued.add(key)
        self.queued_bytes += nbytes
        self._dispatch()
        self._overflow()

    def _hold(self, peer: Peer, seq: int, nbytes: int) -> bool:
        """Block: whether to turn this chunk back to its worker (it holds it and pauses): when the queue
        is full, or a lower seq of that worker was turned back and has not come again."""
        worker = (peer.name, peer.incarnation)
        first = self.held_from.get(worker)
        if first is not None and seq == first:
            first = None  # the held chunk again: the rest follow in order
        full = bool(self.queue) and (len(self.queue) >= self.options.max_queue
                                     or self.queued_bytes + nbytes > self.max_queue_bytes)
        if first is None and not full:
            self.held_from.pop(worker, None)
            return False
        self.held_from[worker] = seq if first is None else min(first, seq)
        self.counters["held"] += 1
        if worker not in self.paused:
            self.paused.add(worker)
            self.counters["pauses"] += 1
        self._tell_worker(peer.name, peer.incarnation, "held", seq)
        return True

    def _resume(self) -> None:
        """Block: tell the paused workers to send again once the queue is down to half of both bounds."""
        if not self.paused or len(self.queue) > self.options.max_queue // 2 \
                or self.queued_bytes > self.max_queue_bytes // 2:
            return
        for name, incarnation in self.paused:
            self._tell_worker(name, incarnation, "resume", True)
        self.paused.clear()

    def _overflow(self) -> None:
        """The drop-oldest overflow policy: drop the oldest queued chunks while over either bound,
        counted, and tell their workers (they stop holding them). Block drops nothing (``_hold``)."""
        if self.block:
            return
        while self.queue and (len(self.queue) > self.options.max_queue or self.queued_bytes > self.max_queue_bytes):
            name, incarnation, seq, _, nbytes = self.queue.popleft()
            self.queued.discard((name, incarnation, seq))
            self.queued_bytes -= nbytes
            self.counters["drops"] += 1
            self.counters["dropped_bytes"] += nbytes
            self._mark_done(name, incarnation, seq)
            self._tell_worker(name, incarnation, "seqs", seq)
            self._tell_worker(name, incarnation, "dropped", seq)

    def _refuse_chunk(self, peer: Peer, seq: int, cause: str, problem: str, fix: str) -> None:
        """Acknowledge a chunk the relay will not forward, with why (the worker stops resending it)."""
        self.counters["chunks_refused"] += 1
        self.causes[f"chunks_refused/{cause}"] = self.causes.get(f"chunks_refused/{cause}", 0) + 1
        peer.done.add(seq)  # a resend is answered with a plain ack, like a delivered chunk's
        detail = f"the relay refused it: {problem}: {fix}"[:wire.MAX_DETAIL]
        self._tell_worker(peer.name, peer.incarnation, "seqs", seq)
        self._tell_worker(peer.name, peer.incarnation, "refusals", [seq, cause, detail])
        if (peer.name, cause) not in self._reported and self._log is not None:
            self._reported.add((peer.name, cause))
            print(f"relay: refused chunk {seq} of worker {peer.name!r} ({cause}): {problem}; {fix}. The worker was "
                  f"told; later refusals of this kind from it are only counted (chunks_refused/{cause})",
                  file=self._log, flush=True)

    def _dispatch(self) -> None:
        trainer = self.trainer
        while trainer is not None and self.queue and len(self.inflight) < self.options.window:
            name, incarnation, seq, payload, nbytes = self.queue.popleft()
            self.queued.discard((name, incarnation, seq))
            self.queued_bytes -= nbytes
            self.inflight[(name, incarnation, seq)] = (payload, nbytes)
            self._send(trainer.ident, payload, nbytes)
            self.counters["chunks_out"] += 1
        self._resume()

    def _ack(self, peer: Peer, msg: wire.Message, payload: list, nbytes: int = 0) -> None:
        items, refusals = msg.meta.get("acks", []), msg.meta.get("refusals", [])
        # checked before any is applied: a bad one must not leave workers untold
        if not (isinstance(items, list) and all(_is_chunk_name(item, 3) for item in items)
                and isinstance(refusals, list) and all(_is_refusal(item) for item in refusals)):
            self._reject("ack")
            return
        for name, incarnation, seq in items:
            self.inflight.pop((name, incarnation, seq), None)
            self._mark_done(name, incarnation, seq)
            self._tell_worker(name, incarnation, "seqs", seq)
        for name, incarnation, seq, cause, detail in refusals:  # the trainer's: forwarded
            self._tell_worker(name, incarnation, "refusals", [seq, cause, detail])
        self._dispatch()

    def _mark_done(self, name: str, incarnation: int, seq: int) -> None:
        # only for the newest incarnation the relay knows: an older one's memory is gone (its process
        # was replaced), and an ack naming one newer than any hello must not reset the worker's
        seen = self.done.get(name, incarnation, create=False)
        if seen is not None:
            seen.add(seq)

    def _tell_worker(self, name: str, incarnation: int, field: str, item: Any) -> None:
        """Add ``item`` to the ack meta's ``field`` (seqs, dropped, refusals) for that worker process,
        sent by ``_flush_acks`` at the end of the drain."""
        meta = self._acks.get((name, incarnation))
        if meta is None:
            meta = self._acks[(name, incarnation)] = {"seqs": []}
        meta.setdefault(field, []).append(item)

    def _flush_acks(self) -> None:
        if not self._acks:
            return
        pending, self._acks = self._acks, {}
        idents = {(p.name, p.incarnation): p.ident for p in self.peers.values() if p.role == WORKER}
        for (name, incarnation), meta in pending.items():
            ident = idents.get((name, incarnation))  # never another process of that name: its seqs name other chunks
            if ident is None:  # gone: it resends on reconnect, and is answered then
                continue
            for part in _ack_parts(meta):
                self._send(ident, wire.encode(wire.ACK, incarnation=incarnation, meta=part))

    def _weights(self, peer: Peer, msg: wire.Message, payload: list, nbytes: int = 0) -> None:
        self.counters["weights_in"] += 1
        self.weights, self.weights_run = (msg.version, payload), peer.incarnation
        for p in list(self.peers.values()):
            if p.role == WORKER and not p.pulls:
                self._send(p.ident, payload)
                self.counters["weights_out"] += 1

    def _get_weights(self, peer: Peer, msg: wire.Message, payload: list, nbytes: int = 0) -> None:
        """The current weights; to a worker's periodic pull (``meta.if_newer``) only when newer than its own."""
        if self.weights is None:
            return
        if msg.meta.get("if_newer") is True and self.weights[0] <= msg.version:
            return
        self._send(peer.ident, self.weights[1])
        self.counters["weights_out"] += 1

    def _ping(self, peer: Peer, msg: wire.Message, payload: list, nbytes: int = 0) -> None:
        version = self.weights[0] if self.weights else -1
        self._send(peer.ident, wire.encode(wire.PONG, version=version, meta={
            "session": self.session, "queue": len(self.queue), "trainer": self._trainer_run()}))

    def _trainer_run(self) -> int | None:
        """The connected trainer's incarnation (its run, for the workers), None while there is none."""
        return self.trainer.incarnation if self.trainer is not None else None

    def _bye(self, peer: Peer, msg: wire.Message, payload: list, nbytes: int = 0) -> None:
        self._drop(peer)

    def _send(self, ident: bytes, frames: list, nbytes: int | None = None) -> None:
        """One multipart message, its frames (received zmq Frames are passed on without a copy) sent
        by hand: pyzmq's send_multipart combines Flag enums per frame, which costs more than the send."""
        send = self.socket.send
        try:
            send(ident, _MORE, copy=False)
        except zmq.ZMQError:  # zmq.Again: that peer's pipe is full (it asks again: acks, weights are
            return            # re-requested); otherwise the peer is gone
        last = len(frames) - 1
        for i, frame in enumerate(frames):  # (after the first frame the rest of a message is always taken)
            send(frame, _LAST if i == last else _MORE, copy=False)
        if nbytes is None:  # (isinstance, not hasattr: attribute lookups on zmq Frames are slow)
            nbytes = sum(f.nbytes if isinstance(f, memoryview) else len(f) for f in frames)
        self.counters["bytes_out"] += nbytes

    # ---------------------------------------------------------------- metrics

    def stats(self) -> dict[str, float]:
        now = time.monotonic()
        dt = max(now - self._rates["at"], 1e-9)
        out = {**{k: float(v) for k, v in self.counters.items()}, **{k: float(v) for k, v in self.causes.items()},
               "workers": float(sum(p.role == WORKER for p in self.peers.values())),
               "trainer": float(self.trainer is not None), "queue_depth": float(len(self.queue)),
               "queue_bytes": float(self.queued_bytes),
               "inflight": float(len(self.inflight)),
               "bytes_in_per_s": (self.counters["bytes_in"] - self._rates["bytes_in"]) / dt,
               "bytes_out_per_s": (self.counters["bytes_out"] - self._rates["bytes_out"]) / dt}
        self._rates = {"bytes_in": self.counters["bytes_in"], "bytes_out": self.counters["bytes_out"], "at": now}
        return out

    def _write_metrics(self, log) -> None:
        stats = self.stats()
        line = json.dumps({"time": time.time(), **stats})
        if self._metrics_file is not None:
            with self._metrics_file.open("a") as f:
                f.write(line + "\n")
        if log is not None:
            held = f"held {int(stats['held'])} (pauses {int(stats['pauses'])}), " if self.block else ""
            print(f"relay: {int(stats['workers'])} workers, trainer {'on' if stats['trainer'] else 'off'}, "
                  f"queue {int(stats['queue_depth'])} ({stats['queue_bytes'] / 1e6:.1f} MB), drops {int(stats['drops'])} "
                  f"({stats['dropped_bytes'] / 1e6:.1f} MB), {held}"
                  f"rejects {int(stats['rejects'])}{_by_cause(stats, 'rejects')}, "
                  f"refused chunks {int(stats['chunks_refused'])}{_by_cause(stats, 'chunks_refused')}, "
                  f"in {stats['bytes_in_per_s'] / 1e6:.2f} MB/s, out {stats['bytes_out_per_s'] / 1e6:.2f} MB/s",
                  file=log, flush=True)


_HANDLERS = {
    (WORKER, wire.SAMPLES): Relay._samples,
    (WORKER, wire.GET_WEIGHTS): Relay._get_weights,
    (WORKER, wire.PING): Relay._ping,
    (WORKER, wire.BYE): Relay._bye,
    (TRAINER, wire.ACK): Relay._ack,
    (TRAINER, wire.WEIGHTS): Relay._weights,
    (TRAINER, wire.PING): Relay._ping,
    (TRAINER, wire.BYE): Relay._bye,
}


def _ack_parts(meta: dict[str, list], limit: int = 4000) -> list[dict[str, list]]:
    """``meta`` split so each ack's header stays far below wire.MAX_HEADER_BYTES (a refusal's detail is
    up to 600 characters; seqs are up to 9 bytes each)."""
    parts = []
    seqs, dropped, refusals = meta["seqs"], meta.get("dropped", []), meta.get("refusals", [])
    held, resume = meta.get("held", []), bool(meta.get("resume"))
    for start in range(0, max(len(seqs), 1), limit):
        part: dict[str, list] = {"seqs": seqs[start:start + limit]}
        if dropped:
            chosen = set(part["seqs"])
            part["dropped"] = [s for s in dropped if s in chosen]
        parts.append(part)
    for start in range(0, len(refusals), 32):  # the first ones with the seqs, more in acks of their own
        if start:
            parts.append({"seqs": []})
        parts[-1]["refusals"] = refusals[start:start + 32]
    for start in range(0, len(held), limit):  # with the last seqs (more in acks of their own); resume last
        if start:
            parts.append({"seqs": []})
        parts[-1]["held"] = held[start:start + limit]
    if resume:
        parts[-1]["resume"] = True
    return parts


def _is_chunk_name(item: Any, length: int) -> bool:
    """[worker name, incarnation, seq, ...] with the integers in [0, 2**63)."""
    return (isinstance(item, list) and len(item) == length and isinstance(item[0], str)
            and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < wire.INT64 for n in item[1:3]))


def _is_refusal(item: Any) -> bool:
    """[worker name, incarnation, seq, cause, detail]: a chunk the trainer acknowledged but did not use."""
    return (_is_chunk_name(item, 5) and isinstance(item[3], str) and 0 < len(item[3]) <= wire.MAX_CAUSE
            and isinstance(item[4], str) and len(item[4]) <= wire.MAX_DETAIL)


def _by_cause(stats: dict[str, float], counter: str) -> str:
    """" (proto 2, header 1)" for the per-cause counts of ``counter`` that are not zero."""
    parts = [f"{k.split('/', 1)[1]} {int(v)}" for k, v in sorted(stats.items()) if k.startswith(counter + "/") and v]
    return f" ({', '.join(parts)})" if parts else ""


def _user_id(frame: Any) -> str | None:
    """The authenticated public key (z85) ZeroMQ attached to a received frame."""
    try:
        return frame.get("User-Id")
    except (zmq.ZMQError, AttributeError, UnicodeDecodeError):
        return None


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
