"""Replay shards as local processes (the replay service on the mp backend, runtime/service.py).

Each shard is a process of its own serving ``ReplayShard``'s methods over two pipes: the learner's
``MpShards.call`` sends ``(method, args)`` down one and the shard answers up the other, in order, so
a call's handle is resolved by the next answer that shard sends; the learner waits for answers with
``select.poll`` (no polling loop). Rollout workers insert straight into their shard
(``worker_id % N``) through that shard's ``InsertChannel``, and send the learner only what it counts.
The shard process waits on both its call pipe and its insert channel with one ``select.poll``
and serves calls first.

Both ends of every pipe and channel are processes of this run on this machine, which is the only
reason pickle is acceptable here (as in backends/mp.py); nothing here listens on a network.

An ``InsertChannel`` is bounded (``capacity`` chunks: a worker waits for room, nothing is dropped)
and belongs to the backend, not to a shard process: a shard that dies is started again on the same
channel and the workers never notice. What a shard process took from its channel but had not yet
stored when it died (at most one chunk) is counted in ``lost_chunks``. Two windows are not
recoverable and are stated rather than hidden: a shard killed while reading a chunk (microseconds
per chunk) cuts that channel's stream, and a worker killed while writing one holds the channel's
write lock; both need the run restarted (from its last checkpoint).
"""

from __future__ import annotations

import collections
import select
import signal
import time
from multiprocessing.reduction import ForkingPickler
from typing import Any

from relayrl.envs.subproc import _die_with_parent
from relayrl.errors import RelayRLError
from relayrl.runtime.service import Shards, ShardLost
from relayrl.runtime.shard import ReplayShard, ShardOptions

CHANNEL_CAPACITY = 8  # chunks waiting for one shard before its workers wait


class InsertChannel:
    """Many writers (a shard's workers), one reader (the shard process of the moment), bounded in
    chunks. Inherited by processes at start (its locks cannot be sent later)."""

    def __init__(self, ctx: Any, capacity: int = CHANNEL_CAPACITY):
        self.reader, self._writer = ctx.Pipe(duplex=False)
        self._write_lock = ctx.Lock()
        self._slots = ctx.Semaphore(capacity)
        self.capacity = capacity
        self.counts = ctx.RawArray("q", 2)  # chunks taken by the reader, chunks it finished with

    def put(self, msg: Any, timeout: float) -> bool:
        """Send ``msg`` once there is room; False when there was none within ``timeout``."""
        if not self._slots.acquire(timeout=timeout):
            return False
        data = ForkingPickler.dumps(msg)
        with self._write_lock:
            self._writer.send_bytes(data)
        return True

    def take(self) -> Any:
        """The next chunk (the reader has it ready: its poll said so)."""
        msg = self.reader.recv()
        self.counts[0] += 1
        self._slots.release()
        return msg

    def done(self) -> None:
        self.counts[1] += 1

    def close(self) -> None:
        self.reader.close()
        self._writer.close()


def _shard_main(shard_id: int, options: ShardOptions, snapshot_path: str | None, calls: Any, answers: Any,
                channel: InsertChannel) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle
    shard = ReplayShard(shard_id, options, snapshot_path)
    poller = select.poll()  # kept (connection.wait would build a selector for every message)
    poller.register(calls.fileno(), select.POLLIN)
    reading = True  # the insert channel is polled (not while the rate limiter holds inserts back)
    poller.register(channel.reader.fileno(), select.POLLIN)
    try:
        while True:
            if reading != shard.accepts():  # (a refused shard waits for a sample call to let inserts in)
                reading = not reading
                if reading:
                    poller.register(channel.reader.fileno(), select.POLLIN)
                else:
                    poller.unregister(channel.reader.fileno())
            ready = {fd for fd, _ in poller.poll()}
            if calls.fileno() in ready:  # calls first: the learner waits on them
                method, args = calls.recv()
                try:
                    answers.send(("ok", getattr(shard, method)(*args)))
                except Exception as exc:  # a bug, not a lost shard: the learner raises it
                    answers.send(("error", f"{type(exc).__name__}: {exc}"))
                if method == "stop":
                    return
            if channel.reader.fileno() in ready:
                msg = channel.take()
                shard.insert(msg)
                channel.done()
    except (EOFError, OSError, KeyboardInterrupt):
        pass


class _Call:
    """A call's handle: resolved when its shard's answer arrives (answers come in call order)."""

    __slots__ = ("shard", "done", "value", "error")

    def __init__(self, shard: int):
        self.shard, self.done, self.value, self.error = shard, False, None, None

    def resolve(self, value: Any = None, error: Exception | None = None) -> None:
        self.done, self.value, self.error = True, value, error


class _Process:
    def __init__(self, process: Any, calls: Any, answers: Any):
        self.process, self.calls_out, self.answers = process, calls, answers
        self.pending: collections.deque[_Call] = collections.deque()  # sent, not yet answered
        # one poll object, kept: Connection.poll builds a selector per call (~50 us, on every request)
        self.poller = select.poll()
        self.poller.register(answers.fileno(), select.POLLIN)

    def answered(self) -> bool:
        """An answer (or the end of the pipe: the process died) is waiting to be read."""
        return bool(self.poller.poll(0))


class MpShards(Shards):
    """Replay shards as processes started from ``ctx`` (the mp backend's fork server)."""

    def __init__(self, options: ShardOptions, num_shards: int, ctx: Any, capacity: int = CHANNEL_CAPACITY):
        self.options, self.num_shards, self._ctx = options, num_shards, ctx
        if options.samples_per_insert is not None:  # the rate limiter: chunks in a channel count as inserted for
            capacity = 1                            # the learner (workers report them), so at most one waits
        self.channels = [InsertChannel(ctx, capacity) for _ in range(num_shards)]
        self._procs: list[_Process | None] = [None] * num_shards
        self.lost_chunks = 0

    def channel_of(self, worker_id: int) -> InsertChannel:
        return self.channels[worker_id % self.num_shards]

    def start(self, k: int, snapshot_path: str | None) -> None:
        calls_in, calls_out = self._ctx.Pipe(duplex=False)  # two pipes: cheaper than one socket pair
        answers_in, answers_out = self._ctx.Pipe(duplex=False)
        process = self._ctx.Process(target=_shard_main, name=f"relayrl-shard-{k}", daemon=True,
                                    args=(k, self.options, snapshot_path, calls_in, answers_out, self.channels[k]))
        process.start()
        calls_in.close()
        answers_out.close()
        self._procs[k] = _Process(process, calls_out, answers_in)

    def pids(self) -> dict[int, int]:
        return {k: p.process.pid for k, p in enumerate(self._procs) if p is not None}

    def call(self, k: int, method: str, *args: Any) -> _Call:
        handle = _Call(k)
        proc = self._procs[k]
        if proc is None:
            handle.resolve(error=ShardLost(f"replay shard {k} is not running"))
            return handle
        self._read_answers(k, block=False)  # room in the answer pipe, so the shard never blocks on it
        try:
            proc.calls_out.send((method, args))
        except OSError:  # the process is gone (its answers, if any, were read just above)
            proc.process.join(timeout=1.0)
            self._lost(k, self._exit(k))
            handle.resolve(error=ShardLost(f"replay shard {k} died ({self._exit(k)})"))
            return handle
        proc.pending.append(handle)
        return handle

    def _exit(self, k: int) -> str:
        proc = self._procs[k]
        code = None if proc is None else proc.process.exitcode
        return "killed" if code is not None and code < 0 else f"exit code {code}"

    def _lost(self, k: int, reason: str) -> None:
        proc = self._procs[k]
        while proc.pending:
            proc.pending.popleft().resolve(error=ShardLost(f"replay shard {k} died ({reason})"))

    def _read_answers(self, k: int, block: bool) -> None:
        """Resolve shard k's calls whose answers have arrived (waiting for one if ``block``)."""
        proc = self._procs[k]
        try:
            while proc.pending and (block or proc.answered()):
                status, value = proc.answers.recv()
                call = proc.pending.popleft()
                call.resolve(value if status == "ok" else None,
                             None if status == "ok" else RelayRLError(f"replay shard {k} failed: {value}"))
                block = False
        except (EOFError, OSError):
            proc.process.join(timeout=1.0)
            self._lost(k, self._exit(k))

    def ready(self, handles: list[Any], timeout: float) -> list[Any]:
        deadline = time.monotonic() + timeout
        while True:
            for k in {h.shard for h in handles if not h.done and self._procs[h.shard] is not None}:
                self._read_answers(k, block=False)
            done = [h for h in handles if h.done]
            left = deadline - time.monotonic()
            if done or left <= 0:
                return done
            waiting = {self._procs[h.shard].answers.fileno(): h.shard for h in handles
                       if self._procs[h.shard] is not None}
            poller = select.poll()
            for fd in waiting:
                poller.register(fd, select.POLLIN)
            for fd, _ in poller.poll(max(1, int(left * 1000))):
                self._read_answers(waiting[fd], block=True)

    def get(self, handle: _Call) -> Any:
        if not handle.done:
            raise RuntimeError("get() of a call that has not been answered yet (use ready() first)")
        if handle.error is not None:
            raise handle.error
        return handle.value

    def kill(self, k: int) -> None:
        proc = self._procs[k]
        if proc is None:
            return
        if proc.process.is_alive():
            proc.process.kill()
        proc.process.join(timeout=5.0)
        channel = self.channels[k]
        self.lost_chunks += max(0, int(channel.counts[0] - channel.counts[1]))
        channel.counts[1] = channel.counts[0]
        self._lost(k, "killed")
        proc.calls_out.close()
        proc.answers.close()
        self._procs[k] = None

    def close(self) -> None:
        """Kill whatever shard is left and release the channels (after ``ReplayService.stop``)."""
        for k in range(self.num_shards):
            self.kill(k)
        for channel in self.channels:
            channel.close()
