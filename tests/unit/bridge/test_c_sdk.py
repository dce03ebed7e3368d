"""The C simulator SDK (relayrl/bridge/c): it compiles warning-free, its echo simulator passes the
conformance scenario against the Python trainer, and it stops cleanly when the trainer dies, stalls,
speaks another protocol version or hands it a corrupt channel."""

from __future__ import annotations

import os
import secrets
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from relayrl.bridge import BridgeEnv
from relayrl.bridge import layout as L
from relayrl.bridge.cbuild import CFLAGS, C_DIR, BuildError, build, compiler, have_compiler

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conformance import check_conformance  # noqa: E402

MAGIC = b"RLRLBRDG"


pytestmark = pytest.mark.skipif(not have_compiler(), reason="no C compiler ($CC or cc)")


STRICT = ("-Wpedantic", "-Wshadow")  # on top of cbuild's -Wall -Wextra -Werror


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cbuild")


@pytest.fixture(scope="module")
def exes(build_dir) -> dict[str, Path]:
    return {name: build(name, build_dir, extra_flags=STRICT) for name in ("echo_sim", "ball3d")}


@pytest.fixture
def chan_dir(tmp_path) -> Path:
    folder = tmp_path / "bridge"
    folder.mkdir(mode=0o700)
    return folder


def _files(folder: Path, name: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(name))


# ---------------------------------------------------------------------------------------- building

@pytest.mark.parametrize("name", ["echo_sim", "ball3d", "bench_sim"])
def test_examples_compile_without_any_warning(name, build_dir):
    """-Werror (with -Wpedantic -Wshadow): any warning fails the build, and the compiler prints nothing."""
    exe = build_dir / name
    command = [*compiler(), *CFLAGS, *STRICT, f"-I{C_DIR}", str(C_DIR / "examples" / f"{name}.c"),
               str(C_DIR / "relayrl_bridge.c"), "-o", str(exe), "-lm"]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and result.stdout == ""
    assert os.access(exe, os.X_OK)


def test_build_helper_caches_and_reports_errors(build_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    first = build("echo_sim", build_dir, extra_flags=STRICT)
    mtime = first.stat().st_mtime_ns
    assert build("echo_sim", build_dir, extra_flags=STRICT) == first and first.stat().st_mtime_ns == mtime
    with pytest.raises(BuildError, match="no C example 'nope'"):
        build("nope", tmp_path)
    with pytest.raises(BuildError) as info:  # the compiler's own stderr is in the message
        build("echo_sim", tmp_path, extra_flags=("-include", "/no/such/header.h"))
    assert "'cc'" in str(info.value) and "failed" in str(info.value) and "/no/such/header.h" in str(info.value)
    monkeypatch.setenv("CC", "no-such-compiler-xyz")
    with pytest.raises(BuildError, match="no-such-compiler-xyz"):
        build("echo_sim", tmp_path)


# ------------------------------------------------------------------------------------- conformance

def test_echo_sim_conformance(exes):
    check_conformance([str(exes["echo_sim"])])


# ----------------------------------------------------------------------------- the trainer vanishes

TRAINER = r"""
import sys, time
import numpy as np
from relayrl.bridge import BridgeEnv
env = BridgeEnv(attach=True, directory=sys.argv[1], timeout_s=30)
for _ in range(3):
    env.step()
print("ready", flush=True)
time.sleep(600)
"""


def _readline(proc: subprocess.Popen, timeout_s: float) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    assert ready, "the trainer did not get ready"
    return proc.stdout.readline().decode().strip()


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _attached_pair(folder: Path):
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, str(folder)], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
    header = folder / "editor"
    deadline = time.monotonic() + 20
    while not header.exists():
        assert time.monotonic() < deadline and trainer.poll() is None, "the trainer did not create the channel"
        time.sleep(0.02)
    return trainer, header


@pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="needs /proc")
def test_echo_sim_exits_3_when_the_trainer_is_killed(exes, chan_dir):
    trainer, header = _attached_pair(chan_dir)
    sim = subprocess.Popen([str(exes["echo_sim"]), "--memory-path", str(header), "--bridge-timeout", "3"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert _readline(trainer, 20) == "ready"
        # waiting for the trainer costs no CPU (a 50 us spin, then poll)
        before = _cpu_ticks(sim.pid)
        time.sleep(0.5)
        assert _cpu_ticks(sim.pid) - before <= 5  # clock ticks of 10 ms
        # every descriptor the simulator holds is close-on-exec: the two FIFOs, nothing else
        fds = {int(fd): os.readlink(f"/proc/{sim.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{sim.pid}/fd")
               if int(fd) > 2}
        assert sorted(Path(p).name for p in fds.values()) == ["editor.st", "editor.ts"]
        for fd in fds:
            flags = int(Path(f"/proc/{sim.pid}/fdinfo/{fd}").read_text().split("flags:")[1].split()[0], 8)
            assert flags & os.O_CLOEXEC, f"fd {fd} -> {fds[fd]} is not close-on-exec"

        trainer.kill()
        trainer.wait()
        start = time.monotonic()
        code = sim.wait(timeout=30)
        elapsed = time.monotonic() - start
    finally:
        for proc in (trainer, sim):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    err = sim.stderr.read().decode()
    assert code == 3, err
    assert elapsed < 10, elapsed
    assert "died" in err and len(err.strip().splitlines()) == 1, err
    assert _files(chan_dir, "editor") == [], "the simulator must remove the files of a dead trainer"


def test_echo_sim_exits_3_when_the_trainer_stalls(exes, chan_dir):
    trainer, header = _attached_pair(chan_dir)
    sim = subprocess.Popen([str(exes["echo_sim"]), "--memory-path", str(header), "--bridge-timeout", "1"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert _readline(trainer, 20) == "ready"
        trainer.send_signal(signal.SIGSTOP)  # alive, holding its turn, never answering
        start = time.monotonic()
        code = sim.wait(timeout=30)
        elapsed = time.monotonic() - start
    finally:
        trainer.kill()
        trainer.wait()
        if sim.poll() is None:
            sim.kill()
            sim.wait()
    err = sim.stderr.read().decode()
    assert code == 3, err
    assert 0.8 < elapsed < 10, elapsed
    assert "timed out" in err, err
    assert _files(chan_dir, "editor") == []


# ----------------------------------------------------------------------- channels made by hand (§2)

def make_channel(folder: Path, *, magic: bytes = MAGIC, major: int = 1, minor: int = 0, side: int = 64,
                 rl: int = 8, body_size: int | None = None, header_size: int = 64):
    """A fresh channel as a trainer creates it (turn 0, generation 1), optionally broken."""
    name = secrets.token_hex(16)
    header = folder / name
    for suffix in (".ts", ".st"):
        os.mkfifo(folder / (name + suffix), 0o600)
    (folder / f"{name}.1").write_bytes(bytes(side + rl if body_size is None else body_size))
    raw = bytearray(64)
    raw[0:8] = magic
    struct.pack_into("<HH", raw, 8, major, minor)
    struct.pack_into("<IIIi", raw, 28, 1, side, rl, os.getpid())
    header.write_bytes(bytes(raw[:header_size]))
    st = os.open(folder / f"{name}.st", os.O_RDONLY | os.O_NONBLOCK)
    return header, st


def run_sim(exe: Path, header: Path, timeout: str = "5") -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), "--memory-path", str(header), "--bridge-timeout", timeout],
                          capture_output=True, text=True, timeout=30)


def test_version_mismatch_exits_2_and_names_both_versions(exes, chan_dir):
    header, st = make_channel(chan_dir, major=2, minor=3)
    try:
        result = run_sim(exes["echo_sim"], header)
        raw = header.read_bytes()
        assert result.returncode == 2, result.stderr
        assert "2.3" in result.stderr and "%d.%d" % L.VERSION in result.stderr and "version" in result.stderr
        assert raw[27] == 2, "simulator_closed must be 2 (version mismatch)"
        assert struct.unpack_from("<Q", raw, 16)[0] == 1, "the simulator hands over after a mismatch"
        assert struct.unpack_from("<HH", raw, 12) == L.VERSION  # the C SDK speaks the Python one's version
        assert struct.unpack_from("<i", raw, 44)[0] > 0
        assert os.read(st, 16), "the simulator rings the trainer's doorbell"
    finally:
        os.close(st)


def test_bad_magic_is_a_clear_error_and_the_file_is_left_alone(exes, chan_dir):
    header, st = make_channel(chan_dir, magic=b"NOTABRDG")
    try:
        before = header.read_bytes()
        result = run_sim(exes["echo_sim"], header)
        assert result.returncode == 4, result.stderr
        assert "magic" in result.stderr and str(header) in result.stderr
        assert header.read_bytes() == before
    finally:
        os.close(st)


@pytest.mark.parametrize("broken", [dict(side=60), dict(rl=0), dict(body_size=100)],
                         ids=["S-not-multiple-of-8", "R-zero", "body-size"])
def test_corrupt_channel_closes_with_reason_4(exes, chan_dir, broken):
    header, st = make_channel(chan_dir, **broken)
    try:
        result = run_sim(exes["echo_sim"], header)
        assert result.returncode == 4, result.stderr
        assert "corrupt" in result.stderr
        assert header.read_bytes()[27] == 4, "simulator_closed must be 4 (protocol error)"
    finally:
        os.close(st)


def test_short_header_and_missing_header(exes, chan_dir):
    header, st = make_channel(chan_dir, header_size=10)
    os.close(st)
    result = run_sim(exes["echo_sim"], header)
    assert result.returncode == 4 and "corrupt" in result.stderr, result.stderr
    result = run_sim(exes["echo_sim"], chan_dir / "missing", timeout="0.3")
    assert result.returncode == 3 and "did not appear" in result.stderr, result.stderr


def test_a_lost_turn_is_a_protocol_error(exes, chan_dir):
    header, st = make_channel(chan_dir)
    sim = subprocess.Popen([str(exes["echo_sim"]), "--memory-path", str(header), "--bridge-timeout", "5"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while struct.unpack_from("<Q", header.read_bytes(), 16)[0] != 1:  # the handshake turn
            assert time.monotonic() < deadline and sim.poll() is None
            time.sleep(0.01)
        raw = header.read_bytes()
        assert struct.unpack_from("<III", raw, 28)[0] >= 2, "registering 'echo' grows the body"
        ts = os.open(chan_dir / (header.name + ".ts"), os.O_WRONLY | os.O_NONBLOCK)
        with open(header, "r+b") as f:
            f.seek(16)
            f.write(struct.pack("<Q", 3))  # skips turn 2
        os.write(ts, b"\1")
        code = sim.wait(timeout=10)
        os.close(ts)
    finally:
        os.close(st)
        if sim.poll() is None:
            sim.kill()
            sim.wait()
    err = sim.stderr.read()
    assert code == 4, err
    assert "lost or doubled turn" in err
    assert header.read_bytes()[27] == 4


# ---------------------------------------------------------------------------------------- ball3d

def test_ball3d_random_actions(exes, chan_dir):
    rng = np.random.default_rng(0)
    env = BridgeEnv([str(exes["ball3d"])], args=["--agents", "12", "--seed", "7"], timeout_s=20,
                    directory=chan_dir)
    falls = 0
    try:
        spec = env.behaviours["ball3d"]
        assert spec.max_agents == 12 and spec.continuous == 2 and spec.branches == ()
        assert [(o.shape, o.dtype.name) for o in spec.observations] == [((6,), "float32")]
        decisions, terminations = env.get_steps("ball3d")
        assert len(terminations) == 0
        np.testing.assert_array_equal(decisions.agent_id, np.arange(12))
        np.testing.assert_array_equal(decisions.reward, 0)
        for _ in range(300):
            actions = rng.uniform(-1.5, 1.5, (12, 2)).astype(np.float32)
            env.set_actions("ball3d", continuous=actions)
            env.step()
            decisions, terminations = env.get_steps("ball3d")
            obs = decisions.obs[0]
            np.testing.assert_array_equal(decisions.agent_id, np.arange(12))
            assert np.isfinite(obs).all()
            ended = set(terminations.agent_id.tolist())
            for row, agent in enumerate(terminations.agent_id):
                final = terminations.obs[0][row]
                assert not terminations.interrupted[row] and terminations.reward[row] == -1.0
                assert max(abs(final[2]), abs(final[3])) >= 1.0, "only a ball that fell ends an episode"
                np.testing.assert_allclose(final[:2], 0.25 * np.clip(actions[agent], -1, 1), rtol=1e-6)
            for agent in range(12):
                if agent in ended:  # a new episode, in the same turn
                    assert decisions.reward[agent] == 0.0 and (obs[agent, :2] == 0).all()
                    assert (np.abs(obs[agent, 2:4]) <= 0.5).all() and (np.abs(obs[agent, 4:]) <= 0.3).all()
                else:
                    assert decisions.reward[agent] == pytest.approx(0.1)
                    assert (np.abs(obs[agent, 2:4]) <= 1.0).all()
                    np.testing.assert_allclose(obs[agent, :2], 0.25 * np.clip(actions[agent], -1, 1), rtol=1e-6)
            falls += len(terminations)
        assert falls > 0, "random tilts should drop some balls in 300 steps"
        env.reset()
        decisions, terminations = env.get_steps("ball3d")
        assert len(decisions) == 12 and len(terminations) == 0
        assert (decisions.obs[0][:, :2] == 0).all() and (np.abs(decisions.obs[0][:, 2:4]) <= 0.5).all()
    finally:
        env.close()
    assert env.returncode == 0
    assert list(chan_dir.iterdir()) == []


def test_ball3d_interrupts_episodes_at_500_steps(exes, chan_dir):
    """A policy that holds every ball (tilt against the velocity) reaches the 500-step limit."""
    env = BridgeEnv([str(exes["ball3d"])], args=["--agents", "3", "--seed", "1"], timeout_s=20,
                    directory=chan_dir)
    try:
        for step in range(500):
            decisions, terminations = env.get_steps("ball3d")
            assert len(terminations) == 0, f"a ball fell at step {step}"
            obs = decisions.obs[0]
            env.set_actions("ball3d", continuous=np.clip(-2.0 * obs[:, 2:4] - 1.0 * obs[:, 4:6], -1, 1))
            env.step()
        decisions, terminations = env.get_steps("ball3d")
        assert sorted(terminations.agent_id) == [0, 1, 2] and terminations.interrupted.all()
        np.testing.assert_allclose(terminations.reward, 0.1)
        np.testing.assert_array_equal(decisions.reward, 0.0)  # all three started over
    finally:
        env.close()
    assert env.returncode == 0


# ------------------------------------------------------------------------------------ the C API

API_SIM = r"""
#include <stdio.h>
#include <string.h>
#include "relayrl_bridge.h"
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "line %d: %s (%s)\n", __LINE__, #c, rrb_error(w)); return 10; } } while (0)
static int seen;
static int on_msg(rrb_world *w, const uint8_t id[16], const uint8_t *p, uint32_t n, void *u) {
    (void)u; seen += 1; return rrb_send(w, id, p, n) == 0;
}
int main(int argc, char **argv) {
    char err[256]; int reason;
    rrb_world *w = rrb_open(rrb_memory_path_from_args(argc, argv), 10.0, &reason, err, sizeof err);
    if (!w) { fprintf(stderr, "%s\n", err); return 11; }
    rrb_set_message_handler(w, on_msg, NULL);
    rrb_obs_spec spec = {RRB_FLOAT32, 1, {1, 0, 0}};
    int a = rrb_register(w, "a", 2, 1, &spec, 1, 0, NULL);
    CHECK(a == 0);
    CHECK(rrb_register(w, "", 2, 1, &spec, 1, 0, NULL) == -1 && strstr(rrb_error(w), "name"));
    CHECK(rrb_register(w, "x", 2, 1, &spec, 0, 0, NULL) == -1);
    CHECK(rrb_register(w, "a", 2, 1, &spec, 2, 0, NULL) == -1 && strstr(rrb_error(w), "different"));
    for (int i = 0; i < 2; i++) {
        float o = 10.0f + (float)i;
        int r = rrb_request_decision(w, a, i, 0.5f * (float)i);
        CHECK(r == i && rrb_set_observation(w, a, r, 0, &o) == 0);
    }
    CHECK(rrb_request_decision(w, a, 2, 0.0f) == -1);           /* N = 2 rows: full */
    CHECK(rrb_register(w, "a", 5, 1, &spec, 1, 0, NULL) == a);   /* larger N: rows kept */
    for (int i = 2; i < 5; i++) {
        float o = 10.0f + (float)i;
        int r = rrb_request_decision(w, a, i, 0.5f * (float)i);
        CHECK(r == i && rrb_set_observation(w, a, r, 0, &o) == 0);
    }
    uint32_t br[1] = {4};
    rrb_obs_spec img = {RRB_UINT8, 3, {4, 3, 2}};
    int b = rrb_register(w, "b", 3, 1, &img, 0, 1, br);
    CHECK(b == 1);
    int r = rrb_request_decision(w, b, 77, 1.0f);
    uint8_t *p = rrb_observation_ptr(w, b, r, 0);
    CHECK(p && rrb_observation_ptr(w, b, 1, 0) == NULL);
    for (int k = 0; k < 24; k++) p[k] = (uint8_t)k;
    uint8_t m[4] = {0, 0, 0, 1};
    CHECK(rrb_set_action_mask(w, b, r, m) == 0 && rrb_set_action_mask(w, a, 0, m) == -1);
    r = rrb_end_episode(w, b, 78, -2.0f, 1);
    CHECK(r == 0 && (p = rrb_final_observation_ptr(w, b, r, 0)) != NULL);
    memset(p, 9, 24);
    CHECK(rrb_step(w) == RRB_OK);
    CHECK(seen == 1);
    CHECK(rrb_decision_count(w, a) == 5 && rrb_decision_count(w, b) == 1);
    const float *ca = rrb_continuous_actions(w, a);
    const int32_t *da = rrb_discrete_actions(w, b);
    CHECK(ca && da && !rrb_discrete_actions(w, a) && !rrb_continuous_actions(w, b));
    float got[5];
    memcpy(got, ca, sizeof got);
    int32_t opt = da[0];
    int64_t ids[5] = {0, 1, 2, 3, 4};
    float zero[5] = {0};
    CHECK(rrb_request_decisions(w, a, 6, ids, zero) == -1);     /* more than N = 5 */
    CHECK(rrb_request_decisions(w, a, 5, ids, zero) == 0);      /* bulk: rows 0..4 */
    memcpy(rrb_observation_ptr(w, a, 0, 0), got, sizeof got);   /* consecutive rows, one copy */
    r = rrb_request_decision(w, b, 77, (float)opt);
    CHECK(r == 0);
    CHECK(rrb_step(w) == RRB_RESET && rrb_decision_count(w, a) == 0);
    CHECK(rrb_step(w) == RRB_CLOSED && rrb_failure(w) && rrb_peer_reason(w) == 1);
    rrb_close(w);
    return 0;
}
"""


def test_c_api_growth_validation_and_actions(chan_dir, tmp_path):
    (tmp_path / "api_sim.c").write_text(API_SIM)
    exe = tmp_path / "api_sim"
    result = subprocess.run([*compiler(), *CFLAGS, "-O0", f"-I{C_DIR}", str(tmp_path / "api_sim.c"),
                             str(C_DIR / "relayrl_bridge.c"), "-o", str(exe)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    from relayrl.bridge import SideChannel
    channel = SideChannel("0b7e5c8a-1111-4222-8333-944455556666")
    env = BridgeEnv([str(exe)], timeout_s=20, directory=chan_dir, side_channels=[channel],
                    log_path=tmp_path / "api_sim.log")
    try:
        assert list(env.behaviours) == ["a", "b"]
        assert env.behaviours["a"].max_agents == 5 and env.behaviours["b"].branches == (4,)
        assert [(o.shape, o.dtype.name) for o in env.behaviours["b"].observations] == [((4, 3, 2), "uint8")]
        a, _ = env.get_steps("a")
        np.testing.assert_array_equal(a.agent_id, np.arange(5))
        np.testing.assert_allclose(a.obs[0][:, 0], 10 + np.arange(5))
        np.testing.assert_allclose(a.reward, 0.5 * np.arange(5))
        b, bt = env.get_steps("b")
        np.testing.assert_array_equal(b.agent_id, [77])
        np.testing.assert_array_equal(b.obs[0][0], np.arange(24, dtype=np.uint8).reshape(4, 3, 2))
        np.testing.assert_array_equal(b.action_mask[0], [[False, False, False, True]])
        assert list(bt.agent_id) == [78] and bt.interrupted[0] and bt.reward[0] == -2.0
        assert (bt.obs[0] == 9).all()
        env.set_actions("a", continuous=np.arange(1, 6, dtype=np.float32)[:, None])
        env.set_actions("b", discrete=[[2]])
        channel.queue(b"ping")
        env.step()
        assert channel.received == [b"ping"]
        a, _ = env.get_steps("a")
        np.testing.assert_allclose(a.obs[0][:, 0], np.arange(1, 6))
        b, bt = env.get_steps("b")
        assert b.reward[0] == 2.0 and len(bt) == 0
        env.reset()
    finally:
        env.close()
    assert env.returncode == 0, (tmp_path / "api_sim.log").read_text()
    assert list(chan_dir.iterdir()) == []
