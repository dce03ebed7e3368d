"""The stats side channel (docs/bridge-protocol.md §3.1, since 1.2): both simulator SDKs write the same
golden records and refuse a bad stat at the call; the trainer's ``StatsChannel`` aggregates as asked
and stops with a protocol error naming what is wrong in a bad record; a 1.1 trainer is sent nothing;
the example simulators' "balls_dropped" reaches ``BridgeAgents.simulator_stats()``."""

from __future__ import annotations

import shlex
import struct
import subprocess
import sys

import numpy as np
import pytest

from relayrl.bridge import BridgeEnv, BridgeError
from relayrl.bridge import layout as L
from relayrl.bridge.cbuild import build, have_compiler
from relayrl.bridge.channel import Channel
from relayrl.bridge.sidechannel import STATS, StatsChannel, StatsRecorder, decode_stat, encode_stat
from test_c_golden import compile_program  # same folder

GOLDEN_STATS = bytes.fromhex("".join([
    "b7f7d8a1c8cef950b78bd3e165a78520", "11000000",  # stats channel (.NET Guid byte order), 17 bytes:
    "05000000", "676f616c73", "0000803f", "02000000",  # name length 5, "goals", 1.0, aggregation 2 (sum)
    "b7f7d8a1c8cef950b78bd3e165a78520", "0e000000",  # stats channel, 14 bytes:
    "02000000", "c3a9", "0000003f", "00000000",      # name length 2, "é" (UTF-8), 0.5, aggregation 0 (average)
]))

# A simulator that tries five bad stats (each refused at the call, nothing sent), then sends the two of
# GOLDEN_STATS and prints what each call returned; then it steps until the trainer closes.
PY_SIM = r"""
import sys
from relayrl.bridge import BridgeError, World
with World(timeout_s=20) as world:
    for args in [("", 1.0, "sum"), ("x" * 129, 1.0, "sum"), ("\udcff", 1.0, "sum"), ("goals", 1.0, "histogram"),
                 ("goals", float("nan"), "sum")]:
        try:
            world.stats.record(*args)
            print("accepted", args[0])
        except BridgeError as exc:
            print("refused:", exc)
    print("sent", world.stats.record("goals", 1.0, aggregation="sum"), world.stats.record("\u00e9", 0.5))
    sys.stdout.flush()
    while world.step() != "closed":
        pass
"""

C_SIM = r"""
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "relayrl_bridge.h"
int main(int argc, char **argv) {
    char err[256], name[130]; int reason;
    rrb_world *w = rrb_open(rrb_memory_path_from_args(argc, argv), 20.0, &reason, err, sizeof err);
    if (!w) { fprintf(stderr, "%s\n", err); return 11; }
    memset(name, 'x', 129); name[129] = 0;
    printf("%d %s\n", rrb_record_stat(w, "", 1.0f, RRB_STAT_SUM), rrb_error(w));
    printf("%d %s\n", rrb_record_stat(w, name, 1.0f, RRB_STAT_SUM), rrb_error(w));
    printf("%d %s\n", rrb_record_stat(w, "\xff", 1.0f, RRB_STAT_SUM), rrb_error(w));
    printf("%d %s\n", rrb_record_stat(w, "goals", 1.0f, 3), rrb_error(w));
    printf("%d %s\n", rrb_record_stat(w, "goals", NAN, RRB_STAT_SUM), rrb_error(w));
    int a = rrb_record_stat(w, "goals", 1.0f, RRB_STAT_SUM);
    int b = rrb_record_stat(w, "\xc3\xa9", 0.5f, RRB_STAT_AVERAGE);
    printf("sent %d %d\n", a, b);
    fflush(stdout);
    while (rrb_step(w) == RRB_OK) {
    }
    rrb_close(w);
    return 0;
}
"""


@pytest.fixture(scope="module", params=["python", "c"])
def stats_sim(request, tmp_path_factory) -> tuple[str, list[str]]:
    if request.param == "python":
        return "python", [sys.executable, "-c", PY_SIM]
    if not have_compiler():
        pytest.skip("no C compiler ($CC or cc)")
    return "c", [str(compile_program(C_SIM, tmp_path_factory.mktemp("stats"), "stats_sim"))]


def check_refusals(kind: str, lines: list[str]) -> None:
    """The five bad stats were each refused with a message saying what is wrong."""
    wanted = ["1 to 128 bytes", "1 to 128 bytes", "not valid UTF-8", "aggregation", "finite"]
    assert len(lines) == 5, lines
    for line, words in zip(lines, wanted):
        assert (line.startswith("refused:") if kind == "python" else line.startswith("-1 ")) and words in line, line


def test_both_sdks_send_the_golden_stats_records_and_refuse_bad_stats_at_the_call(stats_sim, tmp_path):
    kind, command = stats_sim
    stats = StatsChannel()
    log = tmp_path / "sim.log"
    env = BridgeEnv(command, timeout_s=20, directory=tmp_path / "bridge", side_channels=[stats], log_path=log)
    try:
        assert env.channel.read_side().hex() == GOLDEN_STATS.hex()  # the handshake turn's side channel
        assert stats.drain() == {"goals": 1.0, "é": 0.5}
        env.step()
        assert stats.drain() == {}  # nothing new: a name without records is left out
    finally:
        env.close()
    lines = log.read_text().splitlines()
    assert env.returncode == 0, lines
    check_refusals(kind, lines[:5])
    assert lines[5] == ("sent True True" if kind == "python" else "sent 0 0")


def test_a_trainer_of_protocol_1_1_is_sent_no_stats(stats_sim, tmp_path):
    """A 1.1 trainer does not know the stats channel: the SDKs queue nothing for it and say so."""
    kind, command = stats_sim
    trainer = Channel.create(tmp_path / "bridge", timeout_s=20)
    struct.pack_into("<HH", trainer.header, L.OFF_TRAINER_VERSION, 1, 1)
    proc = subprocess.Popen([*command, "--memory-path", str(trainer.header_path)], stdout=subprocess.PIPE, text=True)
    try:
        trainer.peer_alive = lambda: proc.poll() is None
        trainer.wait_turn()
        trainer.finish_handshake()
        trainer.sync_body()
        assert trainer.read_side() == b""
    finally:
        trainer.close()
        out = proc.communicate(timeout=30)[0].splitlines()
    assert proc.returncode == 0
    check_refusals(kind, out[:5])  # a bad stat is refused whatever the trainer's version
    assert out[5] == ("sent False False" if kind == "python" else "sent 1 1")


def test_the_trainer_aggregates_each_name_as_the_simulator_asked():
    channel = StatsChannel()
    for name, value, aggregation in [("a", 1.0, "average"), ("a", 2.0, "average"), ("r", 5.0, "most_recent"),
                                     ("r", 3.0, "most_recent"), ("s", 1.5, "sum"), ("s", 2.0, "sum"),
                                     ("a", 6.0, "average")]:
        channel.on_message(encode_stat(name, value, aggregation))
    assert channel.drain() == {"a": 3.0, "r": 3.0, "s": 3.5}
    channel.on_message(encode_stat("s", 4.0, "sum"))
    assert channel.drain() == {"s": 4.0}  # a new row starts from nothing; names without records are absent
    assert channel.drain() == {}


def test_one_aggregation_per_name():
    channel = StatsChannel()
    channel.on_message(encode_stat("goals", 1.0, "sum"))
    channel.drain()
    with pytest.raises(L.LayoutError, match=r"'goals' asks for aggregation 0 \(average\), earlier ones for 2 \(sum\)"):
        channel.on_message(encode_stat("goals", 1.0, "average"))


def _payload(name: bytes, value: float = 1.0, aggregation: int = 0, k: int | None = None) -> bytes:
    return struct.pack("<i", len(name) if k is None else k) + name + struct.pack("<fi", value, aggregation)


@pytest.mark.parametrize("payload, message", [
    (b"\x05\x00", "2 bytes, too short"),
    (_payload(b""), "a name of 0 bytes; names are 1 to 128"),
    (_payload(b"x" * 129), "a name of 129 bytes"),
    (_payload(b"ab", k=-1), "a name of -1 bytes"),
    (_payload(b"abc", k=2), "with a 2-byte name is 15 bytes, not k \\+ 12 = 14"),
    (_payload(b"abc")[:-1], "with a 3-byte name is 14 bytes, not k \\+ 12 = 15"),
    (_payload(b"\xff\xfe"), "not UTF-8"),
    (_payload(b"a\x00"), "NUL"),
    (_payload(b"goals", aggregation=3), "'goals' has aggregation 3"),
    (_payload(b"goals", value=float("inf")), "'goals' has the value inf"),
])
def test_a_bad_stats_record_names_what_is_wrong(payload, message):
    with pytest.raises(L.LayoutError, match=message):
        decode_stat(payload)


@pytest.mark.parametrize("args, message", [
    (("", 1.0), "1 to 128 bytes"), (("é" * 65, 1.0), "130 bytes"), (("a\0b", 1.0), "without NUL"),
    (("\udc80", 1.0), "not valid UTF-8"), (("a", 1.0, "max"), "aggregation 'max'"),
    (("a", float("inf")), "not a finite float32"), (("a", 1e39), "not a finite float32"), (("a", "1"), "finite"),
])
def test_the_python_sdk_refuses_a_bad_stat_at_the_call(args, message):
    recorder = StatsRecorder()
    with pytest.raises(BridgeError, match=message):
        recorder.record(*args)
    assert recorder.outgoing == []


BAD_SIM = r"""
import sys
from relayrl.bridge import BridgeError, World
with World(timeout_s=20) as world:
    world.stats.queue(bytes.fromhex(sys.argv[1]))  # around record()'s checks: a simulator with a bug
    try:
        while world.step() != "closed":
            pass
    except BridgeError as exc:
        print(exc)
        sys.exit(4)
"""


@pytest.mark.parametrize("payload, message", [
    (_payload(b"x" * 200), "gives a name of 200 bytes"),
    (_payload(b"\xc3("), "has a name that is not UTF-8"),
    (_payload(b"abc", k=2), "is 15 bytes, not k \\+ 12 = 14"),
])
def test_a_bad_stats_record_from_a_simulator_stops_the_trainer_with_a_protocol_error(tmp_path, payload, message):
    log = tmp_path / "sim.log"
    with pytest.raises(BridgeError, match=rf"the simulator's stats record .*{message}") as info:
        BridgeEnv([sys.executable, "-c", BAD_SIM, payload.hex()], timeout_s=20, directory=tmp_path / "bridge",
                  side_channels=[StatsChannel()], log_path=log)
    assert info.value.reason == L.PROTOCOL_ERROR and "\n" not in str(info.value)
    assert "protocol error" in log.read_text()  # the simulator was told: close reason 4
    assert list((tmp_path / "bridge").iterdir()) == []


@pytest.mark.parametrize("simulator", ["python", "c"])
def test_the_example_simulators_report_the_balls_they_drop(tmp_path, simulator):
    """ball3d's "balls_dropped" (summed) counts its terminal episode ends, as the trainer sees them."""
    from relayrl.bridge.agent_env import BridgeAgents

    if simulator == "python":
        command = f"{shlex.quote(sys.executable)} -m relayrl.bridge.examples.ball3d"
    elif have_compiler():
        command = shlex.quote(str(build("ball3d", tmp_path / "build")))
    else:
        pytest.skip("no C compiler ($CC or cc)")
    env = BridgeAgents(command, timeout_s=20, args=["--agents", "4"])
    try:
        turn, fell = env.reset(), 0
        assert env.simulator_stats() == {}  # nothing before the first step
        for _ in range(60):  # full tilt one way: every ball rolls off within ~20 steps, again and again
            turn = env.step(np.ones((len(turn.ids), 2), np.float32))
            fell += int((~turn.interrupted).sum())
        assert fell >= 4
        assert env.simulator_stats() == {"balls_dropped": float(fell)}
        assert env.simulator_stats() == {}
    finally:
        env.close()


def test_a_receiver_without_a_stats_channel_skips_them_with_one_warning(caplog):
    """§3.1: a record for an unknown id is skipped with a warning, once per id rather than every turn."""
    from relayrl.bridge.sidechannel import SideChannels

    channels = SideChannels()
    for _ in range(3):
        channels.dispatch(L.encode_records([(STATS, encode_stat("goals", 1.0))]))
    warnings = [r.getMessage() for r in caplog.records if "unknown channel" in r.getMessage()]
    assert len(warnings) == 1 and "StatsChannel" in warnings[0], warnings
