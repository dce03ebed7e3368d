"""Keep-alive (docs/bridge-protocol.md §4.1): a side that holds the turn on purpose for longer than its
peer's timeout (a trainer learning or evaluating on another simulator; a simulator loading a level)
keeps the peer waiting, with real simulator processes of both SDKs and 1 s timeouts on both sides.
A side that is stopped still times its peer out: SIGSTOP stops the keep-alive too
(test_lifecycle.py and test_c_sdk.py stop a trainer; test_channel_processes.py a simulator)."""

from __future__ import annotations

import struct
import sys
import textwrap
import threading
import time

import pytest

from relayrl.bridge import BridgeClosed, BridgeEnv
from relayrl.bridge import layout as L
from relayrl.bridge.cbuild import build, have_compiler
from relayrl.bridge.channel import Channel

from test_c_golden import compile_program  # same folder

TIMEOUT = 1.0  # both sides
PAUSE = 3.0  # three timeouts
ECHO = [sys.executable, "-m", "relayrl.bridge.examples.echo_sim"]


@pytest.fixture(scope="module")
def c_echo(tmp_path_factory):
    return [str(build("echo_sim", tmp_path_factory.mktemp("cbuild")))] if have_compiler() else None


def in_parallel(calls) -> None:
    """Run the calls in threads (each on its own channel), re-raising the first failure."""
    errors: list[BaseException] = []

    def run(call):
        try:
            call()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if errors:
        raise errors[0]


def test_a_trainer_that_pauses_for_three_timeouts_keeps_its_simulators(tmp_path, c_echo):
    """The training copy during a long update, the evaluation copy before the first evaluation: the
    trainer holds the turn, its simulators (1 s timeout) wait, and go on where they were."""
    commands = {"python": ECHO, **({"c": c_echo} if c_echo else {})}
    envs = {}
    try:
        for name, command in commands.items():
            envs[name] = BridgeEnv(command, args=["--bridge-timeout", str(TIMEOUT)], timeout_s=TIMEOUT,
                                   directory=tmp_path / "bridge", log_path=tmp_path / f"{name}.log")
        for env in envs.values():
            # each side publishes how long it waits (ms), so the other knows how often to bump
            assert struct.unpack_from("<II", env.channel.header, L.OFF_TRAINER_TIMEOUT) == (1000, 1000)
            env.step()
        time.sleep(PAUSE)  # no turn for three timeouts: learning, or evaluating elsewhere
        for name, env in envs.items():
            env.step()
            decisions, _ = env.get_steps("echo")
            assert (decisions.obs[0][:, 1] == 2).all(), f"{name}: the simulator did not go on at turn 2"
    finally:
        for env in envs.values():
            env.close()
    for name, env in envs.items():
        assert env.returncode == 0, (tmp_path / f"{name}.log").read_text()


BUSY_PY = textwrap.dedent(f"""
    import time
    from relayrl.bridge import World
    world = World(timeout_s=10, behaviours=[dict(name="b", max_agents=1, observations=[(1,)], continuous=1)])
    assert world.trainer_timeout_s == {TIMEOUT}
    t = 0
    while True:
        if t == 1:  # a level that takes three trainer timeouts to load
            end = time.monotonic() + {PAUSE}
            while time.monotonic() < end:
                world.keep_alive()
                time.sleep(0.05)
        world.request_decision("b", 0).set_observation(0, [t])
        if world.step() == "closed":
            break
        t += 1
""")

BUSY_C = r"""
#include <stdio.h>
#include <time.h>
#include "relayrl_bridge.h"
int main(int argc, char **argv) {
    char err[256]; int reason;
    rrb_world *w = rrb_open(rrb_memory_path_from_args(argc, argv), 10.0, &reason, err, sizeof err);
    if (!w) { fprintf(stderr, "%s\n", err); return 11; }
    rrb_obs_spec spec = {RRB_FLOAT32, 1, {1, 0, 0}};
    int b = rrb_register(w, "b", 1, 1, &spec, 1, 0, NULL);
    for (int t = 0;; t++) {
        if (t == 1) { /* a level that takes three trainer timeouts to load */
            for (int i = 0; i < (int)(PAUSE_S * 20); i++) {
                rrb_keep_alive(w);
                struct timespec ts = {0, 50 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        float o = (float)t;
        int row = rrb_request_decision(w, b, 0, 0.0f);
        if (row < 0 || rrb_set_observation(w, b, row, 0, &o) < 0) return 12;
        if (rrb_step(w) != RRB_OK) break;
    }
    int code = rrb_failure(w) && rrb_peer_reason(w) != RRB_REASON_NORMAL ? 13 : 0;
    rrb_close(w);
    return code;
}
"""


def test_a_simulator_busy_in_its_turn_keeps_the_trainer_waiting_with_keep_alives(tmp_path):
    commands = {"python": [sys.executable, "-c", BUSY_PY]}
    if have_compiler():
        commands["c"] = [str(compile_program(BUSY_C, tmp_path, "busy_sim", f"-DPAUSE_S={PAUSE}"))]
    envs = {name: BridgeEnv(command, timeout_s=TIMEOUT, directory=tmp_path / "bridge",
                            log_path=tmp_path / f"{name}.log") for name, command in commands.items()}
    try:
        for env in envs.values():
            assert env.get_steps("b")[0].obs[0].tolist() == [[0.0]]
        started = time.monotonic()
        in_parallel([env.step for env in envs.values()])  # each simulator is busy for three of our timeouts
        assert time.monotonic() - started >= PAUSE * 0.9
        for env in envs.values():
            assert env.get_steps("b")[0].obs[0].tolist() == [[1.0]]
            env.step()
    finally:
        for env in envs.values():
            env.close()
    for name, env in envs.items():
        assert env.returncode == 0, (tmp_path / f"{name}.log").read_text()


def test_a_trainer_honours_the_keep_alive_of_a_simulator_of_a_later_minor_version(tmp_path):
    """§2: minors only add; a 1.2 trainer restarts its timeout on the bumps of a (hypothetical) 1.9 simulator."""
    later = BUSY_PY.replace("\nt = 0\n", "\nimport struct\nfrom relayrl.bridge import layout as L\n"
                            "struct.pack_into('<HH', world.channel.header, L.OFF_SIM_VERSION, 1, 9)\nt = 0\n")
    assert later != BUSY_PY
    env = BridgeEnv([sys.executable, "-c", later], timeout_s=TIMEOUT, directory=tmp_path / "bridge",
                    log_path=tmp_path / "sim.log")
    try:
        assert env.channel.simulator_version == (1, 9)
        started = time.monotonic()
        env.step()  # the simulator is busy for three of our timeouts, bumping
        assert time.monotonic() - started >= PAUSE * 0.9
        assert env.get_steps("b")[0].obs[0].tolist() == [[1.0]]
    finally:
        env.close()
    assert env.returncode == 0, (tmp_path / "sim.log").read_text()


# A simulator of protocol 1.0: it does not know the keep-alive, and stops when the trainer is silent for its
# timeout (emulated: it closes with reason 3 half a second after its handshake).
SIMULATOR_1_0 = textwrap.dedent("""
    import struct, time
    from relayrl.bridge import layout as L
    from relayrl.bridge.channel import Channel
    from relayrl.bridge.world import memory_path_from_args
    channel = Channel.attach(memory_path_from_args())
    struct.pack_into("<HH", channel.header, L.OFF_SIM_VERSION, 1, 0)
    struct.pack_into("<I", channel.header, L.OFF_SIM_TIMEOUT, 0)  # reserved in 1.0
    channel.hand_over()
    time.sleep(0.5)
    channel.close(L.TIMEOUT)
""")


def test_a_1_0_simulator_works_with_a_1_1_trainer_and_its_timeout_names_the_fix(tmp_path):
    env = BridgeEnv([sys.executable, "-c", SIMULATOR_1_0], timeout_s=20, directory=tmp_path / "bridge")
    try:
        assert env.channel.simulator_version == (1, 0) and env.behaviours == {}  # a compatible minor
        time.sleep(1.0)
        with pytest.raises(BridgeClosed, match=r"timed out waiting for its peer\): it speaks bridge protocol 1\.0, "
                                               r"which ignores the trainer's keep-alive.*rebuild it with a 1\.1 SDK"):
            env.step()
    finally:
        env.close()


def test_timeouts_are_published_and_the_keep_alive_thread_ends_with_its_channel(tmp_path):
    def keep_alive_threads() -> int:
        return sum(t.name == "bridge-keep-alive" for t in threading.enumerate())

    before = keep_alive_threads()
    trainer = Channel.create(tmp_path / "bridge", timeout_s=2.5)
    sim = Channel.attach(trainer.header_path, timeout_s=0)  # 0: waits forever
    try:
        assert struct.unpack_from("<II", trainer.header, L.OFF_TRAINER_TIMEOUT) == (2500, 0)
        assert sim.peer_timeout_s == 2.5 and trainer.peer_timeout_s == 0.0
        assert keep_alive_threads() == before + 1, "the trainer bumps from one thread; the simulator starts none"
        counter = struct.unpack_from("<I", sim.header, L.OFF_TRAINER_ALIVE)[0]
        deadline = time.monotonic() + 10
        while struct.unpack_from("<I", sim.header, L.OFF_TRAINER_ALIVE)[0] == counter:  # every 1 s at most
            assert time.monotonic() < deadline, "the trainer's keep-alive counter never moved"
            time.sleep(0.05)
        sim.keep_alive()
        assert struct.unpack_from("<I", trainer.header, L.OFF_SIM_ALIVE)[0] == 1
    finally:
        sim.close()
        trainer.close()
    assert keep_alive_threads() == before
