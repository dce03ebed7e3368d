"""Rollout workers as local processes.

Weights go through one shared-memory ``WeightBoard`` per machine (one write per broadcast, however
many workers); chunks come back through a bounded ``ChunkChannel`` per worker (backends/channel.py:
``capacity`` chunks on their way, then the worker waits: backpressure, nothing dropped); commands
(collect, stop) go down a pipe per worker. The channels pickle, which is acceptable only because
both ends are processes of this run on this machine; nothing here listens on a network. Workers fork
from a fork server that has already imported what they need (``_forkserver.py``), so they start in
milliseconds, not seconds.

A worker that dies (killed, crashed, or raised, at any point of sending a chunk: its channel is its
own, and the learner never blocks reading it) or hangs (no progress for ``worker_timeout`` seconds
while it owes a chunk: it stamps a shared clock when it starts a chunk and while it waits to hand
one over) is restarted with backoff and a new channel, up to ``max_restarts`` times in total; the
whole chunks it sent before it died are kept, and an on-policy worker that died with a chunk
outstanding is asked again. Workers ignore SIGINT and SIGTERM: stopping is the learner's (a signal
to the whole process group reaches them too), and they die with it if it is killed.

With a replay service (``replay_shards: N`` > 0, runtime/service.py) the shards are processes too
(backends/mp_shards.py), started before the workers: each worker puts its chunk's transitions on
its shard's bounded insert channel (``worker_id % N``) and only the rest (env steps, episodes) on the
learner's queue. ``close`` stops the workers, then sends the shards ``Stop`` with a deadline and
kills what is left.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import select
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from relayrl.algos import get_algo
from relayrl.config import config_model
from relayrl.envs.shm import AttachedArrays, SharedArrays
from relayrl.envs.subproc import _die_with_parent
from relayrl.errors import RelayRLError
from relayrl.options import RunConfig
from relayrl.runtime.backends import WORKER_SEED_STRIDE, ManagedBackend
from relayrl.runtime.backends.channel import ChunkChannel, ChunkWriter
from relayrl.runtime.backends.mp_shards import InsertChannel, MpShards
from relayrl.runtime.messages import InsertTransitions, LoadParams, WorkerFailed
from relayrl.runtime.service import ReplayService
from relayrl.runtime.shard import ShardOptions
from relayrl.runtime.weights import WeightBoard, board_layout, flatten, unflatten

PUT_POLL_S = 0.2  # a blocked worker checks for stop this often
STOP_DEADLINE_S = 5.0
CHUNKS_PER_WORKER = 4  # on their way to the learner before a worker waits


def _hand_over(put: Callable[[], bool], beat: np.ndarray, conn: Any, kept: Any) -> tuple[bool, Any]:
    """Retry ``put`` until there is room (backpressure: the worker waits, nothing is dropped), stamping
    progress meanwhile; returns (stop came, the newest other command, kept for the next loop)."""
    while not put():
        beat[0] = time.monotonic()  # alive, waiting for the learner (or the shard)
        while conn.poll():
            kept = conn.recv()
            if kept[0] == "stop":
                return True, kept
    return False, kept


def _worker_main(worker_id: int, beat_index: int, config_data: dict, seed: int, board_name: str, layout: list,
                 kinds: dict[str, str], out: ChunkWriter, conn: Any, on_request: bool, beats: tuple[str, list],
                 insert: InsertChannel | None = None) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C and SIGTERM are the learner's to handle (a
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # signal to the process group reaches every worker too)
    import torch

    from relayrl.runtime.rollout_worker import RolloutWorker

    torch.set_num_threads(1)
    board = WeightBoard.attach(board_name, layout)
    clock = AttachedArrays(*beats)
    beat = clock.arrays["beat"][beat_index:beat_index + 1]  # progress stamps, read by the learner
    worker = None
    try:
        config = config_model(config_data["algo"]).model_validate(config_data)
        worker = RolloutWorker(worker_id, config, seed, env_threads=1)  # (one process per core, as torch's 1 thread)
        version, kept = -1, None
        while True:
            if kept is not None:  # a command that came while the last chunk waited for room
                command, kept = kept, None
            elif on_request or board.version < 0:
                command = conn.recv() if on_request else (conn.recv() if conn.poll(0.05) else ("wait",))
            else:
                command = conn.recv() if conn.poll() else ("go",)
            if command[0] == "stop":
                break
            if command[0] == "wait":
                continue
            beat[0] = time.monotonic()
            while command[0] == "collect" and board.version < command[1]:  # the weights may trail the request
                time.sleep(0.001)
            if board.version != version:
                arrays, version, env_steps = board.read()
                worker.load(LoadParams(version, unflatten(arrays, kinds)), env_steps)
            msg = worker.collect()
            if insert is not None and msg.batch:  # transitions to the shard; the learner counts the rest
                full = msg
                stopped, kept = _hand_over(lambda: insert.put(full, PUT_POLL_S), beat, conn, kept)
                if stopped:
                    return
                msg = dataclasses.replace(msg, batch={}, stored_rows=len(next(iter(msg.batch.values()))))
            stopped, kept = _hand_over(lambda: out.put(msg, PUT_POLL_S), beat, conn, kept)
            if stopped:
                return
    except (EOFError, OSError, KeyboardInterrupt):
        pass
    except BaseException as exc:  # report, then exit: the learner decides whether to restart
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        mistake = exc if isinstance(exc, RelayRLError) and exc.exit_code == 2 else None  # no restart fixes it
        try:
            if out.put(WorkerFailed(worker_id, last, mistake), 1.0):
                out.flush(1.0)
        except Exception:
            pass
    finally:
        if worker is not None:
            worker.close()
        board.close()
        clock.close()


def process_context(start_method: str = "forkserver", shards: bool = False) -> Any:
    """The multiprocessing context workers and shards start from: with "forkserver", a fork server that
    has imported once what every worker needs (see _forkserver.py), and with ``shards`` what every
    replay shard needs (_forkserver_shards.py). The preload counts only before the server first starts."""
    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload(["relayrl.runtime.backends.mp", "relayrl.runtime.backends.mp_shards",
                                    "relayrl.runtime.backends._forkserver"]
                                   + (["relayrl.runtime.backends._forkserver_shards"] if shards else []))
    return ctx


def _beats_layout(num_workers: int) -> list:
    return [("beat", (num_workers,), np.dtype(np.float64))]


@dataclass
class _Proc:
    index: int  # position on this machine; ``worker_ids[index]`` is the run-wide worker id
    process: Any
    conn: Any
    channel: ChunkChannel
    pending: int | None = None  # on-policy: the version this worker was asked to collect with


class MpBackend(ManagedBackend):
    """``worker_ids``: the run-wide ids of the workers this machine hosts (default 0..num_workers-1;
    a Ray node proxy hosts a share of a larger run). ``capacity``: chunks on their way from one worker."""

    serves_replay = True  # replay shards as local processes
    limits_inserts = True  # a shard under the rate limiter stops reading its channel (backends/mp_shards.py)

    def __init__(self, config: RunConfig, num_workers: int, *, worker_ids: list[int] | None = None,
                 capacity: int = CHUNKS_PER_WORKER, max_restarts: int = 10, start_method: str = "forkserver"):
        self.worker_ids = list(worker_ids) if worker_ids is not None else list(range(num_workers))
        self._index = {w: k for k, w in enumerate(self.worker_ids)}
        num_workers = len(self.worker_ids)
        self.config, self.num_workers, self.max_restarts = config, num_workers, max_restarts
        self.lock = threading.RLock()  # a Ray node proxy calls publish/request and receive from two threads
        self.worker_timeout = config.worker_timeout
        self._beats: SharedArrays | None = None
        self._ctx = process_context(start_method)
        self._start_method = start_method
        self.capacity = capacity
        self.closed = False
        self._poller = select.poll()  # every live channel's reading end (one poll for all: no call per worker)
        self._watched: dict[int, _Proc] = {}  # file descriptor -> its worker
        self._procs: list[_Proc] = []
        self._board: WeightBoard | None = None
        self._kinds: dict[str, str] = {}
        self._seed = 0
        self._requested: int | None = None
        self.restarts = 0
        self.failures: list[str] = []
        self.service: ReplayService | None = None  # the replay shards, when the learner asked for them
        self._shards: MpShards | None = None

    def replay_service(self, options: ShardOptions, num_shards: int, **service_options: Any) -> ReplayService:
        """Replay shards as processes, which the workers insert into (started by ``start``)."""
        self._ctx = process_context(self._start_method, shards=True)  # (nothing has started yet)
        self._shards = MpShards(options, num_shards, self._ctx)
        self.service = ReplayService(self._shards, **service_options)
        self.service.on_restart = self._shard_restarted
        return self.service

    def _shard_restarted(self, k: int) -> None:
        # the workers keep their channel (it outlived the process); what the dead one took unstored is lost
        self.service.lost_chunks = self._shards.lost_chunks

    def start(self, seed: int) -> None:
        self._seed = seed  # processes start at the first publish, when the weights' layout is known
        if self.service is not None:  # the shards come first, and answer a heartbeat before any worker starts
            self.service.start()

    def _spawn(self, index: int, restart: int = 0) -> _Proc:
        parent, child = self._ctx.Pipe(duplex=True)
        channel = ChunkChannel(self._ctx, self.capacity)  # a new one per process: a dead writer's stays with it
        worker_id = self.worker_ids[index]
        seed = self._seed + WORKER_SEED_STRIDE * worker_id + 7919 * restart
        self._beats.arrays["beat"][index] = time.monotonic()  # starting up counts as progress
        process = self._ctx.Process(
            target=_worker_main, name=f"relayrl-worker-{worker_id}", daemon=True,
            args=(worker_id, index, self.config.model_dump(mode="json"), seed, self._board.name, self._layout,
                  self._kinds, channel.writer, child, self._on_request,
                  (self._beats.name, _beats_layout(self.num_workers)),
                  None if self._shards is None else self._shards.channel_of(worker_id)))
        process.start()
        child.close()
        channel.started()
        proc = _Proc(index, process, parent, channel)
        self._poller.register(channel.fd, select.POLLIN)
        self._watched[channel.fd] = proc
        return proc

    def _unwatch(self, proc: _Proc) -> None:
        if self._watched.pop(proc.channel.fd, None) is not None:
            self._poller.unregister(proc.channel.fd)

    def publish(self, params: LoadParams, env_steps: int) -> None:
        self.publish_flat(*flatten(params.weights), params.version, env_steps)

    def publish_flat(self, arrays: dict, kinds: dict[str, str], version: int, env_steps: int) -> None:
        with self.lock:
            if self._board is None:
                self._board, self._kinds = WeightBoard.create(arrays), kinds
                self._beats = SharedArrays(_beats_layout(self.num_workers))
                self._on_request = get_algo(self.config.algo).collect_on_request
                self._layout = board_layout(arrays)
                self._procs = [self._spawn(k) for k in range(self.num_workers)]
                if self._requested is not None:  # a request that came before the workers existed
                    self.request(self._requested)
            self._board.write(arrays, version, env_steps)

    def request(self, version: int) -> None:
        with self.lock:
            self._requested = version
            for proc in self._procs:
                proc.pending = version
                try:
                    proc.conn.send(("collect", version))
                except OSError:  # the worker just died: its restart re-sends the pending request
                    pass

    @property
    def started(self) -> bool:
        return bool(self._procs)

    def pids(self) -> dict[int, int]:
        """Run-wide worker id -> process id."""
        return {self.worker_ids[p.index]: p.process.pid for p in self._procs}

    def shard_pids(self) -> dict[int, int]:
        """Replay shard -> process id (empty without a replay service)."""
        return {} if self._shards is None else self._shards.pids()

    def receive(self, timeout: float = 0.0) -> list[InsertTransitions]:
        out: list[InsertTransitions] = []
        deadline = time.monotonic() + timeout
        while not self.closed:  # (a Ray proxy closed while a poll was in flight)
            before = len(out)
            for index, msg in self._take():
                if isinstance(msg, WorkerFailed):
                    if msg.mistake is not None:  # the user's mistake: no restart fixes it
                        raise msg.mistake
                    self._restart(index, msg.reason)
                else:
                    self._arrived(index, msg, out)
            for index, msg in self._check_workers():  # a dead worker's last whole chunks, if any
                self._arrived(index, msg, out)
            left = deadline - time.monotonic()
            if out or left <= 0:
                return out
            if len(out) == before:
                self._wait(min(0.2, left))
        return out

    def _arrived(self, index: int, msg: InsertTransitions, out: list[InsertTransitions]) -> None:
        proc = self._procs[index]
        if proc.pending is not None and proc.pending == msg.version:
            proc.pending = None
        out.append(msg)

    def _take(self) -> list[tuple[int, Any]]:
        """Every whole message that has arrived, from the channels that have bytes; never waits."""
        out = []
        with self.lock:  # (a Ray node proxy may be closing this backend meanwhile: one reader at a time)
            for fd, _ in self._poller.poll(0) if self._watched and not self.closed else ():
                proc = self._watched.get(fd)
                if proc is not None:
                    out += [(proc.index, msg) for msg in proc.channel.take()]
                    if proc.channel.ended:  # (its worker is gone: the end of the pipe would wake every poll)
                        self._unwatch(proc)
        return out

    def _wait(self, seconds: float) -> None:
        """Until some channel has bytes, or ``seconds`` pass."""
        if self._watched:
            self._poller.poll(max(1, int(seconds * 1000)))
        else:  # nothing to wait on (before the first publish)
            time.sleep(seconds)

    def queue_depth(self) -> int:
        """Chunks sent whole and not yet taken by the learner."""
        return sum(proc.channel.depth() for proc in self._procs)

    def _check_workers(self) -> list[tuple[int, InsertTransitions]]:
        """Restart dead and hung workers; return the whole chunks a dead one sent before it died."""
        now, last = time.monotonic(), []
        for proc in list(self._procs) if not self.closed else ():  # (close kills them: a Ray proxy polls meanwhile)
            if not proc.process.is_alive():
                reason = f"exit code {proc.process.exitcode}"
                for msg in proc.channel.take():  # what it sent whole before it died (what follows is torn)
                    if isinstance(msg, WorkerFailed):
                        reason = msg.reason
                        continue
                    if proc.pending is not None and proc.pending == msg.version:
                        proc.pending = None  # (delivered: its replacement is not asked again)
                    last.append((proc.index, msg))
                self._restart(proc.index, reason)
            elif (proc.pending is not None or not self._on_request) and \
                    now - self._beats.arrays["beat"][proc.index] > self.worker_timeout:
                proc.process.kill()
                self._restart(proc.index, f"no progress for {self.worker_timeout:g} s (a hung env step?); "
                                              "raise worker_timeout if a chunk legitimately takes longer")
        return last

    def _reap(self, proc: Any) -> None:
        """Kill ``proc``'s worker if it still runs, and close its pipe and chunk channel."""
        if proc.process.is_alive():
            proc.process.kill()
        proc.process.join(timeout=1.0)
        proc.conn.close()
        self._unwatch(proc)
        proc.channel.close()

    def _restart(self, index: int, reason: str) -> None:
        with self.lock:
            if self.closed:
                return
            worker_id, old = self.worker_ids[index], self._procs[index]
            old.process.join(timeout=1.0)
            self._reap(old)
            self.failures.append(f"worker {worker_id}: {reason}")
            if self.restarts >= self.max_restarts:
                raise RelayRLError(f"rollout workers failed {self.restarts + 1} times (last: worker {worker_id}, "
                                   f"{reason}); fix the env or raise max_restarts")
            time.sleep(min(2.0, 0.05 * 2 ** min(self.restarts, 6)))  # backoff
            self.restarts += 1
            new = self._spawn(index, restart=self.restarts)
            if old.pending is not None:
                new.pending = old.pending
                new.conn.send(("collect", old.pending))
            self._procs[index] = new

    def close(self) -> None:
        with self.lock:
            self.closed = True
            for proc in self._procs:
                try:
                    proc.conn.send(("stop",))
                except (OSError, BrokenPipeError):
                    pass
            deadline = time.monotonic() + STOP_DEADLINE_S
            for proc in self._procs:
                while proc.process.is_alive() and time.monotonic() < deadline:
                    proc.channel.take()  # (read and dropped: room for a worker that waits to hand a chunk over)
                    proc.process.join(timeout=0.05)
                self._reap(proc)
            self._procs = []
        if self.service is not None:  # after the workers, so their last inserts land; Stop, then kill
            self.service.stop(time.time() + STOP_DEADLINE_S)
            self._shards.close()
            self.service = None
        if self._board is not None:
            self._board.close()
            self._board = None
        if self._beats is not None:
            self._beats.close()
            self._beats = None
