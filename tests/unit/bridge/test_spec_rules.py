"""Rules of docs/bridge-protocol.md that the Python and the C simulator SDK follow alike: the order of
the handshake's checks (§5), closing with reason 4 before the FIFOs are open, the reason a side writes
when its peer closed (§6), reset and query in one turn, side-channel framing (§3.1) and a trainer's
growth that changes the RL region (§7). Each test runs both echo simulators (real processes) against a
trainer made by hand (``Channel``), so a rule the two SDKs read differently fails here."""

from __future__ import annotations

import mmap
import os
import struct
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from relayrl.bridge import BridgeClosed
from relayrl.bridge import layout as L
from relayrl.bridge.cbuild import build, have_compiler
from relayrl.bridge.channel import Channel

ECHO = [sys.executable, "-m", "relayrl.bridge.examples.echo_sim"]


@pytest.fixture(scope="module", params=["python", "c"])
def echo(request, tmp_path_factory) -> list[str]:
    if request.param == "python":
        return ECHO
    if not have_compiler():
        pytest.skip("no C compiler ($CC or cc)")
    return [str(build("echo_sim", tmp_path_factory.mktemp("cbuild")))]


@pytest.fixture
def trainer(tmp_path):
    channel = Channel.create(tmp_path / "bridge", timeout_s=20)
    yield channel
    channel.close()


def run(echo: list[str], header: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*echo, "--memory-path", str(header), "--bridge-timeout", "10"], capture_output=True,
                          text=True, timeout=60)


def header_bytes(channel: Channel) -> bytes:
    """The header without the trainer's keep-alive counter (its own thread bumps it meanwhile)."""
    return without_keep_alive(bytes(channel.header))


def without_keep_alive(raw: bytes) -> bytes:
    return raw[:L.OFF_TRAINER_ALIVE] + raw[L.OFF_TRAINER_ALIVE + 4:]


def rung(channel: Channel) -> bool:
    try:
        return bool(os.read(channel.bell_in, 16))
    except BlockingIOError:
        return False


def one_message(result: subprocess.CompletedProcess) -> str:
    err = result.stderr.strip()
    assert err and "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@contextmanager
def attached(echo: list[str], trainer: Channel, timeout: str = "10"):
    """The echo simulator attached and its handshake turn taken (it registered 'echo': generation 2)."""
    proc = subprocess.Popen([*echo, "--memory-path", str(trainer.header_path), "--bridge-timeout", timeout],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    trainer.peer_alive = lambda: proc.poll() is None
    try:
        trainer.wait_turn()
        trainer.finish_handshake()
        trainer.sync_body()
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def closed_with_protocol_error(trainer: Channel, proc: subprocess.Popen, message: str) -> None:
    trainer.write_side(trainer.read_side()[:0])
    trainer.hand_over()
    with pytest.raises(BridgeClosed, match=r"protocol error") as info:
        trainer.wait_turn()
    assert info.value.reason == L.PROTOCOL_ERROR
    assert proc.wait(20) == 4
    err = proc.stderr.read()
    assert message in err and "Traceback" not in err, err


# ---- §5: the handshake's checks, in order

def test_the_major_version_is_compared_before_the_rest_of_the_header_is_read(echo, trainer):
    """A trainer of major 2 may lay out bytes 16.. differently: the simulator reports the mismatch (2),
    not a corrupt header, and hands over without opening its FIFOs."""
    struct.pack_into("<HH", trainer.header, L.OFF_TRAINER_VERSION, 2, 0)
    struct.pack_into("<I", trainer.header, L.OFF_SIDE, 60)  # corrupt for 1.x
    result = run(echo, trainer.header_path)
    assert result.returncode == 2, result.stderr
    assert "2.0" in one_message(result) and "%d.%d" % L.VERSION in result.stderr
    raw = header_bytes(trainer)
    assert raw[L.OFF_SIM_CLOSED] == L.VERSION_MISMATCH and struct.unpack_from("<Q", raw, L.OFF_TURN)[0] == 1
    assert struct.unpack_from("<HH", raw, L.OFF_SIM_VERSION) == L.VERSION
    assert rung(trainer), "the simulator rings the trainer's doorbell"


def test_before_the_majors_match_a_simulator_writes_only_fields_every_major_shares(echo, trainer):
    """§5 step 5: a trainer of major 2 may give bytes 48.. another meaning, so the simulator's timeout (1.1)
    is written only once the majors match; on a mismatch it writes its version, pid, closed byte and turn."""
    struct.pack_into("<HH", trainer.header, L.OFF_TRAINER_VERSION, 2, 0)
    trainer.header[L.OFF_SIM_TIMEOUT:L.HEADER_SIZE] = bytes(range(0xA0, 0xAC))  # major 2's bytes, say
    before = bytes(trainer.header)
    result = run(echo, trainer.header_path)
    assert result.returncode == 2, result.stderr
    after = bytes(trainer.header)
    shared = {*range(L.OFF_SIM_VERSION, L.OFF_TURN + 8), L.OFF_SIM_CLOSED, *range(L.OFF_SIM_PID, L.OFF_SIM_PID + 4),
              *range(L.OFF_TRAINER_ALIVE, L.OFF_TRAINER_ALIVE + 4)}  # (the last: the trainer's own thread)
    changed = [i for i in range(L.HEADER_SIZE) if before[i] != after[i] and i not in shared]
    assert changed == [], f"the simulator wrote bytes {changed} of a major-2 header"


@pytest.mark.parametrize("timeout, ms", [("inf", 0), ("0", 0), ("-1", 0), ("2.0001", 2001), ("5e6", 0xFFFFFFFF)])
def test_the_simulator_publishes_its_timeout_in_ms_rounded_up_0_for_none(echo, trainer, timeout, ms):
    """§2: whole ms rounded up; 0 for no timeout (0, negative or infinite); FF FF FF FF caps a finite one."""
    with attached(echo, trainer, timeout):
        assert struct.unpack_from("<I", trainer.header, L.OFF_SIM_TIMEOUT)[0] == ms


@pytest.mark.parametrize("broken", ["S=60", "R=0", "body size", "missing body"])
def test_a_corrupt_channel_at_attach_closes_with_reason_4_without_handing_over(echo, trainer, broken):
    """Before its FIFOs are open: simulator_closed = 4, turn left at 0, one byte written to NAME.st
    (opened for writing just for that)."""
    if broken == "S=60":
        struct.pack_into("<I", trainer.header, L.OFF_SIDE, 60)
    elif broken == "R=0":
        struct.pack_into("<I", trainer.header, L.OFF_RL, 0)
    elif broken == "body size":
        os.truncate(trainer.body_path(1), 100)
    else:
        struct.pack_into("<I", trainer.header, L.OFF_GENERATION, 7)
    result = run(echo, trainer.header_path)
    assert result.returncode == 4, result.stderr
    one_message(result)
    raw = header_bytes(trainer)
    assert raw[L.OFF_SIM_CLOSED] == L.PROTOCOL_ERROR and struct.unpack_from("<Q", raw, L.OFF_TURN)[0] == 0
    assert rung(trainer)


@pytest.mark.parametrize("reason", [L.NORMAL, L.TIMEOUT])
def test_a_channel_whose_trainer_already_closed_is_left_alone(echo, trainer, reason):
    trainer.header[L.OFF_TRAINER_CLOSED] = reason
    before = header_bytes(trainer)
    result = run(echo, trainer.header_path)
    assert result.returncode == 4, result.stderr
    assert "already closed" in one_message(result) and L.REASONS[reason].split()[0] in result.stderr
    assert header_bytes(trainer) == before, "the simulator wrote into a closed channel"


def test_a_header_file_that_is_not_64_bytes_is_left_alone(echo, trainer):
    with open(trainer.header_path, "ab") as f:
        f.write(bytes(8))
    before = without_keep_alive(trainer.header_path.read_bytes())
    result = run(echo, trainer.header_path)
    assert result.returncode == 4, result.stderr
    assert "64" in one_message(result)
    assert without_keep_alive(trainer.header_path.read_bytes()) == before


# ---- §6: a side that stops because its peer closed writes reason 1

@pytest.mark.parametrize("reason, code", [(L.NORMAL, 0), (L.VERSION_MISMATCH, 2), (L.TIMEOUT, 4)])
def test_a_simulator_whose_trainer_closed_writes_reason_1(echo, trainer, reason, code):
    """The trainer's 1 is the end of the session (exit 0); any other reason is an error for the
    simulator (the examples exit 2 for a mismatch whichever side found it, else 4). Either way the
    simulator did nothing wrong: it writes 1."""
    with open(trainer.header_path, "r+b") as f:
        header = mmap.mmap(f.fileno(), L.HEADER_SIZE)  # still readable after the trainer removed the files
    try:
        with attached(echo, trainer) as proc:
            trainer.close(reason)
            assert proc.wait(20) == code, proc.stderr.read()
        assert header[L.OFF_TRAINER_CLOSED] == reason and header[L.OFF_SIM_CLOSED] == L.NORMAL
    finally:
        header.close()


# ---- §5, §3.1, §7: what the trainer hands over

def test_reset_and_query_in_one_turn_is_a_protocol_error(echo, trainer):
    with attached(echo, trainer) as proc:
        trainer.set_flag(L.OFF_RESET, 1)
        trainer.set_flag(L.OFF_QUERY, 1)
        closed_with_protocol_error(trainer, proc, "both reset and query")


def test_side_channel_records_that_do_not_parse_are_a_protocol_error(echo, trainer):
    with attached(echo, trainer) as proc:
        record = bytes(16) + struct.pack("<I", 100) + b"only"  # claims 100 bytes, 4 follow
        trainer.write_side(record)
        trainer.hand_over()
        with pytest.raises(BridgeClosed, match="protocol error") as info:
            trainer.wait_turn()
        assert info.value.reason == L.PROTOCOL_ERROR
        assert proc.wait(20) == 4
        assert "side-channel record" in proc.stderr.read()


def test_a_trainer_growth_that_changes_the_rl_region_is_a_protocol_error(echo, trainer):
    """The trainer grows its side channel and must copy the RL region verbatim (§7)."""
    with attached(echo, trainer) as proc:
        trainer.grow(trainer.side * 2, trainer.rl, keep_rl=True)
        struct.pack_into("<I", trainer.body, trainer.side + 8 + 4, 7)  # behaviour 0's N: 8 -> 7
        closed_with_protocol_error(trainer, proc, "changed the RL region")
