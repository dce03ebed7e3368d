"""Relay soak: a relay, a trainer and ``--workers`` workers for ``--minutes``, with the memory (RSS)
of every process sampled over time. Outside the default test suite (a test runs it for a few
seconds so it keeps working).

Every role is its own process on loopback (multiprocessing "spawn"), as in benchmarks/relay.py: the
relay (``Relay(RelayOptions(bind="127.0.0.1:0", max_queue_mb=...))``), the trainer (a
``RelayClient`` that receives and acknowledges every chunk) and the workers (``RelayClient``s
sending chunks of ``--chunk`` SAC-like transitions, 169 B each, keeping at most ``--window``
unacknowledged, optionally at most ``--rate`` chunks/s each). Every ``--sample-s`` seconds the
parent reads each process's VmRSS from /proc; at the end it writes a CSV (time_s, role, pid,
rss_mb), draws RSS over time per role (relay, trainer, and the workers' median with their
min-max band) into a PNG, and prints transitions/s, the relay's drops (``drops``,
``dropped_bytes``), the workers' backlog drops, and each role's RSS growth from the end of
``--warmup-s`` to the end.

The figure of docs/benchmarks.md ("Relay"), on an idle machine:

    python benchmarks/soak.py --minutes 10 --workers 32 --png docs/img/soak_rss.png --csv /tmp/soak_rss.csv

Exit status 1 if a chunk was lost or repeated (the trainer's count per worker differs from what the
worker had acknowledged), or a role died.
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing as mp
import os
import statistics
import sys
import time
import traceback

import numpy as np

from relay import get, make_chunk  # (benchmarks/relay.py: the same SAC-like chunks, the same fail-fast get)

N_CHUNKS = 8  # distinct pre-built chunks each worker cycles through
START_TIMEOUT = 60.0


def rss_mb(pid: int) -> float | None:
    """VmRSS of a live process in MiB (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def child(fn, *args) -> None:
    try:
        fn(*args)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


# ---------------------------------------------------------------- roles (spawned children)


def relay_role(max_queue_mb: float, port_q, stop, out_q) -> None:
    from relayrl.net.relay import Relay, RelayOptions

    relay = Relay(RelayOptions(bind="127.0.0.1:0", max_queue_mb=max_queue_mb))
    port_q.put(int(relay.endpoint.rsplit(":", 1)[1]))
    relay.serve(stop, log=None)
    out_q.put(("relay", dict(relay.counters)))


def trainer_role(port: int, ready_q, stop, out_q) -> None:
    from relayrl.net.client import RelayClient

    client = RelayClient(f"127.0.0.1:{port}", "trainer", name="trainer")
    try:
        if not client.wait_connected(START_TIMEOUT):
            raise RuntimeError("trainer: no welcome from the relay")
        ready_q.put("trainer")
        transitions, per_worker = 0, {}
        while not stop.is_set():
            msgs = client.receive(0.1)
            if msgs:
                client.ack(msgs)
                for m in msgs:
                    per_worker[m.sender] = per_worker.get(m.sender, 0) + 1
                    transitions += m.arrays["obs"].shape[0]
        out_q.put(("trainer", {"transitions": transitions, "per_worker": per_worker}))
    finally:
        client.close()


def worker_role(i: int, port: int, window: int, chunk: int, rate: float, ready_q, stop, out_q) -> None:
    from relayrl.net.client import RelayClient

    client = RelayClient(f"127.0.0.1:{port}", "worker", name=f"w{i}")
    try:
        if not client.wait_connected(START_TIMEOUT):
            raise RuntimeError(f"worker w{i}: no welcome from the relay")
        rng = np.random.default_rng(i)
        chunks = [make_chunk(chunk, rng) for _ in range(N_CHUNKS)]
        ready_q.put(i)
        sent, start = 0, time.monotonic()
        while not stop.is_set():
            if rate and sent >= rate * (time.monotonic() - start):
                time.sleep(0.001)
                continue
            if not client.wait_unacknowledged(window, 0.1):  # woken by the acks
                continue
            client.send_samples(chunks[sent % N_CHUNKS], version=0, meta={"env_steps": chunk})
            sent += 1
        deadline = time.monotonic() + 30
        while client.unacknowledged() and time.monotonic() < deadline:  # the last ones acknowledged
            time.sleep(0.01)
        out_q.put(("worker", i, {"sent": sent, "unacknowledged": client.unacknowledged(), **client.stats}))
    finally:
        client.close()


# ---------------------------------------------------------------- parent


def stop_all(procs: list) -> None:
    deadline = time.monotonic() + 10
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(2.0)
        if p.is_alive():
            p.kill()
            p.join(2.0)


def run(args) -> dict:
    ctx = mp.get_context("spawn")
    port_q, ready_q, out_q = ctx.Queue(), ctx.Queue(), ctx.Queue()
    relay_stop, trainer_stop, worker_stop = ctx.Event(), ctx.Event(), ctx.Event()
    procs: list = []
    samples: list[tuple[float, str, int, float]] = []
    try:
        relay = ctx.Process(target=child, name="relay", args=(relay_role, args.max_queue_mb, port_q, relay_stop, out_q))
        relay.start()
        procs.append(relay)
        port = get(port_q, START_TIMEOUT, procs, "the relay's port")
        trainer = ctx.Process(target=child, name="trainer", args=(trainer_role, port, ready_q, trainer_stop, out_q))
        trainer.start()
        procs.append(trainer)
        workers = [ctx.Process(target=child, name=f"worker {i}",
                               args=(worker_role, i, port, args.window, args.chunk, args.rate, ready_q, worker_stop,
                                     out_q)) for i in range(args.workers)]
        for w in workers:
            w.start()
            procs.append(w)
        for _ in range(args.workers + 1):
            get(ready_q, START_TIMEOUT, procs, "the roles' connections")
        roles = {relay.pid: "relay", trainer.pid: "trainer", **{w.pid: "worker" for w in workers}}
        start = time.monotonic()
        end = start + args.minutes * 60
        while True:
            now = time.monotonic()
            for pid, role in roles.items():
                value = rss_mb(pid)
                if value is not None:
                    samples.append((now - start, role, pid, value))
            dead = [p.name for p in procs if p.exitcode is not None]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} stopped during the soak (its traceback is above)")
            if now >= end:
                break
            time.sleep(max(0.0, min(args.sample_s, end - time.monotonic())))
        seconds = time.monotonic() - start
        worker_stop.set()
        stats = [get(out_q, 60, procs, "the workers' totals") for _ in workers]
        trainer_stop.set()
        tag, trainer_total = get(out_q, 30, procs, "the trainer's totals")
        assert tag == "trainer", tag
        relay_stop.set()
        tag, counters = get(out_q, 30, procs, "the relay's counters")
        assert tag == "relay", tag
    finally:
        relay_stop.set()
        trainer_stop.set()
        worker_stop.set()
        stop_all(procs)
    per_worker = trainer_total["per_worker"]
    lost = {f"w{i}": (s["acked"], per_worker.get(f"w{i}", 0)) for _, i, s in stats
            if s["acked"] - s["relay_drops"] != per_worker.get(f"w{i}", 0)}
    return {"seconds": seconds, "samples": samples, "relay": counters, "workers": stats, "lost": lost,
            "transitions": trainer_total["transitions"]}


def growth(samples: list, role: str, after: float) -> tuple[float, float, float]:
    """(RSS at the end of warm-up, at the end, growth) in MiB for ``role``: the sum over its
    processes for relay and trainer, the median process for workers."""
    def at(t_pick) -> float:
        times = sorted({t for t, r, _, _ in samples if r == role})
        t = t_pick(times)
        values = [v for s_t, r, _, v in samples if r == role and s_t == t]
        return statistics.median(values) if role == "worker" else sum(values)
    first = at(lambda ts: next((t for t in ts if t >= after), ts[-1]))
    last = at(lambda ts: ts[-1])
    return first, last, last - first


def write_csv(path: str, samples: list) -> None:
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["time_s", "role", "pid", "rss_mb"])
        for t, role, pid, value in samples:
            out.writerow([f"{t:.2f}", role, pid, f"{value:.1f}"])


def draw(path: str, samples: list, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for role, color in (("relay", "tab:red"), ("trainer", "tab:blue")):
        points = [(t / 60, v) for t, r, _, v in samples if r == role]
        ax.plot([p[0] for p in points], [p[1] for p in points], color=color, label=role)
    by_time: dict[float, list[float]] = {}
    for t, role, _, value in samples:
        if role == "worker":
            by_time.setdefault(t, []).append(value)
    times = sorted(by_time)
    minutes = [t / 60 for t in times]
    ax.plot(minutes, [statistics.median(by_time[t]) for t in times], color="tab:green", label="workers (median)")
    ax.fill_between(minutes, [min(by_time[t]) for t in times], [max(by_time[t]) for t in times], color="tab:green",
                    alpha=0.2, label="workers (min to max)")
    ax.set_xlabel("minutes")
    ax.set_ylabel("RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--chunk", type=int, default=256, help="transitions per chunk")
    parser.add_argument("--window", type=int, default=32, help="unacknowledged chunks per worker")
    parser.add_argument("--rate", type=float, default=0.0, help="chunks/s per worker (0: as fast as acknowledged)")
    parser.add_argument("--max-queue-mb", type=float, default=256.0, help="the relay's queue bound")
    parser.add_argument("--sample-s", type=float, default=5.0, help="seconds between RSS samples")
    parser.add_argument("--warmup-s", type=float, default=60.0, help="RSS growth is counted from here")
    parser.add_argument("--csv", default="soak_rss.csv", help="RSS samples written here")
    parser.add_argument("--png", default="soak_rss.png", help="the RSS chart drawn here")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.workers < 1 or args.sample_s <= 0:
        parser.error("--minutes and --sample-s must be > 0 and --workers >= 1")
    load_before = os.getloadavg()[0]
    result = run(args)
    samples = result["samples"]
    write_csv(args.csv, samples)
    relay, workers = result["relay"], result["workers"]
    rate = result["transitions"] / result["seconds"]
    backlog_drops = sum(s["backlog_drops"] for _, _, s in workers)
    title = (f"relay soak: {args.workers} workers, {args.minutes:g} min, {rate:,.0f} transitions/s, "
             f"relay drops {relay['drops']}")
    draw(args.png, samples, title)
    warm = min(args.warmup_s, result["seconds"] / 2)
    print(f"{args.workers} workers for {result['seconds']:.0f} s (load average {load_before:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after): {rate:,.0f} transitions/s to the trainer, "
          f"{relay['chunks_out']:,} chunks")
    print(f"drops: relay {relay['drops']} ({relay['dropped_bytes']:,} bytes), worker backlogs {backlog_drops}; "
          f"duplicates {relay['duplicates']}, rejects {relay['rejects']}")
    for role in ("relay", "trainer", "worker"):
        first, last, grown = growth(samples, role, warm)
        what = "median worker" if role == "worker" else role
        print(f"RSS {what}: {first:.1f} MiB at {warm:.0f} s, {last:.1f} MiB at the end ({grown:+.1f} MiB)")
    print(f"wrote {args.csv} and {args.png}")
    if result["lost"]:
        print(f"chunks lost or repeated (acknowledged, received) per worker: {result['lost']}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
