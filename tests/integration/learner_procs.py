"""Helpers of the learner-group tests: `relayrl train` runs, their metrics, and a supervised run in a session of
its own whose processes can be listed (/proc) and signalled."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

QUICK = ["--set", "env.manager=sync", "--set", "eval.episodes=2", "--set", "eval.num_envs=2", "--quiet",
         "--no-tensorboard"]
PPO = ["ppo", "--env", "CartPole-v1", "--stop-value", "100000", "--set", "env.num_envs=4", "--set", "ppo.num_steps=32",
       "--set", "ppo.batch_size=64", "--set", "ppo.epochs=2", *QUICK]
# a long run whose every round evaluates (the last checkpoint exists from the first round on)
LONG = [*PPO, "--total-steps", "10000000", "--set", "eval.freq=128", "--set", "learner_timeout_s=6"]


def train(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "relayrl", "train", *args], capture_output=True, text=True,
                          timeout=timeout)


def records(run_dir: Path, event: str = "train") -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if record["event"] == event]


def run_files(run_dir: Path) -> set[str]:
    return {str(path.relative_to(run_dir)) for path in run_dir.rglob("*")}



class Supervised:
    """`relayrl train` in a session of its own, its stderr in a file (the learners' pids are read from it)."""

    def __init__(self, tmp_path: Path, *args: str):
        self.run_dir, self.err_path = tmp_path / "run", tmp_path / "stderr.txt"
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "relayrl", "train", *args, "--run-dir", str(self.run_dir)],
                                     stdout=subprocess.DEVNULL, stderr=self.err, start_new_session=True)

    def stderr(self) -> str:
        return self.err_path.read_text()

    def learner_pids(self, deadline_s: float = 90) -> dict[int, int]:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            found = re.search(r"learners started[^(]*\(([^)]*)\)", self.stderr())
            if found:
                return {int(rank): int(pid) for rank, pid in re.findall(r"learner (\d+) pid (\d+)", found.group(1))}
            assert self.proc.poll() is None, self.stderr()[-3000:]
            time.sleep(0.1)
        raise AssertionError(f"no learners started: {self.stderr()[-3000:]}")

    def wait_for_checkpoint(self, deadline_s: float = 90) -> None:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end and not (self.run_dir / "checkpoints" / "last.json").is_file():
            assert self.proc.poll() is None, self.stderr()[-3000:]
            time.sleep(0.1)
        assert (self.run_dir / "checkpoints" / "last.json").is_file(), self.stderr()[-3000:]
        time.sleep(0.5)  # (a few rounds in)

    def wait(self, deadline_s: float) -> tuple[int, float]:
        started = time.monotonic()
        try:
            code = self.proc.wait(timeout=deadline_s)
        finally:
            self.close()
        return code, time.monotonic() - started

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for pid in session_processes(self.proc.pid):  # (a failed test leaves nothing running either)
            os.kill(pid, signal.SIGKILL)
        self.err.close()


def session_processes(sid: int) -> list[int]:
    """The processes of session ``sid`` still alive (zombies aside), from /proc."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # (state, ppid, pgrp, session)
            pids.append(int(entry))
    return pids


def assert_nothing_left(sid: int) -> None:
    end = time.monotonic() + 10  # (multiprocessing's resource tracker ends once it sees the supervisor gone)
    while session_processes(sid) and time.monotonic() < end:
        time.sleep(0.1)
    assert session_processes(sid) == []
