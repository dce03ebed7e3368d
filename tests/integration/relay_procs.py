"""relayrl command-line processes for the relay integration tests.

Each process writes to its own log file, never to a pipe nobody reads: a chatty process blocked on a
full pipe looks exactly like a deadlock in the code under test. ``output(proc)`` reads the log,
``tails(...)`` gives the last lines of several for an assertion message.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SLOW_PENDULUM = "relayrl.testing.envs:relayrl-test/SlowPendulum-v0"
_LOGS = Path(tempfile.mkdtemp(prefix="relayrl-test-logs-"))
_counter = itertools.count()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def relayrl(*args: str, netns: str | None = None, **kwargs) -> subprocess.Popen:
    """Start ``python -m relayrl ARGS`` in its own session, output (stdout and stderr) to a log file."""
    cmd = [sys.executable, "-m", "relayrl", *args]
    if netns is not None:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    log = _LOGS / f"{next(_counter):03d}-{args[0]}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, **kwargs)
    proc.log = log  # type: ignore[attr-defined]
    return proc


def output(proc: subprocess.Popen) -> str:
    return proc.log.read_text(errors="replace")  # type: ignore[attr-defined]


def tails(*procs: subprocess.Popen | None, chars: int = 1500) -> str:
    """The end of each process's log, labelled, for an assertion message."""
    parts = []
    for proc in procs:
        if proc is not None:
            state = "running" if proc.poll() is None else f"exit {proc.returncode}"
            parts.append(f"--- {' '.join(map(str, proc.args[2:5]))} ({state}):\n{output(proc)[-chars:]}")
    return "\n".join(parts)


def finish(proc: subprocess.Popen, timeout: float) -> str:
    """Wait for a process to exit by itself; return its output."""
    proc.wait(timeout=timeout)
    return output(proc)


def wait_listening(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "relay listening" in output(proc):
            return
        if proc.poll() is not None:
            raise AssertionError(f"relay exited: {output(proc)}")
        time.sleep(0.05)
    raise AssertionError(f"relay did not start: {output(proc)}")


def stop(*procs: subprocess.Popen) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def train_with_one_worker(algo: str, env: str, run_dir: Path, trainer_args: list[str], worker_args: list[str],
                          timeout: float = 120) -> None:
    """A relay, a `relayrl train ALGO --server` of one remote worker, and that worker: the trainer runs to its end
    (asserted to exit 0), then everything is stopped (the worker killed: a finished trainer acknowledges no more)."""
    address = f"127.0.0.1:{free_port()}"
    relay = relayrl("serve", "--bind", address, "--heartbeat", "0.2")
    trainer = worker = None
    try:
        wait_listening(relay)
        trainer = relayrl("train", algo, "--env", env, "--server", address, "--workers", "1", "--run-dir",
                          str(run_dir), "--quiet", "--no-tensorboard", *trainer_args)
        worker = relayrl("worker", "--server", address, "--env", env, "--algo", algo, "--name", "w0",
                         f"--set=net.weights_dir={run_dir.parent / 'w0'}", *worker_args)
        finish(trainer, timeout=timeout)
        assert trainer.returncode == 0, tails(trainer, relay, worker)
    finally:
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        stop(relay, *([trainer] if trainer is not None else []))
