"""ChunkChannel: one rollout worker's chunks to the learner, bounded, and safe against a writer that dies.

A ``multiprocessing.Queue`` shared by all workers breaks for good when one of them dies while its feeder
thread is writing (``os._exit``, a segfault in an env, the OOM killer): the torn message stays in the
one pipe every worker writes to, so the learner's next read takes the following bytes as the rest of
it and blocks forever, and the dead writer's lock on the queue is never released.

Here every worker (every incarnation of it) has a pipe of its own, nothing is shared between writers,
and the learner never blocks on a read: its end is non-blocking and it reassembles frames (an 8-byte
length, then the pickled message) from whatever bytes have arrived. A writer killed at any byte leaves
at most one unfinished frame at the end of its own pipe; the learner takes the whole frames before it
and drops the channel with the worker (a restarted worker gets a new one). A writer that is stopped
(SIGSTOP) mid-frame costs the learner nothing either: the hung-worker check kills it.

Bounded: at most ``capacity`` chunks per worker are on their way (a semaphore the writer takes per
chunk and the reader gives back per chunk taken); the writer waits for room, nothing is dropped. The
pickling and writing happen on a feeder thread in the worker, as with ``multiprocessing.Queue``, so a
chunk bigger than the pipe's buffer does not hold the worker's collection up.

Both ends are processes of this run on this machine, the only reason pickle is acceptable here (as in
backends/mp.py); nothing here listens on a network.
"""

from __future__ import annotations

import collections
import os
import pickle
import struct
import threading
from multiprocessing.reduction import ForkingPickler
from typing import Any

HEADER = struct.Struct("!Q")  # the frame's length in bytes
SMALL = 1 << 16


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data):]


class ChunkWriter:
    """The worker's end: ``put(msg, timeout)``; sent to the worker process when it starts."""

    def __init__(self, conn: Any, slots: Any, counts: Any):
        self._conn, self._slots, self._counts = conn, slots, counts
        self._pending: collections.deque[memoryview] = collections.deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._error: OSError | None = None

    def __getstate__(self) -> tuple:
        return self._conn, self._slots, self._counts

    def __setstate__(self, state: tuple) -> None:
        self.__init__(*state)

    def put(self, msg: Any, timeout: float) -> bool:
        """Queue ``msg`` for the learner once there is room; False when there was none within ``timeout``.
        Raises OSError once the learner's end is gone."""
        if self._error is not None:
            raise self._error
        if not self._slots.acquire(timeout=timeout):
            return False
        data = ForkingPickler.dumps(msg)
        with self._cond:
            self._pending.append(data)
            self._cond.notify_all()
        if self._thread is None:
            self._thread = threading.Thread(target=self._feed, name="relayrl-chunk-feeder", daemon=True)
            self._thread.start()
        return True

    def flush(self, timeout: float) -> bool:
        """Wait until every queued chunk is written (True) or ``timeout`` passes (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending or self._error is not None, timeout)

    def _feed(self) -> None:
        fd = self._conn.fileno()
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending)
                data = self._pending[0]
            header = HEADER.pack(len(data))
            try:
                if len(data) < SMALL:  # one write
                    _write_all(fd, memoryview(header + data))
                else:  # two, rather than a copy of a large chunk to put 8 bytes before it
                    _write_all(fd, memoryview(header))
                    _write_all(fd, memoryview(data))
            except OSError as exc:  # the learner closed its end: nobody reads any more
                with self._cond:
                    self._error = exc
                    self._cond.notify_all()
                return
            self._counts[0] += 1  # (only this writer writes this count)
            with self._cond:
                self._pending.popleft()
                self._cond.notify_all()


class ChunkChannel:
    """The learner's end of one worker's channel; ``writer`` is what the worker process gets."""

    def __init__(self, ctx: Any, capacity: int):
        reader, writer_conn = ctx.Pipe(duplex=False)
        self._reader, self._writer_conn = reader, writer_conn
        self._slots = ctx.Semaphore(capacity)
        self.capacity = capacity
        self.counts = ctx.RawArray("q", 2)  # frames written whole, frames taken
        self.writer = ChunkWriter(writer_conn, self._slots, self.counts)
        self.fd = reader.fileno()  # (kept: still known once the channel is closed)
        os.set_blocking(self.fd, False)
        self._head = bytearray(HEADER.size)
        self._body: bytearray | None = None
        self._got = 0  # bytes of the current header or body read so far
        self.ended = False  # the pipe reached its end: no writer is left

    def started(self) -> None:
        """The worker has its copy of the writing end: close ours, so its death ends the pipe."""
        self._writer_conn.close()

    def take(self) -> list[Any]:
        """Every whole message that has arrived, oldest first; never waits. Bytes of an unfinished
        frame are kept for the next call (or dropped with the channel, when their writer died)."""
        out: list[Any] = []
        fd = self.fd
        while not self.ended:
            buf = self._head if self._body is None else self._body
            try:
                n = os.readv(fd, [memoryview(buf)[self._got:]])
            except BlockingIOError:
                break
            if n == 0:
                self.ended = True
                break
            self._got += n
            if self._got < len(buf):
                continue
            self._got = 0
            if self._body is None:
                self._body = bytearray(HEADER.unpack(self._head)[0])
                continue  # (a frame is never empty: a pickle has at least one byte)
            out.append(pickle.loads(self._body))
            self._body = None
            self.counts[1] += 1
            self._slots.release()
        return out

    @property
    def unfinished(self) -> int:
        """Bytes of a frame that has not arrived whole (a dead writer's torn chunk, at its end)."""
        return self._got if self._body is None else HEADER.size + self._got

    def depth(self) -> int:
        """Chunks written whole and not yet taken."""
        return max(0, int(self.counts[0] - self.counts[1]))

    def close(self) -> None:
        self.ended = True  # (its descriptor may be another file's from now on: never read again)
        self._reader.close()
        self._writer_conn.close()
