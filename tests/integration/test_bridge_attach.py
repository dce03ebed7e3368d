"""`relayrl train ... --env bridge:attach`: the trainer waits at the editor path for a simulator started by
hand (here by the test, as a user would at a terminal), says where and how, survives the editor
pressing play again, handles Ctrl-C while it waits and gives up with one message when nobody comes."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

PROMPT = "waiting for a simulator to attach to "


class Trainer:
    """`relayrl train ... --env bridge:attach` at a terminal (or another relayrl command, ``command``); a
    thread collects its stderr lines."""

    def __init__(self, tmp_path, *args: str, command: tuple[str, ...] = ()):
        env = dict(os.environ, RELAYRL_BRIDGE_DIR=str(tmp_path / "bridge"))
        command = command or ("train", "ppo", "--env", "bridge:attach", "--run-dir", str(tmp_path / "run"), "--quiet",
                              "--no-tensorboard")
        self.proc = subprocess.Popen([sys.executable, "-m", "relayrl", *command, *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     start_new_session=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_for_prompt(self, timeout_s: float = 60) -> str:
        """Up to the trainer's next 'waiting for a simulator' line; the path it names."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                continue
            self.seen.append(line)
            if PROMPT in line:
                return line.split(PROMPT, 1)[1].split(";", 1)[0]
        raise AssertionError("the trainer never said where it waits:\n" + self.output())

    def wait(self, timeout_s: float) -> int:
        code = self.proc.wait(timeout=timeout_s)
        time.sleep(0.2)  # the reader's last lines
        return code

    def output(self) -> str:
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return "".join(self.seen)


def simulator(path: str, *args: str) -> subprocess.Popen:
    """The example simulator, started by hand with the command the trainer printed."""
    return subprocess.Popen([sys.executable, "-m", "relayrl.bridge.examples.ball3d", "--memory-path", path,
                             "--agents", "3", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_training_attaches_to_an_editor_and_survives_play_pressed_again(tmp_path):
    trainer = Trainer(tmp_path, "--total-steps", "1200", "--set", "ppo.num_steps=16", "--set", "eval.freq=300",
                      "--set", "eval.episodes=3")
    sims = []
    try:
        path = trainer.wait_for_prompt()
        assert path == str(tmp_path / "bridge" / "editor")
        assert f"python -m relayrl.bridge.examples.ball3d --memory-path {path}" in trainer.seen[-1]
        sims.append(simulator(path, "--close-after", "120"))  # the editor leaves play mode after 120 turns
        assert trainer.wait_for_prompt() == path  # ... and the trainer waits for the next play
        assert sims[0].wait(timeout=30) == 0
        sims.append(simulator(path))
        code = trainer.wait(300)
    finally:
        for proc in [trainer.proc, *sims]:
            if proc.poll() is None:
                proc.kill()
    output = trainer.output()
    assert code == 0, output[-3000:]
    assert sims[1].wait(timeout=30) == 0, "the trainer closes the second simulator normally at the end"
    assert "the attached simulator went away" in output, output[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["env_steps"] >= 1200 and summary["last_eval_return"] is not None
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["env/bridge_attaches"] for m in metrics if "env/bridge_attaches" in m][-1] == 1
    assert not list((tmp_path / "bridge").iterdir()), "the channel's files are removed"

    # relayrl eval of the run waits for an attach the same way
    evaluation = Trainer(tmp_path, command=("eval", str(tmp_path / "run"), "--episodes", "3"))
    try:
        sims.append(simulator(evaluation.wait_for_prompt()))
        code = evaluation.wait(120)
        out = evaluation.proc.stdout.read()
    finally:
        for proc in [evaluation.proc, *sims]:
            if proc.poll() is None:
                proc.kill()
    assert code == 0, evaluation.output()[-3000:]
    assert out.startswith("bridge:attach: return ") and "over 3 episodes" in out, out
    assert sims[2].wait(timeout=30) == 0


def test_ctrl_c_while_waiting_exits_130_and_removes_the_channel(tmp_path):
    trainer = Trainer(tmp_path, "--total-steps", "64")
    try:
        path = trainer.wait_for_prompt()
        assert os.path.exists(path)
        os.killpg(trainer.proc.pid, signal.SIGINT)  # Ctrl-C at the trainer's terminal
        code = trainer.wait(60)
    finally:
        if trainer.proc.poll() is None:
            trainer.proc.kill()
    output = trainer.output()
    assert code == 130, output[-2000:]
    assert "Traceback" not in output
    assert not list((tmp_path / "bridge").iterdir()), "the editor channel's files are removed"


def test_an_attach_that_never_sees_a_simulator_ends_with_one_message(tmp_path):
    trainer = Trainer(tmp_path, "--total-steps", "64", "--set", "env.kwargs={timeout_s: 2}")
    code = trainer.wait(120)
    output = trainer.output()
    errors = [line for line in output.splitlines() if line.startswith("relayrl: error:")]
    assert code == 3, output[-2000:]
    assert len(errors) == 1 and "no simulator attached to" in errors[0] and "within 2 s" in errors[0], output[-2000:]
    assert "Traceback" not in output
    assert not list((tmp_path / "bridge").iterdir())
