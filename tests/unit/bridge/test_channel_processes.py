"""The bridge between real processes: the Python simulator SDK against the trainer side, and every way
the channel can fail (dead peers, timeouts, version mismatch, corrupt header, unsafe directory)."""

from __future__ import annotations

import os
import signal
import stat
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from conformance import check_conformance  # same folder
from relayrl.bridge import BridgeEnv, BridgeError, BridgeTimeout, PeerDied, VersionMismatch
from relayrl.bridge import layout as L
from relayrl.bridge.channel import BridgeClosed, Channel, bridge_dir, remove_stale

HERE = Path(__file__).parent
ECHO = [sys.executable, "-m", "relayrl.bridge.examples.echo_sim"]


def channel_files(env_or_path) -> list[Path]:
    path = env_or_path.memory_path if isinstance(env_or_path, BridgeEnv) else env_or_path
    return [p for p in path.parent.iterdir() if p.name.startswith(path.name)]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_python_sdk_passes_the_conformance_scenario():
    check_conformance(ECHO)


def test_20000_turns_between_two_processes_lose_or_double_none():
    env = BridgeEnv([sys.executable, str(HERE / "counter_sim.py")], timeout_s=30)
    action = np.zeros((1, 1), np.float32)
    turns = 20_000  # (100k took ~28 s of the suite; a lost or doubled turn shows up within a few thousand)
    try:
        for k in range(turns):
            decisions, _ = env.get_steps("count")
            assert decisions.obs[0][0, 0] == k
            action[0, 0] = k
            env.set_actions("count", continuous=action)
            env.step()
        assert env.channel.turn == 2 * turns + 1
    finally:
        env.close()
    assert env.returncode == 0


def test_a_killed_trainer_stops_the_simulator_which_cleans_up(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        from relayrl.bridge import BridgeEnv
        env = BridgeEnv({ECHO!r}, args=["--bridge-timeout", "20"])
        print(env.memory_path, env.proc.pid, flush=True)
        time.sleep(600)
    """)
    trainer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        path, pid = trainer.stdout.readline().split()
        path, pid = Path(path), int(pid)
        os.kill(trainer.pid, signal.SIGKILL)
        trainer.wait()
        start = time.monotonic()
        while time.monotonic() - start < 15 and Path(f"/proc/{pid}").exists() and \
                "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]:
            time.sleep(0.05)
        took = time.monotonic() - start
        assert took < 5, f"the simulator still ran {took:.1f} s after its trainer died (timeout 20 s)"
        assert not channel_files(path), "the simulator left the channel files behind"
    finally:
        trainer.kill()


def test_a_killed_simulator_is_reported_at_once_and_the_files_go():
    env = BridgeEnv(ECHO, timeout_s=30)
    try:
        os.killpg(env.proc.pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(PeerDied, match="simulator died"):
            env.step()
        assert time.monotonic() - start < 2
    finally:
        env.close()
    assert not channel_files(env)


def test_a_silent_simulator_times_out_without_burning_cpu():
    env = BridgeEnv(ECHO, timeout_s=1.5)
    os.kill(env.proc.pid, signal.SIGSTOP)  # alive, but never answers
    try:
        cpu, start = time.thread_time(), time.monotonic()
        with pytest.raises(BridgeTimeout, match="did not answer within 1.5 s"):
            env.step()
        assert 1.4 < time.monotonic() - start < 4
        assert time.thread_time() - cpu < 0.2, "the waiting trainer spun instead of sleeping"
        assert not channel_files(env)
    finally:
        os.kill(env.proc.pid, signal.SIGCONT)
        env.close()


def test_an_idle_simulator_waits_without_cpu():
    env = BridgeEnv(ECHO, timeout_s=30)
    try:
        before = cpu_seconds(env.proc.pid)
        time.sleep(2.0)  # the simulator waits for actions all this time
        assert cpu_seconds(env.proc.pid) - before < 0.1
        env.step()  # and still answers
    finally:
        env.close()


def test_a_protocol_version_mismatch_stops_both_sides_naming_both_versions():
    channel = Channel.create(timeout_s=20)
    struct.pack_into("<HH", channel.header, L.OFF_TRAINER_VERSION, 9, 3)
    sim = subprocess.Popen([*ECHO, "--memory-path", str(channel.header_path)], stderr=subprocess.PIPE, text=True)
    try:
        simulator = r"%d\.%d" % L.VERSION
        with pytest.raises(VersionMismatch, match=rf"simulator speaks bridge protocol {simulator}, the trainer 9\.3"):
            channel.wait_turn()
        assert sim.wait(10) == 2
        assert "9.3" in sim.stderr.read()
    finally:
        channel.close()
        sim.kill()
    assert not channel_files(channel.header_path)


def test_a_header_that_is_not_a_bridge_header_is_a_clear_error(tmp_path):
    folder = tmp_path / "bridge"
    folder.mkdir(mode=0o700)
    header = folder / "0123"
    header.write_bytes(b"GARBAGE!" + bytes(56))
    run = subprocess.run([*ECHO, "--memory-path", str(header), "--bridge-timeout", "2"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 4 and "not a relayrl bridge header" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    header.write_bytes(b"short")
    run = subprocess.run([*ECHO, "--memory-path", str(header), "--bridge-timeout", "2"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 4 and "a header is 64" in run.stderr, run.stderr


def test_a_corrupted_header_mid_run_ends_both_sides_with_a_protocol_error():
    env = BridgeEnv(ECHO, timeout_s=20)
    try:
        struct.pack_into("<I", env.channel.header, L.OFF_GENERATION, 99)  # a body generation that does not exist
        with pytest.raises(BridgeClosed, match="protocol error") as info:
            env.step()
        assert info.value.reason == L.PROTOCOL_ERROR
    finally:
        env.close()
    assert env.returncode == 4


def test_actions_are_checked_against_the_decisions():
    env = BridgeEnv(ECHO, timeout_s=20)
    try:
        n = len(env.get_steps("echo")[0])
        with pytest.raises(BridgeError, match=rf"shape \(3, 2\), expected \({n}, 2\)"):
            env.set_actions("echo", continuous=np.zeros((3, 2)))
        with pytest.raises(BridgeError, match="out of range"):
            env.set_actions("echo", discrete=np.full((n, 2), 3))
        with pytest.raises(BridgeError, match="no behaviour 'nope'.*'echo'"):
            env.get_steps("nope")
        env.set_actions("echo", continuous=np.ones((n, 2), np.float64))  # cast to float32
        for _ in range(6):
            env.step()
        assert len(env.get_steps("late")[0]) == 4
    finally:
        env.close()


def test_views_are_zero_copy_and_copy_keeps_a_turn():
    env = BridgeEnv(ECHO, timeout_s=20)
    try:
        decisions, _ = env.get_steps("echo")
        kept = decisions.copy()
        assert not decisions.obs[0].flags.owndata and kept.obs[0].flags.owndata
        env.step()
        assert (decisions.obs[0][:, 1] == 1).all()  # the view shows the new turn (t = 1)
        assert (kept.obs[0][:, 1] == 0).all()  # the copy kept t = 0
    finally:
        env.close()


def test_attach_mode_waits_for_a_running_simulator(tmp_path):
    folder = tmp_path / "bridge"
    sim = subprocess.Popen([*ECHO, "--memory-path", str(folder / "editor"), "--bridge-timeout", "30"])
    try:
        time.sleep(0.3)  # the simulator is up first and waits for the channel
        with BridgeEnv(attach=True, directory=folder, timeout_s=30) as env:
            assert env.memory_path == folder / "editor"
            assert "echo" in env.behaviours
            env.step()
        assert sim.wait(10) == 0
    finally:
        sim.kill()


def test_the_bridge_directory_must_be_private(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    with pytest.raises(BridgeError, match="must be yours and 0700"):
        bridge_dir(shared)
    fresh = bridge_dir(tmp_path / "fresh")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700


def test_stale_channels_of_dead_trainers_are_removed(tmp_path):
    folder = bridge_dir(tmp_path / "b")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    (folder / "abc").write_bytes(L.new_header(pid))
    (folder / "abc.3").write_bytes(b"x")
    (folder / "abc.ts").write_bytes(b"")
    (folder / "live").write_bytes(L.new_header(os.getpid()))
    assert remove_stale(folder) == 1
    assert sorted(p.name for p in folder.iterdir()) == ["live"]


def test_a_reset_handler_and_side_channels_from_the_simulator(tmp_path):
    """A simulator that sends its own side-channel message at start and counts resets."""
    script = textwrap.dedent("""
        import uuid
        from relayrl.bridge import World, SideChannel
        from relayrl.bridge.world import CLOSED, RESET
        stats = SideChannel(uuid.UUID(int=7))
        world = World(side_channels=[stats])
        resets = []
        world.on_reset(lambda: resets.append(1))
        world.register("b", 2, [(1,)], branches=(2,))
        stats.queue(b"hello from the simulator")
        while True:
            world.request_decision("b", 0).set_observation(0, [len(resets)])
            status = world.step()
            if status == CLOSED:
                break
    """)
    from relayrl.bridge import SideChannel
    import uuid

    stats = SideChannel(uuid.UUID(int=7))
    with BridgeEnv([sys.executable, "-c", script], timeout_s=20, side_channels=[stats]) as env:
        assert stats.received == [b"hello from the simulator"]
        env.reset()
        env.reset()
        assert env.get_steps("b")[0].obs[0][0, 0] == 2
    assert env.returncode == 0


def test_a_missing_simulator_executable_is_named():
    with pytest.raises(BridgeError, match="the simulator command '/no/such/sim' was not found"):
        BridgeEnv("/no/such/sim --flag")


def test_a_simulator_that_exits_before_the_handshake_is_reported():
    with pytest.raises(PeerDied, match="simulator died"):
        BridgeEnv([sys.executable, "-c", "import sys; sys.exit(3)"], timeout_s=20)
