"""Soak: a relay, a trainer and 8 workers for a minute; no process's memory keeps growing."""

from __future__ import annotations

import json
import time

import pytest

from relay_procs import SLOW_PENDULUM, free_port, relayrl, stop, tails, wait_listening  # same folder

WARMUP_S, MEASURE_S = 20.0, 45.0


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.mark.slow
@pytest.mark.soak
def test_eight_workers_for_a_minute_with_bounded_memory(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    relay = relayrl("serve", "--bind", address, "--max-queue", "256", "--metrics", str(tmp_path / "relay.jsonl"),
                    "--metrics-every", "5")
    procs = [relay]
    try:
        wait_listening(relay)
        trainer = relayrl("train", "sac", "--env", "Pendulum-v1", "--server", address, "--run-dir",
                          str(tmp_path / "run"), "--total-steps", "100000000", "--quiet", "--no-tensorboard",
                          "--set=sac.buffer_size=20000", "--set=sac.update_model_interval=50",
                          "--set=eval.freq=100000000", "--set=net.heartbeat_s=0.5")
        procs.append(trainer)
        for k in range(8):
            procs.append(relayrl("worker", "--server", address, "--env", SLOW_PENDULUM, "--name", f"w{k}",
                                 "--set=env.kwargs={sleep_us: 2000, busy_us: 0}", "--set=net.heartbeat_s=0.5",
                                 "--set=net.backlog=64", f"--set=net.weights_dir={tmp_path / f'w{k}'}"))
        time.sleep(WARMUP_S)  # imports done, replay buffer full, queues at their steady depth
        assert all(p.poll() is None for p in procs), tails(*[p for p in procs if p.poll() is not None])
        before = {p.pid: rss_mb(p.pid) for p in procs}
        time.sleep(MEASURE_S)
        assert all(p.poll() is None for p in procs)
        after = {p.pid: rss_mb(p.pid) for p in procs}
        grown = {pid: round(after[pid] - before[pid], 1) for pid in before if after[pid] > before[pid] * 1.1 + 20}
        assert not grown, f"RSS grew (MB) in {grown}; before {before}, after {after}"
        lines = (tmp_path / "relay.jsonl").read_text().splitlines()
        last = json.loads(lines[-1])
        assert last["workers"] == 8 and last["trainer"] == 1
        assert last["queue_depth"] <= 256 and last["chunks_out"] > 0
    finally:
        stop(*procs[1:])  # clients first: a relay gone first would make them wait for acknowledgements
        stop(relay)
        assert not [p for p in procs if p.poll() is None]
