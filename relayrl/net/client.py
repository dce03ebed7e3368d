"""RelayClient: a trainer's or a worker's connection to the relay, run by a background I/O thread.

    client = RelayClient("relay.example.org:5555", "worker", keys="keys/worker")
    seq = client.send_samples(batch, version=3, meta={"env_steps": 64})   # kept until acknowledged
    message = client.take_weights()                                        # newest weights or None

The I/O thread owns the ZeroMQ socket (sockets are not thread-safe); the caller's thread hands it
work through locked state and wakes it through an inproc pipe, so it sleeps in ``poll`` otherwise.
It says hello, answers for heartbeats, and when the relay stops answering for ``timeout_s`` (or a
restarted relay does not know it) it reconnects and says hello again, with exponential backoff
between hellos (``Backoff``: initial, factor, maximum; ``net.reconnect_*``).

A worker keeps every chunk in a bounded backlog until the trainer's ACK comes back, and resends the
unacknowledged ones after each reconnect (at-least-once; the relay and trainer drop repeats by
(worker, incarnation, seq)). A full backlog drops its oldest chunk, counted in
``stats["backlog_drops"]``; an ACK that comes later for a chunk so dropped (the relay had it) still
counts in ``stats["acked"]``.

Behind a relay with ``--overflow block`` a chunk may come back *held* (an ack's ``held``: the
trainer's queue was full): it goes back to unsent, and the worker sends no chunk until the relay's
``resume`` (a new connection resumes too), counted in ``stats["pauses"]`` and ``stats["blocked_s"]``.
A held chunk is never the one a full backlog drops (the relay waits for it to keep the order).

The relay tells a worker which trainer process is connected (``trainer_run``: its incarnation, None
while there is none; a relay of an earlier revision does not say, ``reports_trainer`` False), and
weights carry the incarnation of the trainer that published them (``weights_run`` of the newest
taken): the worker collects only for a trainer that is there, with weights of its run. The incarnation is the client's creation time in nanoseconds: a worker
process restarted under the same ``name`` numbers its chunks from 0 again, and only its larger
incarnation keeps them from being taken for the old process's chunks.

A chunk the trainer (or the relay) refuses comes back acknowledged with a reason (an ack's
``refusals``): the worker counts it (``stats["chunks_refused"]``, ``chunk_refusals`` per cause) and
prints the first refusal of each cause, since every later chunk is likely refused for the same reason.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import zmq

from relayrl.errors import ConfigError, RelayRLError
from relayrl.net import wire
from relayrl.net.seen import WINDOW
from relayrl.net.transport import client_socket
from relayrl.options import NetConfig

EVICTED_MEMORY = WINDOW  # seqs of chunks dropped from the backlog, remembered to count their late acks


_incarnation_lock = threading.Lock()
_last_incarnation = 0


def new_incarnation() -> int:
    """Nanoseconds since the epoch, strictly increasing within this process (clocks can be coarse)."""
    global _last_incarnation
    with _incarnation_lock:
        _last_incarnation = max(time.time_ns(), _last_incarnation + 1)
        return _last_incarnation


@dataclass(frozen=True)
class Backoff:
    """Seconds between hellos while the relay does not answer: ``initial``, times ``factor`` after
    each, at most ``maximum`` (``net.reconnect_initial_s``, ``reconnect_factor``, ``reconnect_max_s``)."""

    initial: float = 0.2
    factor: float = 2.0
    maximum: float = 30.0

    def __post_init__(self) -> None:
        if not (self.initial > 0 and self.factor >= 1 and self.maximum >= self.initial):
            raise ConfigError(f"reconnect backoff initial {self.initial:g} s, factor {self.factor:g}, maximum "
                              f"{self.maximum:g} s: give initial > 0, factor >= 1 and maximum >= initial "
                              "(net.reconnect_initial_s, net.reconnect_factor, net.reconnect_max_s; defaults "
                              "0.2, 2, 30)")

    @classmethod
    def of(cls, net: NetConfig) -> Backoff:
        """From a config's ``net`` section."""
        return cls(net.reconnect_initial_s, net.reconnect_factor, net.reconnect_max_s)

    def next(self, current: float) -> float:
        return min(current * self.factor, self.maximum)


class RelayRefused(RelayRLError):
    """The relay said no (a second trainer, too many workers); the text is the relay's reason."""


class RelayClient:
    def __init__(self, server: str, role: str, *, name: str | None = None, keys: str | None = None,
                 heartbeat_s: float = 1.0, timeout_s: float = 10.0, backlog: int = 256, window: int = 64,
                 max_message_mb: float = 64.0, backoff: Backoff = Backoff(), pull_s: float | None = None):
        if backlog + window > WINDOW:  # the relay and the trainer remember this many seqs per worker
            raise ConfigError(f"net.backlog ({backlog}) + net.window ({window}) is more than the {WINDOW} chunks "
                              "the relay and the trainer remember per worker to drop resends: make them smaller")
        self.server, self.role, self.keys = server, role, keys
        self.name = name or f"{role}-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.incarnation = new_incarnation()
        self.heartbeat_s, self.timeout_s = heartbeat_s, timeout_s
        self.backlog_max, self.window = backlog, window
        self.max_bytes = int(max_message_mb * 2**20)
        self.backoff = backoff
        self.pull_s = pull_s  # worker: fetch the newest weights this often instead of taking every broadcast
        self._pull_warned = False
        self.context = zmq.Context.instance()
        self._lock = threading.Condition()
        self._backlog: OrderedDict[int, list] = OrderedDict()  # worker: seq -> frames, until acknowledged
        self._sent: set[int] = set()  # seqs sent on the current connection
        self._seq = 0
        self._weights_in: wire.Message | None = None  # worker: newest weights not yet taken
        self.version = -1  # worker: version of the weights it acts with (set by the caller)
        self.weights_run: int | None = None  # worker: the publishing trainer's incarnation, of the weights taken last
        self.trainer_run: int | None = None  # the incarnation of the trainer the relay has (None: none)
        self.reports_trainer = False  # the relay says which trainer it has (wire protocol 3.1)
        self._evicted: OrderedDict[int, None] = OrderedDict()  # worker: seqs dropped from a full backlog
        self._held: set[int] = set()  # worker: seqs a block relay turned back, not yet acknowledged
        self._paused_at: float | None = None  # worker: when a block relay paused it (None: not paused)
        self._inbox: deque[wire.Message] = deque()  # trainer: chunks received
        self._acks: list[list] = []  # trainer: [worker, incarnation, seq] to acknowledge
        self._refusals: list[list] = []  # trainer: [worker, incarnation, seq, cause, detail] of chunks not used
        self.chunk_refusals: dict[str, int] = {}  # worker: cause -> chunks of this process refused for it
        self._weights_out: list | None = None  # trainer: newest weights frames (resent to a new relay)
        self._weights_pending = False
        self.connected = threading.Event()
        self.refused: str | None = None
        self._retry_deadline: float | None = None  # refused for now: hello again until then
        self._retry_at = 0.0
        self.relay_version = -1
        self.session: str | None = None
        self.stats = {"sent": 0, "acked": 0, "backlog_drops": 0, "relay_drops": 0, "chunks_refused": 0,
                      "reconnects": 0, "received": 0, "rejects": 0, "bytes_out": 0, "bytes_in": 0,
                      "hellos": 0, "pauses": 0, "blocked_s": 0.0, "pulls": 0, "weights_in": 0}
        self._stop = threading.Event()
        wake_address = f"inproc://relayrl-wake-{secrets.token_hex(6)}"
        self._wake_rx = self.context.socket(zmq.PAIR)
        self._wake_rx.bind(wake_address)
        self._wake_tx = self.context.socket(zmq.PAIR)
        self._wake_tx.connect(wake_address)
        self._wake_lock = threading.Lock()
        client_socket(self.context, server, keys, self.max_bytes).close(linger=0)  # bad keys/address: fail here
        self._thread = threading.Thread(target=self._run, name=f"relayrl-net-{role}", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- caller's side

    def wait_connected(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.connected.wait(0.1):
            self._check_refused()
            if deadline is not None and time.monotonic() > deadline:
                return False
        return True

    def send_samples(self, arrays: dict[str, np.ndarray], version: int, meta: dict[str, Any]) -> int:
        """Queue a chunk; returns its sequence number. Kept (and resent) until acknowledged."""
        self._check_refused()
        with self._lock:
            seq = self._seq
            self._seq += 1
            self._backlog[seq] = wire.encode(wire.SAMPLES, sender=self.name, incarnation=self.incarnation, seq=seq,
                                             version=version, arrays=arrays, meta=meta)
            while len(self._backlog) > self.backlog_max:  # disconnected too long: drop the oldest
                old = next((s for s in self._backlog if s not in self._held), None)  # (a block relay waits for those)
                if old is None:
                    break
                del self._backlog[old]
                self._sent.discard(old)
                self.stats["backlog_drops"] += 1
                self._evicted[old] = None  # (the relay may have it: its ack still counts)
                if len(self._evicted) > EVICTED_MEMORY:
                    self._evicted.popitem(last=False)
        self._wake()
        return seq

    def unacknowledged(self) -> int:
        with self._lock:
            return len(self._backlog)

    def trainer_present(self) -> bool:
        """Connected to the relay, and the relay has a trainer (or, of an earlier revision, does not say)."""
        return self.connected.is_set() and (self.trainer_run is not None or not self.reports_trainer)

    def wait_change(self, timeout: float) -> None:
        """Sleep up to ``timeout`` or until something arrives: an ack, weights, a trainer, the relay."""
        with self._lock:
            self._check_refused()
            if not self._stop.is_set():
                self._lock.wait(timeout)

    def wait_weights(self, timeout: float) -> bool:
        """Worker: wait up to ``timeout`` for weights not yet taken; True once there are some."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._weights_in is None:
                self._check_refused()
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return False
                self._lock.wait(min(left, 0.5))
        return True

    def wait_unacknowledged(self, below: int, timeout: float) -> bool:
        """Worker: wait up to ``timeout`` until fewer than ``below`` chunks are unacknowledged, or new
        weights arrive; True if fewer are."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self._backlog) >= below and self._weights_in is None:
                self._check_refused()
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    break
                self._lock.wait(min(left, 0.5))
            return len(self._backlog) < below

    @property
    def closed(self) -> bool:
        """The I/O thread has stopped (``close()``, or a refusal): nothing more will arrive."""
        return self._stop.is_set() or not self._thread.is_alive()

    def take_weights(self) -> wire.Message | None:
        """The newest weights received since the last call (then ``version`` is theirs), or None."""
        with self._lock:
            msg, self._weights_in = self._weights_in, None
            if msg is not None:
                self.version = max(self.version, msg.version)
                self.weights_run = msg.incarnation
        return msg

    def receive(self, timeout: float) -> list[wire.Message]:
        """Trainer: the chunks that have arrived, waiting up to ``timeout`` for the first."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not self._inbox:
                self._check_refused()
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return []
                self._lock.wait(min(left, 0.5))
            out = list(self._inbox)
            self._inbox.clear()
        return out

    def ack(self, chunks: list[wire.Message], refusals: list[tuple[wire.Message, str, str]] = ()) -> None:
        """Trainer: acknowledge received chunks (the messages ``receive`` returned); ``refusals``:
        (message, cause, detail) of those among them the trainer does not use, told to their workers."""
        items = []
        for chunk in chunks:
            if not isinstance(chunk, wire.Message):  # e.g. protocol 1's (sender, seq) pairs
                raise TypeError(f"ack takes the received messages, got {chunk!r}: pass them as they came, "
                                "client.ack(msgs)")
            items.append([chunk.sender, chunk.incarnation, chunk.seq])
        refused = [[msg.sender, msg.incarnation, msg.seq, cause[:wire.MAX_CAUSE], detail[:wire.MAX_DETAIL]]
                   for msg, cause, detail in refusals]
        with self._lock:
            self._acks.extend(items)
            self._refusals.extend(refused)
        self._wake()

    def publish_weights(self, version: int, blob: bytes) -> None:
        # (the incarnation names this trainer's run: workers act only with weights of the trainer that is there)
        frames = wire.encode(wire.WEIGHTS, sender=self.name, incarnation=self.incarnation, version=version, blob=blob)
        with self._lock:
            self._weights_out, self._weights_pending = frames, True
        self._wake()

    def close(self, timeout: float = 2.0) -> None:
        """Say goodbye, stop the thread; waits up to ``timeout`` for unsent acks and weights to go."""
        deadline = time.monotonic() + timeout
        while self.connected.is_set() and time.monotonic() < deadline:
            with self._lock:
                if not self._acks and not self._refusals and not self._weights_pending:
                    break
            time.sleep(0.01)
        self._stop.set()
        self._wake()
        self._thread.join(timeout=5)
        self._wake_tx.close(linger=0)

    def _check_refused(self) -> None:
        if self.refused is not None:
            raise RelayRefused(f"the relay at {self.server} refused this {self.role}: {self.refused}")

    def _wake(self) -> None:
        with self._wake_lock:
            try:
                self._wake_tx.send(b"", zmq.NOBLOCK)
            except zmq.ZMQError:
                pass

    # ---------------------------------------------------------------- I/O thread

    def _run(self) -> None:
        sock = None
        try:
            while not self._stop.is_set() and self.refused is None:
                sock = client_socket(self.context, self.server, self.keys, self.max_bytes)
                self._session(sock)
                if self._stop.is_set():
                    break  # keep the socket: the goodbye below frees our slot at the relay at once
                sock.close(linger=0)
                sock = None
        finally:
            if sock is not None:
                try:
                    sock.send_multipart(wire.encode(wire.BYE, sender=self.name), zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass
                sock.close(linger=100)
            self.connected.clear()
            self._wake_rx.close(linger=0)
            self._changed()

    def _session(self, sock: zmq.Socket) -> None:
        """One connection: hello until welcomed, then traffic until the relay is lost or we stop."""
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_rx, zmq.POLLIN)
        backoff = self.backoff.initial
        next_hello = started = last_heard = time.monotonic()
        last_ping = last_pull = 0.0
        with self._lock:
            self._sent.clear()
        while not self._stop.is_set() and self.refused is None:
            now = time.monotonic()
            wait = self.heartbeat_s if self.connected.is_set() else max(0.0, max(next_hello, self._retry_at) - now)
            events = dict(poller.poll(int(min(wait, self.heartbeat_s) * 1000) + 1))
            if self._wake_rx in events:
                while True:
                    try:
                        self._wake_rx.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
            if sock in events:
                while True:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    last_heard = time.monotonic()
                    if not self._on_message(sock, frames):
                        self.connected.clear()  # relay restarted: hello again on this socket
                        self._changed()
                        next_hello, backoff = time.monotonic(), self.backoff.initial
                        with self._lock:
                            self._sent.clear()
            now = time.monotonic()
            if not self.connected.is_set():
                if now >= next_hello and now >= self._retry_at:
                    # (holds: it understands a block relay's held and resume, wire protocol 3.2)
                    self._try_send(sock, wire.encode(wire.HELLO, sender=self.name, incarnation=self.incarnation,
                                                     version=self.version, meta=self._hello_meta()))
                    self.stats["hellos"] += 1
                    next_hello, backoff = now + backoff, self.backoff.next(backoff)
                if now - started > self.timeout_s and now - last_heard > self.timeout_s:
                    self.stats["reconnects"] += 1
                    return  # a fresh socket (new TCP connection, new identity at the relay)
                continue
            self._flush(sock)
            if self.pull_s is not None and now - last_pull >= self.pull_s:
                self._pull_weights(sock)
                last_pull = now
            if now - last_ping >= self.heartbeat_s:
                self._try_send(sock, wire.encode(wire.PING, sender=self.name, version=self.version))
                last_ping = now
            if now - last_heard > self.timeout_s:  # relay silent: gone or unreachable
                self.connected.clear()
                self._changed()
                self.stats["reconnects"] += 1
                return

    def _hello_meta(self) -> dict[str, Any]:
        # (holds: it understands a block relay's held and resume, wire protocol 3.2; pull: it fetches weights at its
        # own period and wants no broadcasts, 3.3)
        meta: dict[str, Any] = {"role": self.role, "holds": True}
        if self.role == "worker" and self.pull_s is not None:
            meta["pull"] = True
        return meta

    def _pull_weights(self, sock: zmq.Socket) -> None:
        """Worker with ``pull_s``: ask for the relay's weights if they are newer than the newest held or pending."""
        if self.role != "worker" or not self.connected.is_set():
            return
        if self._try_send(sock, wire.encode(wire.GET_WEIGHTS, sender=self.name, version=self._newest_version(),
                                            meta={"if_newer": True})):
            self.stats["pulls"] += 1

    def _newest_version(self) -> int:
        """Worker: the version of the newest weights it holds or has received and not yet taken."""
        with self._lock:
            pending = self._weights_in.version if self._weights_in is not None else -1
        return max(self.version, pending)

    def _try_send(self, sock: zmq.Socket, frames: list) -> bool:
        try:
            sock.send_multipart(frames, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return False
        self.stats["bytes_out"] += sum(memoryview(f).nbytes for f in frames)
        return True

    def _flush(self, sock: zmq.Socket) -> None:
        with self._lock:
            acks, self._acks = self._acks, []
            refusals, self._refusals = self._refusals, []
            weights = self._weights_out if self._weights_pending else None
            chunks = [] if self._paused_at is not None else [
                (seq, frames) for seq, frames in self._backlog.items() if seq not in self._sent]
            room = self.window - len(self._sent)
        for start, end, refused_end in _ack_batches(acks, refusals):
            meta: dict[str, Any] = {"acks": acks[start:end]}
            if refused_end:
                meta["refusals"] = refusals[:refused_end]
            if not self._try_send(sock, wire.encode(wire.ACK, sender=self.name, meta=meta)):
                with self._lock:
                    self._acks[:0] = acks[start:]
                    self._refusals[:0] = refusals
                break
            refusals = refusals[refused_end:]
        if weights is not None and self._try_send(sock, weights):
            with self._lock:
                if self._weights_out is weights:
                    self._weights_pending = False
        for seq, frames in chunks[:max(0, room)]:
            if not self._try_send(sock, frames):
                break
            with self._lock:
                if seq in self._backlog:
                    self._sent.add(seq)
                    self.stats["sent"] += 1

    def _on_message(self, sock: zmq.Socket, frames: list) -> bool:
        """Handle one message; False when the relay no longer knows us (say hello again)."""
        self.stats["bytes_in"] += sum(len(f) for f in frames)
        try:
            msg = wire.decode(frames, self.max_bytes)
        except wire.WireError:
            self.stats["rejects"] += 1
            return True
        if msg.type == wire.REHELLO:
            return False
        if msg.type == wire.REFUSED:
            reason, retry_after = str(msg.meta.get("reason", "no reason given")), msg.meta.get("retry_after")
            now = time.monotonic()
            if isinstance(retry_after, (int, float)) and 0 <= retry_after <= 600:
                # the slot may belong to a peer that died (e.g. this trainer before a restart): wait
                # once for the relay to drop it; a refusal after that is final
                if self._retry_deadline is None:
                    self._retry_deadline = now + retry_after + 3 * self.heartbeat_s
                    print(f"relayrl: the relay says: {reason}; retrying for {retry_after:.0f} s", file=sys.stderr)
                if now < self._retry_deadline:
                    self._retry_at = now + min(max(retry_after, self.heartbeat_s), self._retry_deadline - now)
                    return True
            self.refused = reason
            return True
        if msg.type == wire.WELCOME:
            self.session, self.relay_version = msg.meta.get("session"), msg.version
            with self._lock:
                self._sent.clear()  # resend everything unacknowledged on this connection
                self._unpause()  # (a relay that held chunks tells a new connection nothing more)
                if self._weights_out is not None:
                    self._weights_pending = True  # a restarted relay needs the current weights
            self._note_trainer(msg.meta)
            if self.pull_s is not None and self.role == "worker" and msg.meta.get("pulls") is not True \
                    and not self._pull_warned:
                self._pull_warned = True
                print(f"relayrl worker {self.name}: the relay at {self.server} predates weight pulls (wire protocol "
                      "3.3): it sends this worker every version the trainer publishes; upgrade the relay for "
                      "net.param_pull_s to save the link", file=sys.stderr, flush=True)
            self.connected.set()  # (no weights request here: the relay pushes its weights after a welcome)
            self._changed()
        elif msg.type == wire.PONG:
            if msg.meta.get("session") != self.session:
                return False
            self.relay_version = msg.version
            self._note_trainer(msg.meta)
            self._want_weights(sock)
        elif msg.type == wire.ACK:
            self._acked(msg)
        elif msg.type == wire.WEIGHTS and self.role == "worker":
            self.stats["weights_in"] += 1
            with self._lock:
                if self._weights_in is None or msg.version >= self._weights_in.version:
                    self._weights_in = msg
                    self._lock.notify_all()
        elif msg.type == wire.SAMPLES and self.role == "trainer":
            with self._lock:
                self._inbox.append(msg)
                self.stats["received"] += 1
                self._lock.notify_all()
        return True

    def _acked(self, msg: wire.Message) -> None:
        if msg.incarnation != self.incarnation:  # another process of this name: its seqs are other chunks
            return
        seqs, dropped = msg.meta.get("seqs", []), msg.meta.get("dropped", [])
        refusals, held = msg.meta.get("refusals", []), msg.meta.get("held", [])
        with self._lock:
            for seq in seqs if isinstance(seqs, list) else []:
                if not isinstance(seq, int):
                    continue
                self._held.discard(seq)
                if self._backlog.pop(seq, None) is not None:
                    self._sent.discard(seq)
                    self.stats["acked"] += 1
                elif seq in self._evicted:  # dropped from the backlog, yet it got through
                    del self._evicted[seq]
                    self.stats["acked"] += 1
            self.stats["relay_drops"] += len(dropped) if isinstance(dropped, list) else 0
            for seq in held if isinstance(held, list) else []:  # the trainer's queue is full: hold, send later
                if isinstance(seq, int) and seq in self._backlog:
                    self._sent.discard(seq)
                    self._held.add(seq)
                    if self._paused_at is None:
                        self._paused_at = time.monotonic()
                        self.stats["pauses"] += 1
            if msg.meta.get("resume") is True:
                self._unpause()
            self._lock.notify_all()
        for item in refusals if isinstance(refusals, list) else []:
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], int)
                    and isinstance(item[1], str) and isinstance(item[2], str)):
                self.stats["rejects"] += 1
                continue
            seq, cause, detail = item[0], _printable(item[1][:wire.MAX_CAUSE]), _printable(item[2][:wire.MAX_DETAIL])
            with self._lock:
                self.stats["chunks_refused"] += 1
                first = cause not in self.chunk_refusals
                self.chunk_refusals[cause] = self.chunk_refusals.get(cause, 0) + 1
            if first:
                print(f"relayrl worker {self.name}: chunk {seq} was refused ({cause}), its samples are not used: "
                      f"{detail} (later refusals of this kind are only counted)", file=sys.stderr, flush=True)

    def _unpause(self) -> None:
        """Send chunks again (the lock held): count the time paused."""
        if self._paused_at is not None:
            self.stats["blocked_s"] += time.monotonic() - self._paused_at
            self._paused_at = None

    def _note_trainer(self, meta: dict) -> None:
        """The relay's word on its trainer (``meta.trainer``: its incarnation, or nil for none)."""
        if "trainer" not in meta:  # a relay of an earlier revision
            return
        run = meta["trainer"]
        run = run if isinstance(run, int) and not isinstance(run, bool) else None
        with self._lock:
            changed = run != self.trainer_run or not self.reports_trainer
            self.trainer_run, self.reports_trainer = run, True
            if changed:
                self._lock.notify_all()

    def _changed(self) -> None:
        """Wake the caller's waits (wait_change): the connection or the relay's trainer changed."""
        with self._lock:
            self._lock.notify_all()

    def _want_weights(self, sock: zmq.Socket) -> None:
        """A worker behind the relay's version (a missed broadcast), or holding weights of another run
        than the trainer's, asks for the current weights (the relay keeps only its trainer's)."""
        if self.role != "worker" or self.relay_version < 0:
            return
        with self._lock:
            other_run = (self._weights_in is None and self.trainer_run is not None
                         and self.weights_run not in (self.trainer_run, 0))
        behind = self.relay_version > self._newest_version() and self.pull_s is None  # (a puller asks at its pace)
        if behind or other_run:
            self._try_send(sock, wire.encode(wire.GET_WEIGHTS, sender=self.name, version=self.version))


def _ack_batches(acks: list[list], refusals: list[list], limit: int = wire.MAX_HEADER_BYTES // 2):
    """(start, end, refusals) for each ACK message: acks[start:end] and the next ``refusals`` of the
    refusal list, with at most about ``limit`` bytes of header each (names are up to 256 characters)."""
    start, refused, total_refused = 0, 0, len(refusals)
    while start < len(acks) or refused < total_refused:
        size, end, count = 0, start, 0
        while refused + count < total_refused and size < limit:
            item = refusals[refused + count]
            size += len(item[0]) + len(item[3]) + len(item[4]) + 40
            count += 1
        while end < len(acks) and size < limit:
            size += len(acks[end][0]) + 24
            end += 1
        yield start, end, count
        start, refused = end, refused + count


def _printable(text: str) -> str:
    """Text from the network as printed to a terminal: no control characters (escape sequences)."""
    return "".join(c if c.isprintable() else "?" for c in text)
