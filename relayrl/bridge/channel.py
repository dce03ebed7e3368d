"""The shared files of one bridge channel and the turn-taking over them (spec §1, §2, §4, §6, §7).

Both sides use ``Channel``: the trainer ``create``s it, the simulator ``attach``es. The owner of the
turn writes the body and calls ``hand_over``; the other side blocks in ``wait_turn`` (a short spin,
then ``poll`` on a FIFO doorbell, so an idle side costs no CPU) and notices a peer that closed, died
or went silent. A side that holds the turn on purpose for long keeps its peer waiting with
``keep_alive()`` (§4.1); the trainer does so from a ``KeepAlive`` timer thread, always.
"""

from __future__ import annotations

import errno
import math
import mmap
import os
import secrets
import select
import struct
import threading
import time
import weakref
from pathlib import Path
from typing import Callable

import numpy as np

from relayrl.bridge import layout as L
from relayrl.bridge.errors import (BridgeClosed, BridgeError, BridgeTimeout, PeerDied, VersionMismatch,
                                   version_mismatch)
from relayrl.bridge.files import (bridge_dir, create_mapped, open_fifo, pid_alive, release, remove_stale,
                                  unlink_channel)

EDITOR_NAME = "editor"
POLL_SLICE_S = 0.1
SPIN_MIN_S = 20e-6
KEEP_ALIVE_MAX_PERIOD_S = 1.0  # the trainer bumps at least this often, and at least every peer timeout / 4
KEEP_ALIVE_MIN_PERIOD_S = 0.005


def spin_budget(wait_avg_s: float, spin_max_s: float) -> float:
    """How long to spin before sleeping in ``poll()`` (§4): twice the recent mean wait, at least
    SPIN_MIN_S (a fast peer must not pay a wake-up), and only SPIN_MIN_S for a peer that usually takes
    longer than ``spin_max_s`` (do not burn a core on a slow one). Never more than ``spin_max_s``:
    ``spin_us=0`` means no spin at all, for a machine with no core to spare."""
    wanted = SPIN_MIN_S if wait_avg_s > spin_max_s else max(2 * wait_avg_s, SPIN_MIN_S)
    return max(0.0, min(wanted, spin_max_s))


class Channel:
    """One side's handle on a channel. Use ``Channel.create`` (trainer) or ``Channel.attach`` (simulator)."""

    def __init__(self, header_path: Path, role: str, timeout_s: float, spin_us: float):
        self.header_path, self.role = Path(header_path), role
        self.timeout_s, self.spin_max_s = timeout_s, spin_us * 1e-6
        self.wait_avg_s = 0.0  # running mean of recent waits: sets the spin budget
        self.trainer = role == "trainer"
        self.header: mmap.mmap | None = None
        self.body: mmap.mmap | None = None
        self.generation = 0
        self.side = self.rl = 0
        self.owned = 1 if self.trainer else 0  # the turn value at which the memory is ours
        self.bell_in = self.bell_out = -1  # our doorbell (read) and the peer's (write)
        self.handshaken = False
        self.peer_alive: Callable[[], bool] | None = None  # overrides the pid check (a launched child)
        self.closed = False
        self._turn: np.ndarray | None = None
        self._alive_out: np.ndarray | None = None  # our keep-alive counter (§4.1)
        self._alive_in: np.ndarray | None = None  # the peer's
        self._keep_alive: KeepAlive | None = None

    # ---- paths
    def path(self, suffix: str) -> Path:
        return self.header_path.with_name(self.header_path.name + suffix)

    def body_path(self, generation: int) -> Path:
        return self.path(f".{generation}")

    # ---- creation (trainer) and attachment (simulator)
    @classmethod
    def create(cls, directory: str | os.PathLike | None = None, *, editor: bool = False, timeout_s: float = 60.0,
               spin_us: float = 500.0) -> "Channel":
        folder = bridge_dir(directory)
        remove_stale(folder)
        name = EDITOR_NAME if editor else secrets.token_hex(16)
        self = cls(folder / name, "trainer", timeout_s, spin_us)
        self.unlink()  # a stale editor channel
        for suffix in (".ts", ".st"):
            os.mkfifo(self.path(suffix), 0o600)
        self.generation, self.side, self.rl = 1, L.INITIAL_SIDE, L.INITIAL_RL
        self.body = create_mapped(self.body_path(1), self.side + self.rl)
        tmp = self.path(".tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, L.new_header(os.getpid(), timeout_s))
        finally:
            os.close(fd)
        # our doorbell's read end before the header appears (§4): a simulator that attaches at once opens
        # its write end non-blocking, which fails (ENXIO) while nobody reads
        self.bell_in = open_fifo(self.path(".st"), os.O_RDONLY)
        os.rename(tmp, self.header_path)
        self._map_header()
        # the trainer is idle on purpose whenever it holds the turn (learning, evaluating on another
        # channel): it keeps its simulator from timing out for as long as its process runs (§4.1)
        self._keep_alive = KeepAlive(self)
        return self

    @classmethod
    def attach(cls, header_path: str | os.PathLike, *, timeout_s: float = 60.0, spin_us: float = 500.0) -> "Channel":
        """The simulator's handshake up to its first hand-over (§5, steps 1 to 8, in that order)."""
        self = cls(Path(header_path), "simulator", timeout_s, spin_us)
        deadline = time.monotonic() + timeout_s if timeout_s > 0 else math.inf
        while not self.header_path.exists():  # attach mode: the trainer may come later
            if time.monotonic() > deadline:
                raise BridgeTimeout(f"no bridge channel at {self.header_path} after {timeout_s:g} s: start the trainer "
                                    "first, or pass the --memory-path it printed")
            time.sleep(0.05)
        try:
            self._map_header()
        except (OSError, ValueError) as exc:
            raise BridgeError(f"cannot map the bridge header {self.header_path}: {exc}") from None
        magic = bytes(self.header[0:8])
        if magic != L.MAGIC:
            self._unmap_header()  # not a channel: write nothing into it
            raise BridgeError(f"{self.header_path} is not a relayrl bridge header (magic {magic!r}, expected "
                              f"{L.MAGIC!r}): pass the --memory-path the trainer gave")
        if self.simulator_version[0] != 0 or self.turn != 0:
            # another simulator's channel: writing our pid or version (or closing it) would break its run
            pid = struct.unpack_from("<i", self.header, L.OFF_SIM_PID)[0]
            turn = self.turn
            self._unmap_header()
            raise BridgeError(f"bridge channel {self.header_path} is already attached (simulator pid {pid}, turn "
                              f"{turn}): one simulator per channel; start another trainer for this simulator")
        reason = self.header[L.OFF_TRAINER_CLOSED]
        if reason:  # the trainer has stopped: nothing to attach to, and nothing to write
            self._unmap_header()
            raise BridgeClosed(f"the trainer of {self.header_path} already closed the channel "
                               f"({L.REASONS.get(reason, f'reason {reason}')}): start the trainer again", reason)
        # only fields every major version shares (§2) until the majors are known to match (§5, step 5)
        struct.pack_into("<HH", self.header, L.OFF_SIM_VERSION, *L.VERSION)
        struct.pack_into("<i", self.header, L.OFF_SIM_PID, os.getpid())
        trainer = self.trainer_version
        if trainer[0] != L.VERSION[0]:  # before anything else of the header is read: its layout is the trainer's
            self.close(L.VERSION_MISMATCH, hand_over=True)
            raise VersionMismatch(f"the trainer speaks bridge protocol {trainer[0]}.{trainer[1]}, this simulator "
                                  f"{L.VERSION[0]}.{L.VERSION[1]}: use relayrl and a simulator SDK of the same "
                                  "major version")
        struct.pack_into("<I", self.header, L.OFF_SIM_TIMEOUT, L.timeout_ms(timeout_s))
        self.sync_body()  # a corrupt header or body closes with reason 4, no hand-over
        self.bell_in = open_fifo(self.path(".ts"), os.O_RDONLY)
        try:
            self.bell_out = open_fifo(self.path(".st"), os.O_WRONLY)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise self._fail(f"cannot open the trainer's doorbell {self.path('.st')}: {exc.strerror}") from None
            self.close(L.PEER_DIED)  # the trainer reads it from creation on (§4): nobody reading means it is gone
            raise PeerDied(f"the trainer of {self.header_path} has exited (nobody reads its doorbell): start the "
                           "trainer again") from None
        return self

    def _map_header(self) -> None:
        fd = os.open(self.header_path, os.O_RDWR | os.O_CLOEXEC)
        try:
            if os.fstat(fd).st_size != L.HEADER_SIZE:
                raise ValueError(f"it is {os.fstat(fd).st_size} bytes, a header is {L.HEADER_SIZE}")
            self.header = mmap.mmap(fd, L.HEADER_SIZE)
        finally:
            os.close(fd)
        self._turn = np.frombuffer(self.header, dtype="<u8", count=1, offset=L.OFF_TURN)
        ours, theirs = (L.OFF_TRAINER_ALIVE, L.OFF_SIM_ALIVE)
        if not self.trainer:
            ours, theirs = theirs, ours
        self._alive_out = np.frombuffer(self.header, dtype="<u4", count=1, offset=ours)
        self._alive_in = np.frombuffer(self.header, dtype="<u4", count=1, offset=theirs)

    def _unmap_header(self) -> None:
        self._turn = self._alive_out = self._alive_in = None
        release(self.header)
        self.header = None

    # ---- header fields
    @property
    def turn(self) -> int:
        return int(self._turn[0])

    @property
    def trainer_version(self) -> tuple[int, int]:
        return struct.unpack_from("<HH", self.header, L.OFF_TRAINER_VERSION)

    @property
    def simulator_version(self) -> tuple[int, int]:
        return struct.unpack_from("<HH", self.header, L.OFF_SIM_VERSION)

    def flag(self, offset: int) -> int:
        return self.header[offset]

    def set_flag(self, offset: int, value: int) -> None:
        self.header[offset] = value

    @property
    def peer_closed(self) -> int:
        return self.header[L.OFF_SIM_CLOSED if self.trainer else L.OFF_TRAINER_CLOSED]

    @property
    def peer_pid(self) -> int:
        return struct.unpack_from("<i", self.header, L.OFF_SIM_PID if self.trainer else L.OFF_TRAINER_PID)[0]

    @property
    def peer_timeout_s(self) -> float:
        """How long the peer waits for us (from the header, §2): 0.0 when it has no timeout or did not
        say (a 1.0 peer)."""
        offset = L.OFF_SIM_TIMEOUT if self.trainer else L.OFF_TRAINER_TIMEOUT
        return struct.unpack_from("<I", self.header, offset)[0] / 1000

    # ---- keep-alive (§4.1)
    def keep_alive(self) -> None:
        """Tell the peer we are alive and mean to come back (bump our keep-alive counter): a peer waiting
        for the turn restarts its timeout. Costs one store; call it at least every peer timeout / 4
        while holding the turn for longer than that. Any thread; a no-op once closed."""
        counter = self._alive_out
        if counter is not None:
            counter[0] = (int(counter[0]) + 1) & 0xFFFFFFFF  # one aligned 4-byte store

    def keep_alive_period(self) -> float:
        """How often the keep-alive thread bumps: a quarter of the peer's timeout, at most 1 s."""
        peer = self.peer_timeout_s if self.header is not None else 0.0
        period = KEEP_ALIVE_MAX_PERIOD_S if peer <= 0 else min(peer / 4, KEEP_ALIVE_MAX_PERIOD_S)
        return max(period, KEEP_ALIVE_MIN_PERIOD_S)

    # ---- the body
    def sync_body(self) -> None:
        """Map the header's body generation if it is not the one mapped (§7); callers compare
        ``generation`` with the one their views point into."""
        generation, side, rl = struct.unpack_from("<III", self.header, L.OFF_GENERATION)
        if generation == self.generation and self.body is not None:
            return
        if generation < 1 or side < 8 or rl < 8 or side % 8 or rl % 8:
            raise self._fail(f"corrupt bridge header: generation {generation}, side channel {side} bytes, "
                             f"RL region {rl} bytes")
        path = self.body_path(generation)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise self._fail(f"body generation {generation} ({path}) is missing") from None
        try:
            size = os.fstat(fd).st_size
            if size != side + rl:
                raise self._fail(f"body {path} is {size} bytes, the header says {side} + {rl}")
            body = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        old, old_generation = self.body, self.generation
        self.body, self.generation, self.side, self.rl = body, generation, side, rl
        release(old)
        if old is not None and not self.trainer:
            self.body_path(old_generation).unlink(missing_ok=True)  # normally removed by the grower already

    def grow(self, side: int, rl: int, keep_rl: bool) -> None:
        """Owner only: move to generation G+1 of size ``side + rl``; copy the RL region if ``keep_rl``
        (the trainer, growing its side channel), else the caller rewrites it (the simulator)."""
        generation = self.generation + 1
        body = create_mapped(self.body_path(generation), side + rl)
        if keep_rl:
            body[side:side + self.rl] = self.body[self.side:self.side + self.rl]
        struct.pack_into("<III", self.header, L.OFF_GENERATION, generation, side, rl)
        old, old_generation = self.body, self.generation
        self.body, self.generation, self.side, self.rl = body, generation, side, rl
        self.body_path(old_generation).unlink(missing_ok=True)
        release(old)

    def write_side(self, payload: bytes) -> None:
        """Owner only: this turn's outgoing side-channel records (grows the body when needed)."""
        if len(payload) > self.side - 4:
            self.grow(max(L.grown_side(len(payload)), self.side), self.rl, keep_rl=True)
        struct.pack_into("<I", self.body, 0, len(payload))
        if payload:
            self.body[4:4 + len(payload)] = payload

    def read_side(self) -> bytes:
        (length,) = struct.unpack_from("<I", self.body, 0)
        if length > self.side - 4:
            raise self._fail(f"side channel claims {length} bytes in a region of {self.side}")
        return bytes(self.body[4:4 + length])

    # ---- turns
    def hand_over(self) -> None:
        """Give the memory to the peer: every write of ours is done (§4)."""
        self._turn[0] = self.owned + 1  # an aligned 8-byte store, after every write of the turn
        self.owned += 2
        self._ring()

    def _ring(self) -> None:
        if self.bell_out < 0:
            return
        try:
            os.write(self.bell_out, b"\1")
        except BlockingIOError:
            pass  # the pipe is full: a wake-up is already pending
        except BrokenPipeError:
            pass  # the peer is gone; its wait would have told it, ours will tell us

    def wait_turn(self, timeout_s: float | None = None) -> None:
        """Block until the peer hands the memory over; raise if it closed, died or timed out.

        Spins first, adaptively (``spin_budget``: at most ``spin_us``, none when it is 0), then sleeps
        in ``poll()`` on the doorbell."""
        start = time.perf_counter()
        try:
            return self._wait_turn(timeout_s, start)
        finally:
            self.wait_avg_s = 0.8 * self.wait_avg_s + 0.2 * (time.perf_counter() - start)

    def _wait_turn(self, timeout_s: float | None, start: float) -> None:
        want = self.owned
        turn = self._turn
        if int(turn[0]) == want:
            return self._got_turn()
        spin_end = start + spin_budget(self.wait_avg_s, self.spin_max_s)
        while time.perf_counter() < spin_end:
            if int(turn[0]) == want:
                return self._got_turn()
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        forever = not timeout_s > 0 or math.isinf(timeout_s)
        deadline = math.inf if forever else time.monotonic() + timeout_s
        alive = int(self._alive_in[0])  # the peer's keep-alive counter: a change restarts the timeout (§4.1)
        poller = select.poll()
        poller.register(self.bell_in, select.POLLIN)
        while True:
            self._drain()
            value = int(turn[0])
            if value == want:
                return self._got_turn()
            if value != want - 1:
                raise self._fail(f"turn counter jumped to {value} while waiting for {want}: a turn was lost or "
                                 "doubled")
            if self.peer_closed:
                raise self._peer_closed()
            events = poller.poll(POLL_SLICE_S * 1000)
            if int(turn[0]) == want:
                return self._got_turn()
            if self.peer_closed:
                raise self._peer_closed()
            hung_up = any(ev & select.POLLHUP and not ev & select.POLLIN for _, ev in events)
            if (self.handshaken and hung_up) or not self._alive():
                self.close(L.PEER_DIED)
                raise PeerDied(f"the {self._peer_name} died (its end of the channel closed) while the "
                               f"{self.role} waited: {'restart the trainer' if not self.trainer else 'see its output'}")
            if hung_up:  # before the handshake: a peer that opened and closed again
                time.sleep(POLL_SLICE_S)
            seen = int(self._alive_in[0])
            if seen != alive:  # the peer holds the turn on purpose and is alive
                alive, deadline = seen, (math.inf if forever else time.monotonic() + timeout_s)
            elif time.monotonic() > deadline:
                self.close(L.TIMEOUT)
                raise BridgeTimeout(f"the {self._peer_name} did not answer within {timeout_s:g} s (timeout_s) and sent "
                                    "no keep-alive: it is stuck or too slow; raise the timeout if it is just slow")

    def _got_turn(self) -> None:
        """The memory is ours; a peer that handed it over while closing (e.g. after a version check) stops us."""
        if self.peer_closed:
            raise self._peer_closed()

    @property
    def _peer_name(self) -> str:
        return "simulator" if self.trainer else "trainer"

    def _alive(self) -> bool:
        return self.peer_alive() if self.peer_alive is not None else pid_alive(self.peer_pid)

    def _drain(self) -> None:
        try:
            while os.read(self.bell_in, 4096):
                pass
        except BlockingIOError:
            pass

    def _peer_closed(self) -> BridgeError:
        """The peer closed: we stop too, writing reason 1 (the peer's byte says why, §6)."""
        reason = self.peer_closed
        text = L.REASONS.get(reason, f"reason {reason}")
        if reason == L.VERSION_MISMATCH:
            error = version_mismatch(self.simulator_version, self.trainer_version)
            self.close(L.NORMAL)
            return error
        hint = ""
        if reason == L.TIMEOUT and self.trainer:
            simulator = self.simulator_version
            if simulator < L.KEEP_ALIVE_VERSION:
                hint = (f": it speaks bridge protocol {simulator[0]}.{simulator[1]}, which ignores the trainer's "
                        "keep-alive, so it stops whenever the trainer pauses (learning, evaluating) for longer than "
                        "its timeout; rebuild it with a 1.1 SDK, or raise its timeout above the longest pause")
            else:
                hint = (": this trainer process was stopped or starved for longer than the simulator's timeout "
                        f"({self.peer_timeout_s:g} s); raise the simulator's timeout if the machine is that busy")
        self.close(L.NORMAL)
        return BridgeClosed(f"the {self._peer_name} closed the channel ({text}){hint}", reason)

    def _fail(self, message: str) -> BridgeError:
        self.close(L.PROTOCOL_ERROR)
        return BridgeError(f"bridge channel {self.header_path.name}: {message}")

    # ---- after the handshake turn (trainer; the simulator is handshaken once attached)
    def finish_handshake(self) -> None:
        """Open the doorbell to the simulator and check the protocol version it wrote (§5): a simulator
        of another major version must close, but one that does not is still refused here. Idempotent."""
        if self.handshaken:
            return
        path = self.path(".ts")
        try:
            self.bell_out = open_fifo(path, os.O_WRONLY)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nobody reads the simulator's doorbell: it exited after handing over
                self.close(L.PEER_DIED)
                raise PeerDied(f"the simulator died right after its handshake (no process reads its doorbell "
                               f"{path.name}): see its output") from None
            raise self._fail(f"cannot open the simulator's doorbell {path}: {exc.strerror}") from None
        self.handshaken = True
        simulator, trainer = self.simulator_version, self.trainer_version
        if simulator[0] != L.VERSION[0]:
            self.close(L.VERSION_MISMATCH)  # rings the doorbell just opened: the simulator stops at once
            raise version_mismatch(simulator, trainer)

    # ---- closing
    def close(self, reason: int = L.NORMAL, hand_over: bool = False) -> None:
        """Set our closed byte (sticky), wake the peer, release everything. The trainer removes the
        files; the simulator does too when the trainer is gone (died, timed out or never answered)."""
        if self.closed:
            return
        self.closed = True
        if self._keep_alive is not None:
            self._keep_alive.stop()  # before anything is unmapped
            self._keep_alive = None
        if self.header is not None:
            offset = L.OFF_TRAINER_CLOSED if self.trainer else L.OFF_SIM_CLOSED
            if not self.header[offset]:
                self.header[offset] = reason
            if hand_over:
                self._turn[0] = self.owned + 1
            if self.bell_out >= 0:
                self._ring()
            else:  # at attach, before the FIFOs are open (§5): open the peer's doorbell just for this ring
                self._ring_once()
        for fd in (self.bell_in, self.bell_out):
            if fd >= 0:
                os.close(fd)
        self.bell_in = self.bell_out = -1
        if self.trainer or reason in (L.TIMEOUT, L.PEER_DIED):
            self.unlink()
        release(self.body)
        self.body = None
        self._unmap_header()

    def _ring_once(self) -> None:
        """Ring the peer's doorbell without keeping it open; nobody reading it (ENXIO) or no FIFO means
        there is nobody to wake."""
        try:
            fd = open_fifo(self.path(".st" if not self.trainer else ".ts"), os.O_WRONLY)
        except OSError:
            return
        try:
            os.write(fd, b"\1")
        except OSError:
            pass
        finally:
            os.close(fd)

    def unlink(self) -> None:
        """Remove every file of this channel name (best effort)."""
        unlink_channel(self.header_path)


class KeepAlive:
    """A daemon thread that bumps a channel's keep-alive counter every ``keep_alive_period()`` (a
    quarter of the peer's timeout, at most 1 s), sleeping in between, until ``stop()`` or until the
    channel is closed or garbage-collected. It proves the process alive, not its main thread: a
    stopped process (SIGSTOP, a frozen machine) stops bumping and its peer times out; a dead one is
    seen by its pid and its doorbell's hang-up (§4)."""

    def __init__(self, channel: Channel):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(weakref.ref(channel), self._stop), daemon=True,
                                        name="bridge-keep-alive")
        self._thread.start()

    @staticmethod
    def _run(ref: "weakref.ref[Channel]", stop: threading.Event) -> None:
        period = 0.0
        while not stop.wait(period):
            channel = ref()
            if channel is None or channel.closed:
                return
            channel.keep_alive()
            period = channel.keep_alive_period()
            del channel  # no strong reference while asleep: an unclosed channel can still be collected

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


__all__ = ["Channel", "KeepAlive", "BridgeError", "BridgeClosed", "BridgeTimeout", "PeerDied", "VersionMismatch",
           "bridge_dir", "remove_stale", "spin_budget"]
