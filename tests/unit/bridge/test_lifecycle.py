"""Who stops whom (docs/bridge-protocol.md §6): a launched simulator that ignores the close is killed
with its whole process group after the grace period; it runs in its own session, so a Ctrl-C at the
trainer's terminal reaches the trainer only; a Python simulator whose trainer stalls times out, exits 3
and removes the channel's files."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from relayrl.bridge import BridgeEnv
from relayrl.bridge import env as env_module

ECHO = [sys.executable, "-m", "relayrl.bridge.examples.echo_sim"]


def gone(pid: int) -> bool:
    """The process has exited (reaped, or a zombie nobody reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# Hands over once and never looks at the channel again; its helper process shares its process group.
DEAF_SIM = textwrap.dedent("""
    import subprocess, sys, time
    from relayrl.bridge.channel import Channel
    from relayrl.bridge.world import memory_path_from_args
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(helper.pid, flush=True)
    Channel.attach(memory_path_from_args()).hand_over()
    time.sleep(600)
""")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_simulator_that_ignores_the_close_is_killed_with_its_process_group(tmp_path, monkeypatch):
    grace = 1.0
    monkeypatch.setattr(env_module, "CLOSE_GRACE_S", grace)
    log = tmp_path / "sim.log"
    env = BridgeEnv([sys.executable, "-c", DEAF_SIM], timeout_s=20, directory=tmp_path / "bridge", log_path=log)
    helper = int(log.read_text().split()[0])  # printed before the handshake, which BridgeEnv waited for
    try:
        assert os.getpgid(helper) == env.proc.pid, "the helper is in the simulator's process group"
        start = time.monotonic()
        env.close()
        took = time.monotonic() - start
        assert grace * 0.9 <= took < grace + 5, f"close took {took:.2f} s with a {grace} s grace period"
        assert env.returncode == -signal.SIGKILL
        assert wait_gone(helper, 5), "the simulator's helper process outlived the kill of its process group"
    finally:
        if not gone(helper):
            os.kill(helper, signal.SIGKILL)
    assert list((tmp_path / "bridge").iterdir()) == []


def test_a_simulator_that_closes_is_not_kept_waiting_for_the_grace_period(tmp_path):
    env = BridgeEnv(ECHO, timeout_s=20, directory=tmp_path / "bridge")
    start = time.monotonic()
    env.close()
    assert time.monotonic() - start < env_module.CLOSE_GRACE_S and env.returncode == 0


# A trainer in its own process group, as at a terminal; Ctrl-C sends SIGINT to that whole group.
TRAINER_AT_A_TERMINAL = textwrap.dedent(f"""
    import faulthandler, signal
    faulthandler.register(signal.SIGUSR1)  # the test asks for every thread's stack if this hangs
    # Ctrl-C as at a terminal, even when pytest runs as a background job of a script, which starts with SIGINT
    # ignored (and Python then installs no KeyboardInterrupt handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from relayrl.bridge import BridgeEnv
    env = BridgeEnv({ECHO!r}, timeout_s=20)
    print(env.proc.pid, flush=True)
    try:
        while True:
            env.step()
    except KeyboardInterrupt:
        env.close()
        print("simulator exit", env.returncode, flush=True)
""")


def test_the_simulator_runs_in_its_own_session_so_ctrl_c_reaches_only_the_trainer():
    terminal = subprocess.Popen([sys.executable, "-c", TRAINER_AT_A_TERMINAL], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert select.select([terminal.stdout], [], [], 60)[0], "the trainer did not start its simulator"
        sim = int(terminal.stdout.readline())
        assert os.getsid(sim) == sim and os.getpgid(sim) == sim, "the simulator must lead a new session"
        assert os.getsid(sim) != os.getsid(terminal.pid)
        time.sleep(0.3)  # a few turns
        os.killpg(terminal.pid, signal.SIGINT)  # Ctrl-C: the terminal's foreground process group
        try:
            out, err = terminal.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # where it hung, for the record
            terminal.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
            terminal.kill()
            try:  # (the simulator, in its own session, may still hold the pipes)
                out, err = terminal.communicate(timeout=10)
            except subprocess.TimeoutExpired as exc:
                err = exc.stderr or ""
            pytest.fail(f"the trainer did not exit within 30 s of Ctrl-C; its threads:\n{err}")
    finally:
        if terminal.poll() is None:
            terminal.kill()
            terminal.wait()
    # a simulator hit by the SIGINT would die of a KeyboardInterrupt (exit 1); one closed by its trainer exits 0
    assert out.strip() == "simulator exit 0", err


STALLING_TRAINER = textwrap.dedent("""
    import sys, time
    from relayrl.bridge import BridgeEnv
    env = BridgeEnv(attach=True, directory=sys.argv[1], timeout_s=30)
    for _ in range(3):
        env.step()
    print("ready", flush=True)
    time.sleep(600)
""")


def test_a_python_simulator_whose_trainer_stalls_times_out_and_cleans_up(tmp_path):
    folder = tmp_path / "bridge"
    trainer = subprocess.Popen([sys.executable, "-c", STALLING_TRAINER, str(folder)], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    sim = subprocess.Popen([*ECHO, "--memory-path", str(folder / "editor"), "--bridge-timeout", "1"],
                           stderr=subprocess.PIPE, text=True)
    try:
        assert select.select([trainer.stdout], [], [], 60)[0] and trainer.stdout.readline().strip() == "ready"
        trainer.send_signal(signal.SIGSTOP)  # alive, holding its turn, never answering
        start = time.monotonic()
        code = sim.wait(timeout=60)
        took = time.monotonic() - start
        err = sim.stderr.read()
    finally:
        for proc in (trainer, sim):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert code == 3, err
    assert 0.8 < took < 15, took
    assert "trainer did not answer within 1 s" in err and "Traceback" not in err, err
    assert list(folder.iterdir()) == [], "a simulator whose trainer stalled removes the channel's files"
