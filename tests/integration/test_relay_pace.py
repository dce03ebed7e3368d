"""Waits on a peer, as real processes on 127.0.0.1: a trainer whose relay is not there says so and stops
on Ctrl-C; a worker steps nothing without a relay or a trainer, says what it waits for, and stops on
Ctrl-C; with a real trainer the worker collects only what the trainer takes, and stops when it exits."""

from __future__ import annotations

import os
import re
import signal
import time

from relay_procs import finish, free_port, output, relayrl, stop, tails, wait_listening  # same folder

STARTUP_S = 120.0  # generous: a loaded 2-core machine starts a Python with torch slowly
QUICK = ["--set=net.heartbeat_s=0.2"]


def wait_said(proc, text: str, timeout: float = STARTUP_S) -> None:
    deadline = time.monotonic() + timeout
    while text not in output(proc):
        assert proc.poll() is None, f"exited before saying {text!r}:\n{tails(proc)}"
        assert time.monotonic() < deadline, f"did not say {text!r} within {timeout:.0f} s:\n{tails(proc)}"
        time.sleep(0.05)


def interrupt(proc) -> float:
    """Ctrl-C (SIGINT to the process); the seconds it took to exit."""
    started = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    proc.wait(timeout=30)
    return time.monotonic() - started


def worker_totals(text: str) -> dict[str, int]:
    match = re.search(r"worker done: (\d+) env steps, (\d+) chunks sent, (\d+) acknowledged, \d+ refused by the "
                      r"trainer, (\d+) dropped from the backlog", text)
    assert match, text[-2000:]
    return dict(zip(("env_steps", "sent", "acked", "backlog_drops"), map(int, match.groups())))


def test_a_trainer_whose_relay_is_not_there_says_so_and_stops_on_ctrl_c(tmp_path):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    trainer = relayrl("train", "sac", "--env", "Pendulum-v1", "--server", address, "--run-dir", str(tmp_path / "run"),
                      "--quiet", "--no-tensorboard", *QUICK)
    try:
        wait_said(trainer, f"waiting for the relay at {address}")
        took = interrupt(trainer)
        assert trainer.returncode == 130 and took < 10, (took, tails(trainer))
    finally:
        stop(trainer)


def test_a_worker_steps_nothing_without_a_relay_or_a_trainer_and_says_what_it_waits_for(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    worker = relayrl("worker", "--server", address, "--env", "Pendulum-v1", f"--set=net.weights_dir={tmp_path / 'w'}",
                     *QUICK)
    relay = None
    try:
        wait_said(worker, f"waiting for the relay at {address}")
        relay = relayrl("serve", "--bind", address)
        wait_listening(relay)
        wait_said(worker, f"waiting for a trainer at the relay {address}")
        took = interrupt(worker)
        assert worker.returncode == 130 and took < 10, (took, tails(worker))
        assert worker_totals(output(worker))["env_steps"] == 0
    finally:
        stop(*[p for p in (worker, relay) if p is not None])


def test_a_worker_collects_what_the_trainer_takes_and_stops_when_it_exits(tmp_path):
    """Window 8 chunks of 8 steps: the worker runs at most 64 env steps ahead of what the trainer took
    (unpaced it made ~20 times the trainer's steps, most dropped from its backlog), drops nothing, and
    counts the trainer's acknowledgements."""
    address = f"127.0.0.1:{free_port()}"
    relay = relayrl("serve", "--bind", address)
    sac = ["--set=sac.steps_per_iteration=8", "--set=sac.hidden_sizes=[32,32]", "--set=sac.start_training=200",
           "--set=env.num_envs=1"]
    trainer = worker = None
    try:
        wait_listening(relay)
        trainer = relayrl("train", "sac", "--env", "Pendulum-v1", "--server", address, "--run-dir",
                          str(tmp_path / "run"), "--total-steps", "800", "--quiet", "--no-tensorboard",
                          "--set=eval.freq=0", "--set=eval.episodes=1", "--set=eval.num_envs=1", *sac, *QUICK)
        worker = relayrl("worker", "--server", address, "--env", "Pendulum-v1", f"--set=net.weights_dir={tmp_path / 'w'}",
                         "--set=net.window=8", *sac, *QUICK)
        finish(trainer, timeout=300)
        assert trainer.returncode == 0, tails(trainer, worker, relay)
        took = int(re.search(r"Pendulum-v1: (\d+) env steps", output(trainer)).group(1))
        deadline = time.monotonic() + 60  # the trainer is gone: the worker says it waits for one, its last word
        while "waiting for a trainer at the relay" not in (output(worker).rstrip().splitlines() or [""])[-1]:
            assert time.monotonic() < deadline and worker.poll() is None, tails(worker)
            time.sleep(0.05)
        os.kill(worker.pid, signal.SIGTERM)
        totals = worker_totals(finish(worker, timeout=60))
        assert took <= totals["env_steps"] <= took + 8 * 8 + 8, (took, totals)
        assert totals["backlog_drops"] == 0 and totals["acked"] * 8 >= took, (took, totals)
    finally:
        stop(*[p for p in (trainer, worker) if p is not None])
        stop(relay)
