"""Relay transport: sample throughput and weight-broadcast latency through `relayrl serve`, against
tlspyo (TMRL's transport) on the same machine.

Every role is its own OS process on loopback (multiprocessing "spawn"): the relay
(``Relay(RelayOptions(bind="127.0.0.1:0")).serve()``, its port passed back), the trainer and the
workers (``RelayClient``).

1. Throughput: ``--workers`` workers (each count given, default 4 and 32) send chunks of ``--chunk`` SAC-like transitions (obs 17 and
   next_obs 17 float32, action 6 float32, reward and discount float32, terminated bool: 169 bytes
   per transition) as fast as they are taken; the trainer ``receive``s and ``ack``s every chunk.
   Each worker keeps at most a window of chunks unacknowledged (waiting in
   ``wait_unacknowledged(window)``, woken by the acks, so its backlog never drops one); every window of ``--windows``
   is measured. Transitions/s and payload MB/s delivered to the trainer over ``--seconds`` after
   ``--warmup``; afterwards every chunk sent must have reached the trainer exactly once with no
   drop anywhere (backlog, relay). Plain TCP and CURVE (keys from ``relayrl.net.keys.generate``).
2. Broadcast: the trainer publishes a 1M-parameter weight dict ({"actor": {"w": randn(1000, 1000)}},
   4 MB as safetensors) to ``--bcast-workers`` workers, which poll ``take_weights()`` every 1 ms
   and send their receive time (``time.time()``) back through a queue; latency = from just before
   ``publish_weights`` to the last worker's receipt. Median and p90 over ``--reps`` publishes (after
   one warm-up publish), plain and CURVE; encode (``weights_to_bytes``) and decode
   (``weights_from_bytes``) are timed apart, and "incl. encode" starts before ``weights_to_bytes``.
3. Anchor, with ``--tlspyo-python``: the same through tlspyo (Relay + Endpoints, security=None as
   TMRL's default, TMRL's header_size 12), run by that interpreter (a separate virtualenv: tlspyo
   never enters this environment), once per ``--tlspyo-max-bufs`` setting of its receive buffer
   (default: TMRL's 512 MiB, and 64 KiB, which holds up better with many chunks in flight); the
   ratios are taken against the better setting for each figure. Workers ``produce`` pickled numpy
   dicts to the "trainers" group, paced by the same window (the trainer counts each worker's chunks
   in shared memory: tlspyo has no end-to-end acknowledgement); the trainer grants credits with
   ``notify({"trainers": n})`` and blocks in ``receive_all``. The trainer ``broadcast``s the
   weights as a pickled float32 array (its latency includes the pickling); workers poll
   ``receive_all`` every 1 ms.

Each run starts once other processes use at most ``--quiet-cores`` (waiting up to ``--quiet-wait``
s); ``--rounds`` repeats everything, the systems alternating within a round and their order reversed
every other round, and the medians are reported, with each relayrl system's ratio to the better
tlspyo setting (CURVE's too: tlspyo runs unencrypted, as in TMRL's default). The cores each role
used and the load average are printed with every throughput figure.

The figures of docs/benchmarks.md ("Relay"), on an idle machine (10 to 20 minutes):

    python -m venv /tmp/tlsvenv && /tmp/tlsvenv/bin/pip install tlspyo numpy
    python benchmarks/relay.py --rounds 3 --workers 4 32 --windows 32 --no-broadcast \
        --tlspyo-python /tmp/tlsvenv/bin/python --quiet-wait 120

Other uses:

    python benchmarks/relay.py --workers 4 --no-curve --rounds 1       # relayrl only, no anchor
    python benchmarks/relay.py --workers 32 --no-curve --no-broadcast --profile-relay /tmp/relay.prof

Only the standard library and numpy are imported at the top: the tlspyo half of this file runs in
the other virtualenv, which has neither relayrl nor pyzmq.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import pickle
import queue
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

OBS, ACT = 17, 6
PARAMS_SIDE = 1000  # the broadcast weight is PARAMS_SIDE x PARAMS_SIDE float32: 1M parameters, 4 MB
N_CHUNKS = 8  # distinct pre-built chunks each worker cycles through
TLS_PASSWORD = "relayrl-benchmark"
TLS_HEADER = 12  # TMRL's HEADER_SIZE
TLS_MAX_BUF = 2**29  # TMRL's BUFFER_SIZE (tlspyo max_buf_len)
START_TIMEOUT = 180.0  # 32 workers (64 processes for tlspyo) on a busy 2-core machine start slowly


# ---------------------------------------------------------------- shared helpers


def make_chunk(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"obs": rng.standard_normal((n, OBS), dtype=np.float32),
            "action": rng.uniform(-1, 1, (n, ACT)).astype(np.float32),
            "reward": rng.standard_normal(n, dtype=np.float32),
            "next_obs": rng.standard_normal((n, OBS), dtype=np.float32),
            "terminated": rng.random(n) < 0.01,
            "discount": np.full(n, 0.99, np.float32)}


def payload_bytes(arrays: dict[str, np.ndarray]) -> int:
    return sum(a.nbytes for a in arrays.values())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proc_stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, pgrp, start time) of a live process, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[2]), int(fields[19])


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy_seconds() -> float:
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    # user, nice, system, irq, softirq: not idle, iowait, or steal (time the hypervisor gave others)
    return (sum(values[:7]) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def measure_cpu(groups: dict[str, list], t0: float, t1: float) -> dict[str, float]:
    """Cores used by each group of processes (with their own children) and by the whole machine
    between the wall-clock times t0 and t1 (this process sleeps meanwhile)."""
    time.sleep(max(0.0, t0 - time.time()))
    pids = {name: [pid for p in procs for pid in [p.pid, *(d for d, _ in descendants(p.pid))]]
            for name, procs in groups.items()}
    before = {name: sum(_cpu_seconds(pid) for pid in ps) for name, ps in pids.items()}
    machine, start = _machine_busy_seconds(), time.time()
    time.sleep(max(0.0, t1 - time.time()))
    dt = time.time() - start
    out = {name: (sum(_cpu_seconds(pid) for pid in ps) - before[name]) / dt for name, ps in pids.items()}
    out["machine"] = (_machine_busy_seconds() - machine) / dt
    return out


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, start time) of every live descendant of ``pid``."""
    children: dict[int, list[tuple[int, int]]] = {}
    for p in _all_pids():
        st = _proc_stat(p)
        if st is not None:
            children.setdefault(st[0], []).append((p, st[2]))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child[0])
    return out


def kill_if_same(pid: int, start: int) -> None:
    """SIGKILL ``pid`` if it is still the process that started at ``start`` (no pid reuse)."""
    st = _proc_stat(pid)
    if st is not None and st[2] == start:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop_processes(procs: list, join_s: float = 5.0) -> None:
    """Join each child, then terminate, then kill it; its own children (tlspyo's Twisted processes)
    are killed by pid afterwards if they outlived it."""
    trees = {p.pid: descendants(p.pid) for p in procs if p.pid is not None and p.is_alive()}
    deadline = time.monotonic() + join_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(2.0)
        if p.is_alive():
            p.kill()
            p.join(2.0)
    for tree in trees.values():
        for pid, start in tree:
            kill_if_same(pid, start)


def get(q, timeout: float, procs: list, what: str):
    """``q.get`` that fails fast, naming the role, when one of ``procs`` died."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return q.get(timeout=0.25)
        except queue.Empty:
            pass
        dead = [p.name for p in procs if p.exitcode not in (None, 0)]
        if dead:
            raise RuntimeError(f"waiting for {what}: {', '.join(dead)} died (its traceback is above)")
        if time.monotonic() > deadline:
            raise RuntimeError(f"waiting for {what}: nothing after {timeout:.0f} s")


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def child(fn_name: str, *args) -> None:
    """A spawned role: run ``fn_name(*args)``; on error print the traceback and exit 1 (the parent
    then names the role that died)."""
    try:
        globals()[fn_name](*args)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


# ---------------------------------------------------------------- relayrl roles (spawned children)


def ours_relay(keys, relay_window, port_q, stop, out_q, profile=None):
    from relayrl.net.relay import Relay, RelayOptions

    options = RelayOptions(bind="127.0.0.1:0", keys=keys)
    if relay_window is not None:
        options.window = relay_window
    relay = Relay(options)
    port_q.put(int(relay.endpoint.rsplit(":", 1)[1]))
    if profile:  # --profile-relay: cProfile of the relay's loop, printed by the parent
        import cProfile

        cProfile.runctx("relay.serve(stop, log=None)", globals(), {"relay": relay, "stop": stop}, profile)
    else:
        relay.serve(stop, log=None)  # returns once stop is set (checked every heartbeat)
    out_q.put(("relay", dict(relay.counters)))


def ours_tp_worker(i, port, keys, window, chunk_size, ready_q, stop, out_q):
    from relayrl.net.client import RelayClient

    client = RelayClient(f"127.0.0.1:{port}", "worker", name=f"w{i}", keys=keys)
    try:
        if not client.wait_connected(START_TIMEOUT):
            raise RuntimeError(f"worker w{i}: no welcome from the relay")
        rng = np.random.default_rng(i)
        chunks = [make_chunk(chunk_size, rng) for _ in range(N_CHUNKS)]
        ready_q.put(i)
        sent = 0
        while not stop.is_set():
            if not client.wait_unacknowledged(window, 0.1):  # paced: never more than `window` ahead of the acks
                continue  # (woken by the ack, as relayrl's own workers are)
            client.send_samples(chunks[sent % N_CHUNKS], version=0, meta={"env_steps": chunk_size})
            sent += 1
        deadline = time.monotonic() + 30
        while client.unacknowledged() and time.monotonic() < deadline:  # let the last ones be acknowledged
            time.sleep(0.01)
        out_q.put(("worker", i, {"chunks": sent, "unacknowledged": client.unacknowledged(), **client.stats}))
    finally:
        client.close()


def ours_tp_trainer(port, keys, cmd_q, stop, out_q):
    from relayrl.net.client import RelayClient

    client = RelayClient(f"127.0.0.1:{port}", "trainer", name="trainer", keys=keys)
    try:
        if not client.wait_connected(START_TIMEOUT):
            raise RuntimeError("trainer: no welcome from the relay")
        out_q.put(("trainer-ready",))
        t0, t1 = cmd_q.get()
        transitions = nbytes = chunks = total = 0
        per_worker: dict[str, int] = {}
        reported = False
        while not stop.is_set():
            msgs = client.receive(0.05)
            now = time.time()
            if msgs:
                client.ack(msgs)
                total += len(msgs)
                for m in msgs:
                    per_worker[m.sender] = per_worker.get(m.sender, 0) + 1
                if t0 <= now < t1:
                    chunks += len(msgs)
                    for m in msgs:
                        transitions += m.arrays["obs"].shape[0]
                        nbytes += payload_bytes(m.arrays)
            if not reported and now >= t1:
                out_q.put(("trainer", {"transitions": transitions, "bytes": nbytes, "chunks": chunks,
                                       "seconds": t1 - t0}))
                reported = True
        out_q.put(("trainer-total", {"total": total, "per_worker": per_worker, **client.stats}))
    finally:
        client.close()


def ours_bc_worker(i, port, keys, ready_q, stop, times_q):
    from relayrl.net.client import RelayClient

    client = RelayClient(f"127.0.0.1:{port}", "worker", name=f"w{i}", keys=keys)
    try:
        if not client.wait_connected(START_TIMEOUT):
            raise RuntimeError(f"worker w{i}: no welcome from the relay")
        ready_q.put(i)
        while not stop.is_set():
            msg = client.take_weights()
            if msg is None:
                time.sleep(0.001)
                continue
            times_q.put((i, msg.version, time.time(), len(msg.blob)))
            client.version = msg.version  # what a real worker does once it loaded them (else it re-asks)
    finally:
        client.close()


def ours_bc_trainer(port, keys, n_workers, reps, pause, cmd_q, times_q, out_q):
    import torch

    from relayrl.net.client import RelayClient
    from relayrl.net.wire import weights_from_bytes, weights_to_bytes

    torch.set_num_threads(1)
    client = RelayClient(f"127.0.0.1:{port}", "trainer", name="trainer", keys=keys)
    try:
        if not client.wait_connected(START_TIMEOUT):
            raise RuntimeError("trainer: no welcome from the relay")
        out_q.put(("trainer-ready",))
        cmd_q.get()
        weights = {"actor": {"w": torch.randn(PARAMS_SIDE, PARAMS_SIDE)}}
        latency, with_encode, encode, decode, size = [], [], [], [], 0
        for version in range(reps + 1):  # version 0: warm-up, not counted
            ta = time.time()
            blob = weights_to_bytes(weights)
            tb = time.time()
            client.publish_weights(version, blob)
            got: dict[int, float] = {}
            while len(got) < n_workers:
                i, v, t, size = times_q.get(timeout=120)
                if v == version:
                    got[i] = t
            last = max(got.values())
            start = time.perf_counter()
            weights_from_bytes(blob)
            dec = time.perf_counter() - start
            if version > 0:
                latency.append(last - tb)
                with_encode.append(last - ta)
                encode.append(tb - ta)
                decode.append(dec)
            time.sleep(pause)
        out_q.put(("trainer", {"latency": latency, "with_encode": with_encode, "encode": encode,
                               "decode": decode, "blob_bytes": size}))
    finally:
        client.close()


# ---------------------------------------------------------------- relayrl runs (parent side)


def run_ours_throughput(args, keys_dir: str | None, window: int) -> dict:
    ctx = mp.get_context("spawn")
    sub = (lambda name: os.path.join(keys_dir, name)) if keys_dir else (lambda name: None)
    port_q, out_q, ready_q, cmd_q = ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Queue()
    relay_stop, trainer_stop, worker_stop = ctx.Event(), ctx.Event(), ctx.Event()
    procs: list = []
    try:
        relay = ctx.Process(target=child, name="relay",
                            args=("ours_relay", sub("server"), args.relay_window, port_q, relay_stop, out_q,
                                  args.profile_relay))
        relay.start()
        procs.append(relay)
        port = get(port_q, START_TIMEOUT, procs, "the relay's port")
        trainer = ctx.Process(target=child, name="trainer",
                              args=("ours_tp_trainer", port, sub("trainer"), cmd_q, trainer_stop, out_q))
        trainer.start()
        procs.append(trainer)
        get(out_q, START_TIMEOUT, procs, "the trainer's connection")
        workers = [ctx.Process(target=child, name=f"worker {i}",
                               args=("ours_tp_worker", i, port, sub(f"w{i}"), window, args.chunk, ready_q,
                                     worker_stop, out_q))
                   for i in range(args.workers)]
        for w in workers:
            w.start()
            procs.append(w)
        for _ in workers:
            get(ready_q, START_TIMEOUT, procs, "the workers' connections")
        t0 = time.time() + args.warmup
        cmd_q.put((t0, t0 + args.seconds))
        cpu = measure_cpu({"relay": [relay], "trainer": [trainer], "workers": workers}, t0, t0 + args.seconds)
        tag, measured = get(out_q, 60, procs, "the trainer's figures")
        assert tag == "trainer", tag
        worker_stop.set()
        stats = [get(out_q, 60, procs, "the workers' totals") for _ in workers]
        trainer_stop.set()
        tag, trainer_total = get(out_q, 30, procs, "the trainer's totals")
        assert tag == "trainer-total", tag
        relay_stop.set()
        tag, relay_counters = get(out_q, 30, procs, "the relay's counters")
        assert tag == "relay", tag
    finally:
        relay_stop.set()
        trainer_stop.set()
        worker_stop.set()
        stop_processes(procs)
    sent = sum(s[2]["chunks"] for s in stats)
    drops = (sum(s[2]["backlog_drops"] + s[2]["relay_drops"] for s in stats) + relay_counters["drops"])
    return {"transitions_per_s": measured["transitions"] / measured["seconds"],
            "mb_per_s": measured["bytes"] / measured["seconds"] / 1e6,
            "chunks_per_s": measured["chunks"] / measured["seconds"],
            "chunks_sent": sent, "chunks_received": trainer_total["total"], "drops": drops, "cpu": cpu,
            "duplicates": relay_counters["duplicates"], "unacknowledged": sum(s[2]["unacknowledged"] for s in stats),
            "exactly_once": (trainer_total["total"] == sent and drops == 0
                             and all(trainer_total["per_worker"].get(f"w{s[1]}", 0) == s[2]["chunks"] for s in stats))}


def run_ours_broadcast(args, keys_dir: str | None) -> dict:
    ctx = mp.get_context("spawn")
    sub = (lambda name: os.path.join(keys_dir, name)) if keys_dir else (lambda name: None)
    port_q, out_q, ready_q, cmd_q, times_q = ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Queue()
    relay_stop, worker_stop = ctx.Event(), ctx.Event()
    procs: list = []
    try:
        relay = ctx.Process(target=child, name="relay",
                            args=("ours_relay", sub("server"), args.relay_window, port_q, relay_stop, out_q))
        relay.start()
        procs.append(relay)
        port = get(port_q, START_TIMEOUT, procs, "the relay's port")
        trainer = ctx.Process(target=child, name="trainer",
                              args=("ours_bc_trainer", port, sub("trainer"), args.bcast_workers, args.reps, args.pause,
                                    cmd_q, times_q, out_q))
        trainer.start()
        procs.append(trainer)
        get(out_q, START_TIMEOUT, procs, "the trainer's connection")
        workers = [ctx.Process(target=child, name=f"worker {i}",
                               args=("ours_bc_worker", i, port, sub(f"w{i}"), ready_q, worker_stop, times_q))
                   for i in range(args.bcast_workers)]
        for w in workers:
            w.start()
            procs.append(w)
        for _ in workers:
            get(ready_q, START_TIMEOUT, procs, "the workers' connections")
        cmd_q.put("go")
        tag, result = get(out_q, 120 + args.reps * (args.pause + 10), procs, "the broadcast figures")
        assert tag == "trainer", tag
        worker_stop.set()
        relay_stop.set()
        tag, _ = get(out_q, 30, procs, "the relay's counters")
    finally:
        relay_stop.set()
        worker_stop.set()
        stop_processes(procs)
    return result


def summarize_broadcast(runs: list[dict]) -> dict:
    """Median and p90 over the publishes of every run (rounds pooled)."""
    result = {key: sum((r.get(key, []) for r in runs), []) for key in ("latency", "with_encode", "encode", "decode")}
    result["blob_bytes"] = runs[0]["blob_bytes"]
    ms = lambda values: [v * 1e3 for v in values]  # noqa: E731
    out = {"median_ms": statistics.median(ms(result["latency"])), "p90_ms": percentile(ms(result["latency"]), 90),
           "with_encode_median_ms": statistics.median(ms(result["with_encode"])),
           "encode_ms": statistics.median(ms(result["encode"])), "blob_bytes": result["blob_bytes"],
           "reps": len(result["latency"])}
    if result.get("decode"):
        out["decode_ms"] = statistics.median(ms(result["decode"]))
    return out


# ---------------------------------------------------------------- tlspyo roles (run by --tlspyo-python)


def tls_endpoint(port, local_port, group, max_buf):
    from tlspyo import Endpoint

    return Endpoint(ip_server="127.0.0.1", port=port, password=TLS_PASSWORD, groups=group,
                    local_com_port=local_port, header_size=TLS_HEADER, max_buf_len=max_buf, security=None)


def tls_relay(port, local_port, ready_q, stop):
    from tlspyo import Relay

    relay = Relay(port=port, password=TLS_PASSWORD, local_com_port=local_port, header_size=TLS_HEADER,
                  security=None, accepted_groups={"trainers": {"max_count": 1, "max_consumables": None},
                                                  "workers": {"max_count": None, "max_consumables": None}})
    ready_q.put("relay")
    stop.wait()
    relay.stop()


def tls_tp_worker(i, port, local_port, max_buf, window, chunk_size, delivered, ready_q, stop, out_q):
    endpoint = tls_endpoint(port, local_port, "workers", max_buf)
    rng = np.random.default_rng(i)
    chunks = [make_chunk(chunk_size, rng) for _ in range(N_CHUNKS)]
    ready_q.put(i)
    sent = 0
    while not stop.is_set():
        if sent - delivered[i] >= window:  # same pacing as ours, from the trainer's count of this worker's chunks
            time.sleep(0.0005)
            continue
        endpoint.produce((i, chunks[sent % N_CHUNKS]), "trainers")
        sent += 1
    endpoint.produce((i, None), "trainers")  # end marker: lets the trainer block in receive_all
    out_q.put(("worker", i, {"chunks": sent}))
    endpoint.stop()


def tls_tp_trainer(port, local_port, max_buf, n_workers, window, delivered, cmd_q, out_q):
    endpoint = tls_endpoint(port, local_port, "trainers", max_buf)
    endpoint.notify(groups={"trainers": n_workers * window + n_workers})  # credit for everything in flight
    out_q.put(("trainer-ready",))
    t0, t1 = cmd_q.get()
    transitions = nbytes = chunks = total = ended = 0
    reported = False
    while ended < n_workers:
        items = endpoint.receive_all(blocking=True)
        now = time.time()
        for i, chunk in items:
            if chunk is None:
                ended += 1
                continue
            delivered[i] += 1
            total += 1
            if t0 <= now < t1:
                chunks += 1
                transitions += chunk["obs"].shape[0]
                nbytes += payload_bytes(chunk)
        endpoint.notify(groups={"trainers": len(items)})  # give the credit back
        if not reported and now >= t1:
            out_q.put(("trainer", {"transitions": transitions, "bytes": nbytes, "chunks": chunks,
                                   "seconds": t1 - t0}))
            reported = True
    out_q.put(("trainer-total", {"total": total, "per_worker": list(delivered)}))
    endpoint.stop()


def tls_bc_worker(i, port, local_port, max_buf, stop, times_q):
    endpoint = tls_endpoint(port, local_port, "workers", max_buf)
    while not stop.is_set():
        items = endpoint.receive_all(blocking=False)
        if not items:
            time.sleep(0.001)
            continue
        t = time.time()
        for version, weights in items:
            times_q.put((i, version, t, weights.nbytes))
    endpoint.stop()


def tls_bc_trainer(port, local_port, max_buf, n_workers, reps, pause, times_q, out_q):
    endpoint = tls_endpoint(port, local_port, "trainers", max_buf)
    weights = np.random.default_rng(0).standard_normal((PARAMS_SIDE, PARAMS_SIDE), dtype=np.float32)
    latency, encode = [], []
    for version in range(reps + 1):  # version 0: warm-up and proof that every worker is connected
        t = time.time()
        endpoint.broadcast((version, weights), "workers")  # pickles on this thread, then hands it over
        got: dict[int, float] = {}
        while len(got) < n_workers:
            i, v, tr, _ = times_q.get(timeout=300)
            if v == version:
                got[i] = tr
        if version > 0:
            latency.append(max(got.values()) - t)
            start = time.perf_counter()
            pickle.dumps((version, weights))
            encode.append(time.perf_counter() - start)
        time.sleep(pause)
    out_q.put(("trainer", {"latency": latency, "with_encode": latency, "encode": encode,
                           "blob_bytes": len(pickle.dumps(weights))}))
    endpoint.stop()


def tls_throughput(args) -> dict:
    ctx = mp.get_context("spawn")
    ready_q, out_q, cmd_q = ctx.Queue(), ctx.Queue(), ctx.Queue()
    relay_stop, worker_stop = ctx.Event(), ctx.Event()
    delivered = ctx.Array("q", args.workers, lock=False)  # written by the trainer only
    port = free_port()
    procs: list = []
    try:
        relay = ctx.Process(target=child, name="tlspyo relay",
                            args=("tls_relay", port, free_port(), ready_q, relay_stop))
        relay.start()
        procs.append(relay)
        get(ready_q, START_TIMEOUT, procs, "the tlspyo relay")
        trainer = ctx.Process(target=child, name="tlspyo trainer",
                              args=("tls_tp_trainer", port, free_port(), args.tlspyo_max_buf, args.workers,
                                    args.window, delivered, cmd_q, out_q))
        trainer.start()
        procs.append(trainer)
        get(out_q, START_TIMEOUT, procs, "the tlspyo trainer")
        workers = [ctx.Process(target=child, name=f"tlspyo worker {i}",
                               args=("tls_tp_worker", i, port, free_port(), args.tlspyo_max_buf, args.window,
                                     args.chunk, delivered, ready_q, worker_stop, out_q))
                   for i in range(args.workers)]
        for w in workers:
            w.start()
            procs.append(w)
        for _ in workers:
            get(ready_q, START_TIMEOUT, procs, "the tlspyo workers")
        t0 = time.time() + args.warmup
        cmd_q.put((t0, t0 + args.seconds))
        cpu = measure_cpu({"relay": [relay], "trainer": [trainer], "workers": workers}, t0, t0 + args.seconds)
        tag, measured = get(out_q, 120, procs, "the tlspyo trainer's figures")
        assert tag == "trainer", tag
        worker_stop.set()
        stats, trainer_total = [], None
        while len(stats) < len(workers) or trainer_total is None:
            msg = get(out_q, 120, procs, "the tlspyo totals")
            if msg[0] == "worker":
                stats.append(msg)
            else:
                trainer_total = msg[1]
    finally:
        relay_stop.set()
        worker_stop.set()
        stop_processes(procs, join_s=15.0)
    sent = sum(s[2]["chunks"] for s in stats)
    return {"transitions_per_s": measured["transitions"] / measured["seconds"],
            "mb_per_s": measured["bytes"] / measured["seconds"] / 1e6,
            "chunks_per_s": measured["chunks"] / measured["seconds"],
            "chunks_sent": sent, "chunks_received": trainer_total["total"], "drops": sent - trainer_total["total"],
            "cpu": cpu,
            "exactly_once": trainer_total["total"] == sent}


def tls_broadcast(args) -> dict:
    ctx = mp.get_context("spawn")
    ready_q, out_q, times_q = ctx.Queue(), ctx.Queue(), ctx.Queue()
    relay_stop, worker_stop = ctx.Event(), ctx.Event()
    port = free_port()
    procs: list = []
    try:
        relay = ctx.Process(target=child, name="tlspyo relay",
                            args=("tls_relay", port, free_port(), ready_q, relay_stop))
        relay.start()
        procs.append(relay)
        get(ready_q, START_TIMEOUT, procs, "the tlspyo relay")
        workers = [ctx.Process(target=child, name=f"tlspyo worker {i}",
                               args=("tls_bc_worker", i, port, free_port(), args.tlspyo_max_buf, worker_stop, times_q))
                   for i in range(args.bcast_workers)]
        for w in workers:
            w.start()
            procs.append(w)
        trainer = ctx.Process(target=child, name="tlspyo trainer",
                              args=("tls_bc_trainer", port, free_port(), args.tlspyo_max_buf, args.bcast_workers,
                                    args.reps, args.pause,
                                    times_q, out_q))
        trainer.start()
        procs.append(trainer)
        tag, result = get(out_q, 300 + args.reps * (args.pause + 30), procs, "the tlspyo broadcast figures")
        assert tag == "trainer", tag
    finally:
        relay_stop.set()
        worker_stop.set()
        stop_processes(procs, join_s=15.0)
    return result


def tlspyo_child(args) -> None:
    """Entry point inside the tlspyo virtualenv: one measurement, one JSON line on stdout."""
    import importlib.metadata

    import tlspyo  # noqa: F401  (fail here, clearly, if the interpreter lacks it)

    result = tls_throughput(args) if args.child_what == "throughput" else tls_broadcast(args)
    print("RESULT " + json.dumps({"version": importlib.metadata.version("tlspyo"), **result}), flush=True)


# ---------------------------------------------------------------- anchor launch (parent side)


def _kill_group(pgid: int) -> None:
    """SIGKILL whatever is left in the anchor's process group (its own session: only what it started)."""
    for pid in _all_pids():
        st = _proc_stat(pid)
        if st is not None and st[1] == pgid and pid != os.getpid():
            kill_if_same(pid, st[2])


def anchor_unavailable(args) -> str | None:
    """Why the tlspyo anchor cannot run, or None."""
    python = args.tlspyo_python
    if not python:
        return "no --tlspyo-python given"
    if not os.path.exists(python):
        return f"--tlspyo-python {python} does not exist"
    check = subprocess.run([python, "-c", "import tlspyo, numpy"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": ""})
    if check.returncode:
        return f"{python} cannot import tlspyo and numpy: {check.stderr.strip().splitlines()[-1:]}"
    return None


def run_anchor(args, what: str, window: int, max_buf: int) -> dict:
    """One tlspyo measurement in the other interpreter, in a session of its own that is emptied after."""
    cmd = [args.tlspyo_python, os.path.abspath(__file__), "--child", "tlspyo", "--child-what", what,
           "--seconds", str(args.seconds), "--warmup", str(args.warmup), "--workers", str(args.workers),
           "--chunk", str(args.chunk), "--window", str(window), "--bcast-workers", str(args.bcast_workers),
           "--reps", str(args.reps), "--pause", str(args.pause), "--tlspyo-max-buf", str(max_buf)]
    env = {**os.environ, "PYTHONPATH": ""}  # nothing of this environment leaks into the other one
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=args.anchor_timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the tlspyo {what} run did not finish within {args.anchor_timeout:.0f} s") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill_group(proc.pid)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"the tlspyo {what} run failed (exit code {proc.returncode}; its stderr is above)")
    return json.loads(lines[-1][len("RESULT "):])


def run_anchor_retry(args, what: str, window: int, max_buf: int) -> dict:
    try:
        return run_anchor(args, what, window, max_buf)
    except RuntimeError as exc:
        print(f"  {exc}; trying once more", flush=True)
        return run_anchor(args, what, window, max_buf)


def size_label(n: int) -> str:
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


# ---------------------------------------------------------------- orchestration and report


def code_version() -> str:
    """The relayrl commit measured, and whether relayrl/net differs from it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "relayrl/net"], cwd=root, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + uncommitted changes in relayrl/net" if dirty else "")


def background_cores(seconds: float = 1.0) -> float:
    """Cores busy on the machine while this benchmark runs nothing (other users' load)."""
    before, start = _machine_busy_seconds(), time.time()
    time.sleep(seconds)
    return (_machine_busy_seconds() - before) / (time.time() - start)


def wait_quiet(args) -> float:
    """Wait (up to --quiet-wait s) for the machine's background load to fall under --quiet-cores;
    returns the last background load seen."""
    deadline = time.monotonic() + args.quiet_wait
    while True:
        load = background_cores()
        if load <= args.quiet_cores or time.monotonic() >= deadline:
            if load > args.quiet_cores:
                print(f"  (machine still busy with {load:.2f} cores of other work; measuring anyway)", flush=True)
            return load
        time.sleep(4.0)


def fmt(value, digits: int) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "n/a"
    return f"{value:,.{digits}f}"


def median_of(runs: list[dict], key: str) -> float | None:
    return statistics.median(r[key] for r in runs) if runs else None


def own_cores(cpu: dict[str, float]) -> float:
    """Cores the measured system's processes used (relay, trainer, workers)."""
    return sum(v for k, v in cpu.items() if k != "machine")


def with_workers(args, n: int) -> argparse.Namespace:
    """``args`` for one worker count (the roles read ``args.workers`` as an int)."""
    return argparse.Namespace(**{**vars(args), "workers": n})


def load_average() -> float:
    return os.getloadavg()[0]


def report(args, systems: list[str], tp: dict, bc: dict, tls_version: str | None, reason: str | None) -> None:
    print(f"\n{args.chunk}-transition chunks (169 B/transition), {args.seconds:g} s after {args.warmup:g} s warm-up, "
          f"median of {args.rounds} round(s), windows {args.windows}"
          + (f"; tlspyo {tls_version}" if tls_version else ""))
    anchors = [s for s in systems if s.startswith("tlspyo")]
    ours = [s for s in systems if not s.startswith("tlspyo")]
    width = max(14, *(len(s) + 2 for s in systems))
    for n in args.workers:
        best = {s: max(args.windows, key=lambda w, s=s: median_of(tp[(s, n, w)], "transitions_per_s"))
                for s in systems}
        rate = {s: median_of(tp[(s, n, best[s])], "transitions_per_s") for s in systems}
        print(f"\n{n} workers: transitions/s at the best window (median of rounds)")
        print(f"{'window':>8}" + "".join(f"{s:>{width}}" for s in systems))
        for window in args.windows:
            print(f"{window:>8}" + "".join(f"{fmt(median_of(tp[(s, n, window)], 'transitions_per_s'), 0):>{width}}"
                                           for s in systems))
        print(f"{'best':>8}" + "".join(f"{fmt(rate[s], 0):>{width}}" for s in systems))
        # per core-second of the system's own processes: steadier than the rate on a shared machine
        per_core = {s: statistics.median(r["transitions_per_s"] / max(1e-9, own_cores(r["cpu"]))
                                         for r in tp[(s, n, best[s])]) for s in systems}
        print(f"{'per core':>8}" + "".join(f"{fmt(per_core[s], 0):>{width}}" for s in systems)
              + "   (transitions per CPU-second of relay + trainer + workers)")
        if anchors:
            strongest = max(rate[a] for a in anchors)  # the better tlspyo setting (plain: it has no encryption)
            print("   ratio to the best tlspyo: " + ", ".join(f"{s} {rate[s] / strongest:.3f}" for s in ours))
            core_anchor = max(per_core[a] for a in anchors)
            print("   ratio per core-second: " + ", ".join(f"{s} {per_core[s] / core_anchor:.3f}" for s in ours))
            per_round = {s: [r["transitions_per_s"] for r in tp[(s, n, best[s])]] for s in systems}
            rounds = [max(per_round[a][k] for a in anchors) for k in range(args.rounds)]
            print("   round by round: " + "; ".join(
                f"{s} " + ", ".join(f"{v / t:.2f}" for v, t in zip(per_round[s], rounds)) for s in ours))
        for s in systems:
            runs = [r for w in args.windows for r in tp[(s, n, w)]]
            sent, received = sum(r["chunks_sent"] for r in runs), sum(r["chunks_received"] for r in runs)
            drops = sum(r["drops"] for r in runs)
            once = all(r["exactly_once"] for r in runs)
            loads = [r["load"] for r in runs]
            cpu = tp[(s, n, best[s])][0]["cpu"]
            print(f"   {s}: {sent:,} chunks sent, {received:,} received, drops {drops}, exactly once: {once}; "
                  f"load average {min(loads):.2f} to {max(loads):.2f}; cores (round 1, best window): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()))
    if bc:
        summary = {s: summarize_broadcast(bc[s]) for s in systems if bc.get(s)}
        print(f"\nbroadcast of {PARAMS_SIDE ** 2:,} float32 parameters to {args.bcast_workers} workers, "
              f"{args.reps} publishes per round:")
        for s, one in summary.items():
            print(f"   {s}: median {one['median_ms']:.1f} ms, p90 {one['p90_ms']:.1f} ms, incl. encode "
                  f"{one['with_encode_median_ms']:.1f} ms, message {one['blob_bytes']:,} bytes")
    if reason:
        print(f"tlspyo anchor skipped: {reason}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="throughput measurement length")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--workers", type=int, nargs="+", default=[4, 32],
                        help="sending workers (throughput), each count measured")
    parser.add_argument("--chunk", type=int, default=256, help="transitions per chunk")
    parser.add_argument("--windows", type=int, nargs="+", default=[32],
                        help="unacknowledged chunks per worker, each measured (<= the worker backlog, 256)")
    parser.add_argument("--window", type=int, help=argparse.SUPPRESS)  # the tlspyo child's one window
    parser.add_argument("--relay-window", type=int, help="chunks in flight from the relay to the trainer "
                        "(default: the relay's, as `relayrl serve --window`)")
    parser.add_argument("--profile-relay", metavar="PATH", help="cProfile the relay of each relayrl throughput run "
                        "into PATH (pstats; the last run's is kept)")
    parser.add_argument("--bcast-workers", type=int, default=8, help="receiving workers (broadcast)")
    parser.add_argument("--reps", type=int, default=20, help="publishes measured per round (after one warm-up)")
    parser.add_argument("--pause", type=float, default=0.2, help="seconds between publishes")
    parser.add_argument("--no-broadcast", action="store_true", help="skip the broadcast runs")
    parser.add_argument("--rounds", type=int, default=1, help="repeat everything, alternating the systems")
    parser.add_argument("--no-curve", action="store_true", help="skip the CURVE runs")
    parser.add_argument("--skip-ours", action="store_true", help="only the anchor (for checking it)")
    parser.add_argument("--tlspyo-python", help="interpreter of a virtualenv with tlspyo and numpy (the anchor)")
    parser.add_argument("--tlspyo-max-bufs", type=int, nargs="+", default=[2**16],
                        help="tlspyo max_buf_len settings, each an anchor column; ratios use the better one "
                        f"(default 64 KiB, faster here than TMRL's {TLS_MAX_BUF})")
    parser.add_argument("--tlspyo-max-buf", type=int, default=TLS_MAX_BUF, help=argparse.SUPPRESS)  # the child's
    parser.add_argument("--anchor-timeout", type=float, default=900.0, help="seconds per tlspyo run")
    parser.add_argument("--quiet-cores", type=float, default=0.3,
                        help="before each run, wait for other processes to use at most this many cores")
    parser.add_argument("--quiet-wait", type=float, default=60.0, help="... but no longer than this (s)")
    parser.add_argument("--json", help="also write every run's figures here")
    parser.add_argument("--from-json", metavar="PATH", help="print the report of a run saved with --json, measure nothing")
    parser.add_argument("--child", choices=["tlspyo"], help=argparse.SUPPRESS)
    parser.add_argument("--child-what", choices=["throughput", "broadcast"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if max(args.windows + [args.window or 0]) > 256:
        parser.error("a window must not exceed the worker backlog (256), or the backlog drops chunks")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: no orphans
    if args.child == "tlspyo":
        args.workers = args.workers[0]
        tlspyo_child(args)
        return

    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        tp = {}
        for key, runs in saved["throughput"].items():
            s, n, w = key.split("|")
            tp[(s, int(n), int(w))] = runs
        systems = list(dict.fromkeys(key[0] for key in tp))
        run_args = argparse.Namespace(**saved["args"])
        report(run_args, systems, tp, {s: v for s, v in saved["broadcast"].items() if v}, saved["tlspyo_version"], None)
        return
    reason = anchor_unavailable(args)
    systems = ([] if args.skip_ours else ["ours"] + ([] if args.no_curve else ["ours CURVE"]))
    anchor_buf = {} if reason else {f"tlspyo buf {size_label(b)}": b for b in args.tlspyo_max_bufs}
    systems += list(anchor_buf)
    if not systems:
        raise SystemExit(f"nothing to measure: tlspyo anchor unavailable ({reason})")
    version = code_version()
    print(f"relayrl {version}", flush=True)
    tp: dict = {(s, n, w): [] for s in systems for n in args.workers for w in args.windows}
    bc: dict = {s: [] for s in systems}
    tls_version = None
    with tempfile.TemporaryDirectory(prefix="relayrl-bench-keys-") as keys_dir:
        if "ours CURVE" in systems:
            from relayrl.net.keys import generate

            generate(keys_dir, ["trainer"] + [f"w{i}" for i in range(max(*args.workers, args.bcast_workers))],
                     trainers=("trainer",))
        keys = {"ours": None, "ours CURVE": keys_dir}
        for r in range(args.rounds):
            order = systems if r % 2 == 0 else systems[::-1]  # alternate who goes first, against drift
            for n in args.workers:
                one = with_workers(args, n)
                for window in args.windows:
                    for s in order:
                        wait_quiet(args)
                        load = load_average()
                        if s in anchor_buf:
                            result = run_anchor_retry(one, "throughput", window, anchor_buf[s])
                            tls_version = result["version"]
                        else:
                            result = run_ours_throughput(one, keys[s], window)
                        result["load"] = max(load, load_average())
                        tp[(s, n, window)].append(result)
                        print(f"round {r + 1}, {n} workers, window {window}, {s}: {result['transitions_per_s']:,.0f} "
                              f"transitions/s, drops {result['drops']}, exactly once {result['exactly_once']}, "
                              f"load average {result['load']:.2f}, cores "
                              f"{', '.join(f'{k} {v:.2f}' for k, v in result['cpu'].items())}", flush=True)
            for s in ([] if args.no_broadcast else order):
                wait_quiet(args)
                if s in anchor_buf:
                    result = run_anchor_retry(with_workers(args, args.workers[0]), "broadcast", 0, anchor_buf[s])
                else:
                    result = run_ours_broadcast(args, keys[s])
                bc[s].append(result)
                one = summarize_broadcast([result])
                print(f"round {r + 1} broadcast, {s}: median {one['median_ms']:.1f} ms, p90 {one['p90_ms']:.1f} ms",
                      flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "relayrl": version, "tlspyo_version": tls_version, "broadcast": bc,
                       "throughput": {f"{s}|{n}|{w}": v for (s, n, w), v in tp.items()}}, f, indent=1)
    report(args, systems, tp, {s: v for s, v in bc.items() if v}, tls_version, reason)
    if args.profile_relay:
        import pstats

        print(f"\nthe relay's profile (last relayrl run, {args.profile_relay}):")
        pstats.Stats(args.profile_relay).sort_stats("tottime").print_stats(15)
    print(f"relayrl {version}")
    if code_version() != version:
        print(f"WARNING: the code changed during the run (now {code_version()}): the rounds may differ")


if __name__ == "__main__":
    main()
