"""docs/library.md "A robot in Python" (TMRL's tutorial): the page shows examples/robot/ verbatim, and its three
scripts (relay, worker, trainer) train as separate processes on loopback."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROBOT = ROOT / "examples" / "robot"
# the page's blocks of the example: ```py fences (not ```python: test_examples.py runs those, in one process),
# each opening with the file's path
SHOWN = re.compile(r"```py\n(# examples/robot/(\w+)\.py\n.*?)```", re.S)


def shown_files() -> dict[str, str]:
    text = (ROOT / "docs" / "library.md").read_text()
    return {f"{name}.py": block for block, name in SHOWN.findall(text)}


def test_the_page_shows_every_file_of_the_example_as_it_is():
    shown = shown_files()
    files = {path.name: path.read_text() for path in ROBOT.glob("*.py") if path.name != "__init__.py"}
    assert {"env.py", "network.py", "algorithm.py", "config.py", "relay.py", "worker.py", "trainer.py",
            "memory.py"} <= set(files)
    assert set(shown) == set(files)
    for name, text in files.items():
        assert shown[name] == text, f"docs/library.md shows examples/robot/{name} other than it is"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(module: str, folder: Path, env: dict[str, str]) -> subprocess.Popen:
    """``python -m examples.robot.MODULE`` in ``folder``, its output to MODULE.log there (never a pipe)."""
    with open(folder / f"{module}.log", "w") as log:
        return subprocess.Popen([sys.executable, "-m", f"examples.robot.{module}"], cwd=folder, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def logs(folder: Path) -> str:
    return "\n".join(f"--- {p.name}:\n{p.read_text()[-2000:]}" for p in sorted(folder.glob("*.log")))


def test_relay_worker_and_trainer_scripts_train_as_separate_processes(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "ROBOT_RELAY": f"127.0.0.1:{free_port()}", "ROBOT_STEPS": "1500"}
    procs: list[subprocess.Popen] = []
    try:
        relay = start("relay", tmp_path, env)
        worker = start("worker", tmp_path, env)
        procs += [relay, worker]
        trainer = start("trainer", tmp_path, env)
        procs.append(trainer)
        assert trainer.wait(timeout=120) == 0, logs(tmp_path)
        # Ctrl-C ends the worker, then the relay, each cleanly
        worker.send_signal(signal.SIGINT)
        assert worker.wait(timeout=30) == 0, logs(tmp_path)
        relay.send_signal(signal.SIGINT)
        assert relay.wait(timeout=30) == 0, logs(tmp_path)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "Traceback" not in logs(tmp_path), logs(tmp_path)

    (run,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["backend"] == "relay" and summary["stop_reason"] == "total_steps"
    assert summary["env_steps"] >= 1500 and summary["updates"] > 0  # learned from the worker's samples: it had no other
    assert f"run in runs/{run.name}" in (tmp_path / "trainer.log").read_text()
    # the trainer's replay was the example's own memory (examples/robot/memory.py): its snapshot holds the samples
    from safetensors.numpy import load_file
    snapshot = load_file(str(run / "checkpoints" / "replay.safetensors"))
    assert "_next" in snapshot and len(snapshot["obs"]) >= 1500 - 50  # (a worker's last chunk may be in flight)

    done = re.search(r"worker done: (\d+) env steps, (\d+) chunks taken by the trainer, policy version (\d+)",
                     (tmp_path / "worker.log").read_text())
    assert done, logs(tmp_path)
    assert int(done.group(2)) > 0 and int(done.group(3)) > 0  # the trainer took its chunks; it acted with its weights
    (saved,) = (tmp_path / "relayrl-worker").glob("*/latest.json")  # and kept the newest it received
    assert json.loads(saved.read_text())["version"] == int(done.group(3))
