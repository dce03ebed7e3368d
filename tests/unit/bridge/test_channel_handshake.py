"""The handshake and the wait, trainer and Python simulator side (docs/bridge-protocol.md §4, §5): the
trainer checks the simulator's protocol version itself, a channel takes one simulator, a simulator that
dies right after handing over is a dead peer (not an OSError), and spin_us=0 means no spin."""

from __future__ import annotations

import errno
import os
import struct
import subprocess
import sys
import textwrap
import threading

import pytest

from relayrl.bridge import BridgeEnv, BridgeError, PeerDied, VersionMismatch, World
from relayrl.bridge import layout as L
from relayrl.bridge import channel as C
from relayrl.bridge.channel import Channel

ECHO = [sys.executable, "-m", "relayrl.bridge.examples.echo_sim"]

# A simulator that writes the version it is given and carries on without closing (as a careless SDK
# of another major version might), then reports how the trainer stopped it.
CARELESS_SIM = textwrap.dedent("""
    import struct, sys
    from relayrl.bridge import layout as L
    from relayrl.bridge.channel import BridgeError, Channel
    from relayrl.bridge.world import memory_path_from_args
    channel = Channel.attach(memory_path_from_args())
    struct.pack_into("<HH", channel.header, L.OFF_SIM_VERSION, int(sys.argv[1]), int(sys.argv[2]))
    channel.hand_over()
    try:
        channel.wait_turn()
    except BridgeError as exc:
        print("stopped:", type(exc).__name__, exc.reason, flush=True)
""")


@pytest.mark.parametrize("version, shown", [((2, 1), r"2\.1"), ((0, 0), r"0\.0 \(0\.0: it never wrote its version")])
def test_the_trainer_refuses_a_simulator_of_another_major_version_that_does_not_close(tmp_path, version, shown):
    log, folder = tmp_path / "sim.log", tmp_path / "bridge"
    trainer = r"%d\.%d" % L.VERSION
    with pytest.raises(VersionMismatch, match=rf"simulator speaks bridge protocol {shown}.*the trainer {trainer}"):
        BridgeEnv([sys.executable, "-c", CARELESS_SIM, *map(str, version)], timeout_s=20, directory=folder,
                  log_path=log)
    assert "stopped: VersionMismatch 2" in log.read_text(), "the simulator must be told: close reason 2"
    assert list(folder.iterdir()) == []


def test_another_minor_version_is_compatible(tmp_path):
    log = tmp_path / "sim.log"
    with BridgeEnv([sys.executable, "-c", CARELESS_SIM, "1", "7"], timeout_s=20, directory=tmp_path / "b",
                   log_path=log) as env:
        assert env.channel.simulator_version == (1, 7) and env.behaviours == {}
    assert "stopped: BridgeClosed 1" in log.read_text()


def test_a_channel_takes_one_simulator_and_a_second_leaves_it_alone(tmp_path):
    trainer = Channel.create(tmp_path / "bridge", timeout_s=5)
    first = Channel.attach(trainer.header_path, timeout_s=5)
    try:
        before = bytes(trainer.header)
        with pytest.raises(BridgeError, match=rf"already attached \(simulator pid {os.getpid()}, turn 0\): one "
                                              "simulator per channel"):
            Channel.attach(trainer.header_path, timeout_s=5)
        with pytest.raises(BridgeError, match="already attached"):
            World(str(trainer.header_path), timeout_s=5)
        run = subprocess.run([*ECHO, "--memory-path", str(trainer.header_path), "--bridge-timeout", "2"],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 4 and "already attached" in run.stderr and "Traceback" not in run.stderr, run.stderr
        assert bytes(trainer.header) == before, "a refused simulator wrote into the channel"
        first.hand_over()  # the first simulator goes on undisturbed
        trainer.wait_turn()
        trainer.finish_handshake()
        with pytest.raises(BridgeError, match="already attached .*turn 1"):
            Channel.attach(trainer.header_path, timeout_s=5)
    finally:
        first.close()
        trainer.close()


def test_a_simulator_that_dies_right_after_its_handshake_is_reported_as_dead(tmp_path):
    """Its doorbell has no reader when the trainer opens it (ENXIO): PeerDied, not a raw OSError."""
    folder, errors = tmp_path / "bridge", []

    def attach_and_die():
        try:
            channel = Channel.attach(folder / "editor", timeout_s=20)
            for fd in (channel.bell_in, channel.bell_out):  # what the kernel does when the process dies
                os.close(fd)
            channel.bell_in = channel.bell_out = -1
            channel.hand_over()  # the handshake turn arrives, but nobody is left to read the doorbell
        except BaseException as exc:
            errors.append(exc)

    sim = threading.Thread(target=attach_and_die, daemon=True)
    sim.start()
    with pytest.raises(PeerDied, match="simulator died right after its handshake"):
        BridgeEnv(attach=True, directory=folder, timeout_s=20)
    sim.join(10)
    assert errors == [] and list(folder.iterdir()) == []


def test_the_simulators_doorbell_has_a_reader_as_soon_as_the_header_exists(tmp_path, monkeypatch):
    """A simulator may attach the moment the header appears (attach mode polls for it): its
    non-blocking open of NAME.st for writing must find the trainer reading (§4), not fail with ENXIO."""
    found, rename = [], os.rename

    def rename_then_attach(src, dst):
        rename(src, dst)
        try:
            os.close(os.open(f"{dst}.st", os.O_WRONLY | os.O_NONBLOCK))
            found.append("a reader")
        except OSError as exc:
            found.append(errno.errorcode[exc.errno])

    monkeypatch.setattr(os, "rename", rename_then_attach)
    Channel.create(tmp_path / "bridge").close()
    assert found == ["a reader"]


def test_a_simulator_attaching_after_its_trainer_exited_is_told_so(tmp_path):
    trainer = Channel.create(tmp_path / "bridge", timeout_s=5)
    os.close(trainer.bell_in)  # the trainer's process is gone: nobody reads its doorbell
    trainer.bell_in = -1
    try:
        with pytest.raises(PeerDied, match="trainer of .* has exited"):
            Channel.attach(trainer.header_path, timeout_s=5)
        assert list((tmp_path / "bridge").iterdir()) == [], "a simulator whose trainer died removes the files"
    finally:
        trainer.close()


# (mean wait, maximum) in seconds -> budget: twice the mean, clamped to [20 us, max]; 20 us when the peer
# is usually slower than the maximum; never more than the maximum, so a maximum of 0 means no spin.
# test_c_golden.py holds the C library to the same cases.
SPIN_CASES = [((0.0, 500e-6), 20e-6), ((5e-6, 500e-6), 20e-6), ((100e-6, 500e-6), 200e-6),
              ((300e-6, 500e-6), 500e-6), ((1e-3, 500e-6), 20e-6), ((100e-6, 10e-6), 10e-6),
              ((0.0, 0.0), 0.0), ((100e-6, 0.0), 0.0), ((1e-3, 0.0), 0.0)]


def test_the_spin_budget_and_spin_us_0_never_spins():
    assert C.SPIN_MIN_S == 20e-6
    for (mean, maximum), budget in SPIN_CASES:
        assert C.spin_budget(mean, maximum) == pytest.approx(budget, abs=1e-12), (mean, maximum)


def test_a_python_pair_that_never_spins_still_exchanges_turns(tmp_path):
    trainer = Channel.create(tmp_path / "bridge", timeout_s=10, spin_us=0)
    sim = Channel.attach(trainer.header_path, timeout_s=10, spin_us=0)
    sim.handshaken = True

    def answer(turns: int):
        for _ in range(turns):
            sim.hand_over()
            sim.wait_turn()

    thread = threading.Thread(target=answer, args=(50,), daemon=True)
    try:
        thread.start()
        for _ in range(50):
            trainer.wait_turn()
            trainer.finish_handshake()
            trainer.hand_over()
        thread.join(10)
        assert not thread.is_alive() and trainer.turn == 100
        assert struct.unpack_from("<Q", trainer.header, L.OFF_TURN)[0] == 100
    finally:
        sim.close()
        trainer.close()
