"""Simulator bridge (issue 7): round-trip time of one step through the shared-memory bridge, against the
same exchange over loopback TCP, over ZeroMQ IPC, and a plain in-process copy; and the CPU an idle side
burns while it waits.

Payload per step, for n agents: the simulator sends agent ids int64 [n], rewards float32 [n] and one
observation float32 [n, 64] (268 B per agent); the trainer answers with continuous actions float32
[n, 4] (16 B per agent). One round trip = the simulator writes its decisions, the trainer reads them
and writes the actions, the simulator reads the actions. The time is measured on the trainer, over
many consecutive steps. Every turn the simulator stamps obs[0, 0] = t and the trainer answers with
action[0, 0] = t; both sides check the stamp, so each step really crossed in both directions.

- bridge: the trainer is ``relayrl.bridge.BridgeEnv`` (defaults: an adaptive spin of at most
  ``spin_us=500``; variants capped at ``spin_us=50`` and with no spin, ``spin_us=0``): ``get_steps`` (zero-copy views into the shared memory), reads
  obs[0, 0] and obs[n-1, 63] (the observations are not copied: that is the point), ``set_actions``
  (copies the [n, 4] actions into the shared memory), ``step``. The simulator is either the C SDK
  (``relayrl/bridge/c/examples/bench_sim.c``: one bulk ``rrb_request_decisions`` call, one memcpy of
  its prepared [n, 64] array into the shared memory, ``rrb_step``, a memcpy of the actions out) or
  the Python ``World`` bulk API (``set_decisions`` then ``step``, which copies the prepared arrays
  into the shared memory; ``action_arrays`` and a copy of the actions out).
- TCP: 127.0.0.1, TCP_NODELAY on both ends. The simulator sends ids, rewards and obs with one
  ``sendmsg`` from its prepared arrays; the trainer ``recv_into``s a preallocated buffer
  (one copy, which a socket cannot avoid) viewed as numpy arrays, reads the same two values and
  ``sendall``s the actions; the simulator receives them into its action array. Simulator in Python,
  and in C (``bench_sim --tcp PORT``) for parity with the C bridge simulator.
- ZeroMQ: pyzmq PAIR sockets over ``ipc://``. The simulator sends the three arrays as one multipart
  message with ``copy=False`` (pyzmq copies frames below its 64 KiB copy threshold itself); the trainer
  receives (``copy=False`` when the observation frame is at least 64 KiB), views the frames with
  ``np.frombuffer``, sends the actions with ``copy=False``; the simulator copies them into its action
  array. Python on both sides.
- memcpy: in one process, ``np.copyto`` of the obs, rewards and ids into preallocated arrays and of the
  actions back: the lower bound of any exchange that moves the payload once.

Each figure is the median over ``--rounds`` rounds of the mean round trip of a round (about
``--round-seconds`` of consecutive steps), the transports alternating round by round, after a warm-up.
Every simulator and peer process is started before the first round and waits blocked between its
rounds. Also printed: the trainer's own work per step (bridge: round trip minus the time in
``Channel.wait_turn``), the sleeps per step (voluntary context switches) of the trainer's thread and of
the simulator's main thread, and the C simulator's own time per turn (its request loop, obs memcpy and
actions memcpy).

Idle CPU: (a) the trainer waits ``--idle-seconds`` in ``step()`` for a simulator that sleeps that long
before it answers (its CPU time from ``time.process_time()``); (b) the simulator waits that long for a
trainer that sleeps in its turn (its CPU from /proc/PID/stat utime + stime, 10 ms ticks, and from the
threads' /proc/PID/task/*/schedstat, in ns), for both simulators.

    python benchmarks/bridge.py [--agents 1 100 10000] [--rounds 7] [--round-seconds 0.5] [--idle-seconds 10]
    python benchmarks/bridge.py --quick          # a short smoke run (< 1 min)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

OBS, ACT = 64, 4
BEHAVIOUR = "bench"
ZMQ_COPY_THRESHOLD = 65536  # pyzmq's default copy_threshold: below it, copy=False copies anyway
THIS = str(Path(__file__).resolve())


def payload_bytes(n: int) -> tuple[int, int]:
    """(simulator -> trainer, trainer -> simulator) bytes per step."""
    return n * (8 + 4 + 4 * OBS), n * 4 * ACT


def prepared(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The simulator's prepared ids, rewards and observations (same values as bench_sim.c)."""
    ids = np.arange(1000, 1000 + n, dtype=np.int64)
    rewards = (0.001 * np.arange(n)).astype(np.float32)
    obs = ((np.arange(n) % 1000)[:, None] + 0.01 * np.arange(OBS)[None, :]).astype(np.float32)
    return ids, rewards, obs


class StampError(RuntimeError):
    pass


def check_stamp(value, t: int, where: str) -> None:
    if value != t:
        raise StampError(f"{where}: turn {t} carried stamp {value}")


# ---------------------------------------------------------------- simulators (child processes)


def child_world_sim(args) -> None:
    """The Python bridge simulator: World bulk API."""
    from relayrl.bridge.world import CLOSED, World

    n = args.agents
    ids, rewards, obs = prepared(n)
    actions = np.zeros((n, ACT), np.float32)
    world = World(args.memory_path, spin_us=args.spin_us, timeout_s=60.0)
    world.register(BEHAVIOUR, max_agents=n, observations=[(OBS,)], continuous=ACT)
    t = 0
    while True:
        obs[0, 0] = t
        world.set_decisions(BEHAVIOUR, ids, [obs], rewards)
        if world.step() == CLOSED:
            break
        _, continuous, _ = world.action_arrays(BEHAVIOUR)
        np.copyto(actions, continuous)
        check_stamp(actions[0, 0], t, "world sim")
        if t == args.sleep_after:
            time.sleep(args.sleep)
        t += 1


def child_tcp_sim(args) -> None:
    n = args.agents
    ids, rewards, obs = prepared(n)
    actions = np.zeros((n, ACT), np.float32)
    want = actions.nbytes
    view = memoryview(actions).cast("B")
    sock = socket.create_connection(("127.0.0.1", args.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    total = ids.nbytes + rewards.nbytes + obs.nbytes
    t = 0
    try:
        while True:
            obs[0, 0] = t
            sent = sock.sendmsg([ids, rewards, obs])
            if sent < total:  # a blocking socket sends it all on Linux; just in case
                sock.sendall(b"".join(bytes(a) for a in (ids, rewards, obs))[sent:])
            got = 0
            while got < want:
                k = sock.recv_into(view[got:])
                if not k:
                    return
                got += k
            check_stamp(actions[0, 0], t, "tcp sim")
            t += 1
    except (ConnectionResetError, BrokenPipeError):
        return
    finally:
        sock.close()


def child_zmq_sim(args) -> None:
    import zmq

    n = args.agents
    ids, rewards, obs = prepared(n)
    actions = np.zeros((n, ACT), np.float32)
    big = actions.nbytes >= ZMQ_COPY_THRESHOLD
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PAIR)
    sock.linger = 0
    sock.rcvtimeo = 120_000  # an orphan (its trainer died) exits
    sock.connect(args.endpoint)
    t = 0
    try:
        while True:
            obs[0, 0] = t
            sock.send_multipart([ids, rewards, obs], copy=False)
            frame = sock.recv(copy=not big)
            if len(frame) == 0:  # the trainer's stop message
                return
            np.copyto(actions, np.frombuffer(frame.buffer if big else frame, np.float32).reshape(n, ACT))
            check_stamp(actions[0, 0], t, "zmq sim")
            t += 1
    finally:
        sock.close(0)
        ctx.term()


# ---------------------------------------------------------------- trainer sides


class BridgeTrainer:
    def __init__(self, cmd: list[str], n: int, spin_us: float, log: Path):
        from relayrl.bridge import BridgeEnv

        self.n, self.t = n, 0
        self.actions = np.zeros((n, ACT), np.float32)
        self.log = log
        self.env = BridgeEnv(cmd, spin_us=spin_us, log_path=log, timeout_s=120.0)
        self.peer_pid = self.env.proc.pid
        self.wait_s = 0.0  # time spent in Channel.wait_turn (spinning or asleep), for the breakdown
        channel, wait_turn, clock = self.env.channel, self.env.channel.wait_turn, time.perf_counter

        def timed_wait(*a, **kw):
            start = clock()
            try:
                return wait_turn(*a, **kw)
            finally:
                self.wait_s += clock() - start

        channel.wait_turn = timed_wait

    def turn(self) -> None:
        env = self.env
        decisions, _ = env.get_steps(BEHAVIOUR)
        obs = decisions.obs[0]
        check_stamp(obs[0, 0], self.t, "bridge trainer")
        obs[-1, -1]  # noqa: B018 (touch the last row)
        self.actions[0, 0] = self.t
        env.set_actions(BEHAVIOUR, continuous=self.actions)
        env.step()
        self.t += 1

    def close(self) -> str:
        self.env.close()
        code = self.env.returncode
        text = self.log.read_text(errors="replace").strip() if self.log.exists() else ""
        if code:
            raise SystemExit(f"bridge simulator exited with {code}:\n{text}")
        return text


class TcpTrainer:
    def __init__(self, sim: list[str], n: int):
        self.n, self.t = n, 0
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(60)
        self.proc = subprocess.Popen([*sim, "--tcp", str(listener.getsockname()[1]), "--agents", str(n)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.peer_pid = self.proc.pid
        self.sock, _ = listener.accept()
        listener.close()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = np.empty(payload_bytes(n)[0], np.uint8)
        self.view = memoryview(self.buf)
        self.ids = self.buf[:8 * n].view(np.int64)
        self.rewards = self.buf[8 * n:12 * n].view(np.float32)
        self.obs = self.buf[12 * n:].view(np.float32).reshape(n, OBS)
        self.actions = np.zeros((n, ACT), np.float32)

    def turn(self) -> None:
        sock, view, want = self.sock, self.view, len(self.buf)
        got = 0
        while got < want:
            k = sock.recv_into(view[got:])
            if not k:
                raise SystemExit(f"tcp simulator closed: {self.proc.stderr.read().decode(errors='replace')}")
            got += k
        obs = self.obs
        check_stamp(obs[0, 0], self.t, "tcp trainer")
        obs[-1, -1]  # noqa: B018
        self.actions[0, 0] = self.t
        sock.sendall(self.actions)
        self.t += 1

    def close(self) -> str:
        self.sock.close()
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if self.proc.returncode:
            raise SystemExit(f"tcp simulator exited with {self.proc.returncode}:\n{err.decode(errors='replace')}")
        return err.decode(errors="replace").strip()


class ZmqTrainer:
    def __init__(self, n: int, folder: str):
        import zmq

        self.zmq = zmq
        self.n, self.t = n, 0
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PAIR)
        self.sock.linger = 0
        endpoint = f"ipc://{folder}/bench-{n}.ipc"
        self.sock.bind(endpoint)
        self.proc = subprocess.Popen([sys.executable, THIS, "--child", "zmq-sim", "--endpoint", endpoint,
                                      "--agents", str(n)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.peer_pid = self.proc.pid
        self.big = payload_bytes(n)[0] - 12 * n >= ZMQ_COPY_THRESHOLD
        self.actions = np.zeros((n, ACT), np.float32)

    def turn(self) -> None:
        frames = self.sock.recv_multipart(copy=not self.big)
        obs = np.frombuffer(frames[2].buffer if self.big else frames[2], np.float32).reshape(self.n, OBS)
        check_stamp(obs[0, 0], self.t, "zmq trainer")
        obs[-1, -1]  # noqa: B018
        self.actions[0, 0] = self.t
        self.sock.send(self.actions, copy=False)
        self.t += 1

    def close(self) -> str:
        self.sock.recv_multipart()  # the simulator's next turn
        self.sock.send(b"")  # stop
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        self.sock.close(0)
        self.ctx.term()
        if self.proc.returncode:
            raise SystemExit(f"zmq simulator exited with {self.proc.returncode}:\n{err.decode(errors='replace')}")
        return ""


class Memcpy:
    peer_pid = None

    def __init__(self, n: int):
        self.src = prepared(n)
        self.dst = tuple(np.empty_like(a) for a in self.src)
        self.act_src = np.ones((n, ACT), np.float32)
        self.act_dst = np.empty_like(self.act_src)

    def turn(self) -> None:
        for s, d in zip(self.src, self.dst):
            np.copyto(d, s)
        np.copyto(self.act_dst, self.act_src)

    def close(self) -> str:
        return ""


# ---------------------------------------------------------------- measurement


def _machine_busy_seconds() -> float:
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    # user, nice, system, irq, softirq, steal: not idle or iowait
    return (sum(values[:8]) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def background_cores(seconds: float = 1.0) -> float:
    """Cores busy on the machine while this benchmark runs nothing (other users' load)."""
    before, start = _machine_busy_seconds(), time.time()
    time.sleep(seconds)
    return (_machine_busy_seconds() - before) / (time.time() - start)


def wait_quiet(args) -> float:
    """Wait (up to --quiet-wait s) for other processes to use at most --quiet-cores; the last load seen."""
    deadline = time.monotonic() + args.quiet_wait
    while True:
        load = background_cores(0.5 if args.quick else 1.0)
        if load <= args.quiet_cores or time.monotonic() >= deadline:
            if load > args.quiet_cores:
                print(f"  (machine still busy with {load:.2f} cores of other work; measuring anyway)", flush=True)
            return load
        time.sleep(2.0)


def c_sim() -> Path:
    from relayrl.bridge.cbuild import build

    return build("bench_sim", Path(tempfile.gettempdir()) / "relayrl-bench-build")


def world_cmd(n: int, spin_us: float = 500.0, sleep_after: int = -1, sleep: float = 0.0) -> list[str]:
    return [sys.executable, THIS, "--child", "world-sim", "--agents", str(n), "--spin-us", str(spin_us),
            "--sleep-after", str(sleep_after), "--sleep", str(sleep)]


def sleeps(path: str) -> int:
    """Voluntary context switches of one thread (each is one sleep: a blocking wait that really blocked)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def timed(system, iters: int) -> dict:
    """One round: mean seconds per round trip, the trainer's mean time inside the bridge's wait (bridge
    only), and the sleeps per round trip of the trainer's thread and of the simulator's main thread."""
    turn, peer = system.turn, system.peer_pid
    peer_status = f"/proc/{peer}/status" if peer else None
    wait0 = getattr(system, "wait_s", None)
    mine0, peer0 = sleeps("/proc/thread-self/status"), sleeps(peer_status) if peer else 0
    start = time.perf_counter()
    for _ in range(iters):
        turn()
    elapsed = time.perf_counter() - start
    mine1, peer1 = sleeps("/proc/thread-self/status"), sleeps(peer_status) if peer else 0
    return {"round_trip_s": elapsed / iters,
            "wait_s": None if wait0 is None else (system.wait_s - wait0) / iters,
            "trainer_sleeps": (mine1 - mine0) / iters,
            "sim_sleeps": (peer1 - peer0) / iters if peer else None}


def start_systems(names: list[str], n: int, exe: Path, folder: str) -> dict:
    systems: dict = {}
    try:
        for name in names:
            systems[name] = start_system(name, n, exe, folder)
    except BaseException:
        for system in systems.values():
            try:
                system.close()
            except BaseException:
                pass
        raise
    return systems


SYSTEMS = {  # key: label
    "bridge-c": "bridge, C sim",
    "bridge-c-spin50": "bridge, C sim, trainer spin_us=50",
    "bridge-c-spin0": "bridge, C sim, trainer spin_us=0",
    "bridge-py": "bridge, Python World sim",
    "bridge-py-spin50": "bridge, Python World sim, trainer spin_us=50",
    "tcp-c": "TCP loopback, C sim",
    "tcp-py": "TCP loopback, Python sim",
    "zmq-py": "ZeroMQ IPC, Python sim",
    "memcpy": "memcpy (numpy, one process)",
}


def start_system(name: str, n: int, exe: Path, folder: str):
    log = Path(folder) / f"{name}-{n}.log"
    if name.startswith("bridge-"):
        spin = float(name.split("-spin")[1]) if "-spin" in name else 500.0  # BridgeEnv's default
        sim = [str(exe), "--agents", str(n)] if name.startswith("bridge-c") else world_cmd(n)
        return BridgeTrainer(sim, n, spin, log)
    if name == "tcp-c":
        return TcpTrainer([str(exe)], n)
    if name == "tcp-py":
        return TcpTrainer([sys.executable, THIS, "--child", "tcp-sim"], n)
    if name == "zmq-py":
        return ZmqTrainer(n, folder)
    if name == "memcpy":
        return Memcpy(n)
    raise ValueError(f"unknown system {name!r} (known: {', '.join(SYSTEMS)})")


def round_trips(args, names: list[str], exe: Path) -> dict:
    """{(system, n): [timed(...) of each round]}."""
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="relayrl-bench-bridge-") as folder:
        for n in args.agents:
            load = wait_quiet(args)
            print(f"n={n}: other processes busy on {load:.2f} cores before the start", flush=True)
            systems = start_systems(names, n, exe, folder)
            try:
                iters = {}
                for name, system in systems.items():  # warm up and size the rounds
                    count, start = 0, time.perf_counter()
                    while time.perf_counter() - start < args.warmup:
                        system.turn()
                        count += 1
                    per = (time.perf_counter() - start) / count
                    iters[name] = max(20, int(args.round_seconds / per))
                for r in range(args.rounds):
                    for name, system in systems.items():
                        results.setdefault((name, n), []).append(timed(system, iters[name]))
                    print(f"n={n:>6} round {r + 1}: " + ", ".join(
                        f"{name} {results[(name, n)][-1]['round_trip_s'] * 1e6:.1f}" for name in systems) + " µs",
                        flush=True)
            finally:
                notes = {}
                for name, system in systems.items():
                    notes[name] = system.close()
            for name, text in notes.items():
                for line in text.splitlines():
                    if line.startswith("bench_sim"):
                        print(f"  {name}: {line}")
    return results


# ---------------------------------------------------------------- idle CPU


def proc_cpu(pid: int) -> tuple[float, float | None, int]:
    """(utime + stime of all threads in s, their run time from schedstat in s or None, voluntary context
    switches of the main thread) of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    try:
        run = sum(int(Path(t, "schedstat").read_text().split()[0]) for t in Path(f"/proc/{pid}/task").iterdir()) / 1e9
    except (OSError, ValueError, IndexError):
        run = None
    return ticks, run, sleeps(f"/proc/{pid}/status")


def idle_trainer(cmd: list[str], seconds: float, folder: str) -> dict:
    """(a) The trainer blocks in step() while the simulator sleeps `seconds` before answering."""
    trainer = BridgeTrainer([*cmd, "--sleep-after", "2", "--sleep", str(seconds)], 1, 500.0,
                            Path(folder) / "idle-trainer.log")
    try:
        trainer.turn()
        trainer.turn()
        cpu0, sw0 = time.process_time(), sleeps("/proc/thread-self/status")
        wall0 = time.perf_counter()
        trainer.turn()  # the simulator sleeps after reading these actions
        wall = time.perf_counter() - wall0
        cpu, sw = time.process_time() - cpu0, sleeps("/proc/thread-self/status") - sw0
        trainer.turn()
    finally:
        trainer.close()
    return {"wall_s": wall, "cpu_s": cpu, "cpu_precise_s": cpu, "wakeups": sw}


def idle_sim(cmd: list[str], seconds: float, folder: str) -> dict:
    """(b) The simulator waits while the trainer sleeps `seconds` in its turn."""
    trainer = BridgeTrainer(cmd, 1, 500.0, Path(folder) / "idle-sim.log")
    try:
        trainer.turn()
        trainer.turn()
        pid = trainer.env.proc.pid
        time.sleep(0.01)  # let the simulator finish its spin and go to sleep in poll()
        cpu0, run0, sw0 = proc_cpu(pid)
        wall0 = time.perf_counter()
        time.sleep(seconds)
        cpu1, run1, sw1 = proc_cpu(pid)
        wall = time.perf_counter() - wall0
        trainer.turn()  # it is still there and answers
    finally:
        trainer.close()
    return {"wall_s": wall, "cpu_s": cpu1 - cpu0, "cpu_precise_s": None if run0 is None else run1 - run0,
            "wakeups": sw1 - sw0}


def idle(args, exe: Path) -> dict:
    out = {}
    with tempfile.TemporaryDirectory(prefix="relayrl-bench-idle-") as folder:
        out["trainer waits"] = idle_trainer([str(exe), "--agents", "1"], args.idle_seconds, folder)
        out["C simulator waits"] = idle_sim([str(exe), "--agents", "1"], args.idle_seconds, folder)
        out["Python World waits"] = idle_sim(world_cmd(1), args.idle_seconds, folder)
    for name, r in out.items():
        print(f"idle: {name}: {describe_idle(r)}", flush=True)
    return out


def run_idle(args) -> dict:
    """``idle`` in a child process, so the trainer's CPU time is a trainer's alone."""
    proc = subprocess.run([sys.executable, THIS, "--child", "idle", "--idle-seconds", str(args.idle_seconds)],
                          stdout=subprocess.PIPE, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    for line in proc.stdout.splitlines():
        if not line.startswith("RESULT "):
            print(line, flush=True)
    if proc.returncode or not lines:
        raise SystemExit(f"the idle measurement failed (exit {proc.returncode})")
    return json.loads(lines[-1][len("RESULT "):])


def describe_idle(r: dict) -> str:
    text = f"{r['cpu_s']:.3f} CPU s in {r['wall_s']:.2f} s = {100 * r['cpu_s'] / r['wall_s']:.2f}% of a core"
    if r["cpu_precise_s"] is not None and r["cpu_precise_s"] != r["cpu_s"]:
        text += (f" (schedstat: {r['cpu_precise_s'] * 1e3:.2f} ms = "
                 f"{100 * r['cpu_precise_s'] / r['wall_s']:.3f}%)")
    return text + f", {r['wakeups']} sleeps"


# ---------------------------------------------------------------- report


def report(args, names: list[str], results: dict, idle_results: dict | None) -> None:
    med = {key: statistics.median(r["round_trip_s"] for r in v) * 1e6 for key, v in results.items()}
    agents = args.agents
    print(f"\nround trip of one step, µs: median of {args.rounds} rounds of ~{args.round_seconds:g} s; ids int64 [n], "
          f"rewards float32 [n], obs float32 [n, {OBS}] -> actions float32 [n, {ACT}]")
    width = max(len(SYSTEMS.get(s, s)) for s in names) + 2
    print(f"{'':<{width}}" + "".join(f"{f'n={n:,}':>12}" for n in agents))
    print(f"{'payload (kB, both ways)':<{width}}" + "".join(f"{sum(payload_bytes(n)) / 1e3:>12,.1f}" for n in agents))
    for s in names:
        print(f"{SYSTEMS.get(s, s):<{width}}" + "".join(f"{med[(s, n)]:>12,.1f}" for n in agents))

    print("\nratios of the medians" + " " * (width - 21) + "".join(f"{f'n={n:,}':>12}" for n in agents)
          + "   target at 10,000")
    for bridge in (s for s in names if s.startswith("bridge-")):
        anchor_tcp = "tcp-c" if bridge.startswith("bridge-c") else "tcp-py"
        rows = [(f"TCP ({SYSTEMS[anchor_tcp].split(', ')[1]}) / bridge", anchor_tcp, bridge, 5.0),
                ("ZeroMQ / bridge", "zmq-py", bridge, None),
                ("bridge / memcpy", bridge, "memcpy", 3.0)]
        print(f"{SYSTEMS[bridge]}")
        for label, a, b, target in rows:
            if a not in names or b not in names:
                continue
            values = [med[(a, n)] / med[(b, n)] for n in agents]
            note = ""
            if target is not None and 10000 in agents:
                value = values[agents.index(10000)]
                ok = value >= target if label.endswith("bridge") else value <= target
                note = f"   {'≥' if label.endswith('bridge') else '≤'} {target:g}: {'met' if ok else 'NOT met'}"
            print(f"{'  ' + label:<{width}}" + "".join(f"{v:>12.2f}" for v in values) + note)
    print("\nwhere the time goes (medians over the rounds): the trainer's own work per step (round trip minus its "
          "time in Channel.wait_turn), and sleeps per step (voluntary context switches) of the trainer's thread and "
          "of the simulator's main thread")
    print(f"{'':<{width}}" + "".join(f"{f'n={n:,}':>26}" for n in agents))
    print(f"{'':<{width}}" + "".join(f"{'work µs  sleeps tr/sim':>26}" for n in agents))
    for s in names:
        if s == "memcpy":
            continue
        cells = []
        for n in agents:
            rounds = results[(s, n)]
            work = (f"{statistics.median(r['round_trip_s'] - r['wait_s'] for r in rounds) * 1e6:.1f}"
                    if rounds[0]["wait_s"] is not None else "-")
            tr = statistics.median(r["trainer_sleeps"] for r in rounds)
            sim = statistics.median(r["sim_sleeps"] for r in rounds)
            cells.append(f"{work:>8} {tr:>8.2f}/{sim:<5.2f}")
        print(f"{SYSTEMS.get(s, s):<{width}}" + "".join(f"{c:>26}" for c in cells))
    if idle_results:
        print(f"\nidle CPU while one side waits ~{args.idle_seconds:g} s:")
        for name, r in idle_results.items():
            print(f"  {name:<30} {describe_idle(r)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 100, 10000])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--round-seconds", type=float, default=0.5, help="length of one measured round")
    parser.add_argument("--warmup", type=float, default=0.3, help="seconds of warm-up per system and n")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS), metavar="SYSTEM",
                        help=f"what to measure (default all: {', '.join(SYSTEMS)})")
    parser.add_argument("--skip-idle", action="store_true")
    parser.add_argument("--quiet-cores", type=float, default=0.2,
                        help="before each agent count, wait for other processes to use at most this many cores")
    parser.add_argument("--quiet-wait", type=float, default=60.0, help="... but no longer than this (s)")
    parser.add_argument("--quick", action="store_true", help="a short smoke run (< 1 min)")
    parser.add_argument("--json", help="also write every round's figures here")
    # child processes
    parser.add_argument("--child", choices=["world-sim", "tcp-sim", "zmq-sim", "idle"], help=argparse.SUPPRESS)
    parser.add_argument("--memory-path", help=argparse.SUPPRESS)
    parser.add_argument("--port", "--tcp", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--spin-us", type=float, default=500.0, help=argparse.SUPPRESS)
    parser.add_argument("--sleep-after", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--sleep", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "idle":  # a fresh trainer process: nothing else of the benchmark in its CPU time
        print("RESULT " + json.dumps(idle(args, c_sim())), flush=True)
        return
    if args.child:
        args.agents = args.agents[0]
        try:
            {"world-sim": child_world_sim, "tcp-sim": child_tcp_sim, "zmq-sim": child_zmq_sim}[args.child](args)
        except StampError as exc:
            print(exc, file=sys.stderr)
            sys.exit(4)
        return
    if args.quick:
        args.rounds, args.round_seconds, args.warmup, args.idle_seconds, args.quiet_wait = 3, 0.1, 0.1, 2.0, 0.0
    names = args.systems
    exe = c_sim()
    print(f"bench_sim: {exe}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}", flush=True)
    results = round_trips(args, names, exe)
    idle_results = None if args.skip_idle else run_idle(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rounds": {f"{s}|{n}": v for (s, n), v in results.items()},
                       "idle": idle_results}, f, indent=1)
    report(args, names, results, idle_results)


if __name__ == "__main__":
    main()
