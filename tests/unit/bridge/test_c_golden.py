"""The C simulator SDK held to the same rules as the Python one: it writes the same decision and
termination blocks as the hand-written goldens of test_golden_blocks.py, its spin budget follows the
Python rule (a maximum of 0: no spin at all), and its handshake refuses a channel that already has a
simulator and reports a trainer that has exited."""

from __future__ import annotations

import os
import subprocess

import pytest

from conformance import check_conformance  # same folder
from relayrl.bridge import BridgeEnv
from relayrl.bridge.cbuild import CFLAGS, C_DIR, build, compiler, have_compiler
from relayrl.bridge.channel import Channel
from test_channel_handshake import SPIN_CASES
from test_golden_blocks import (ACTION_AT, BIG_ID, CONTINUOUS, DISCRETE, GOLDEN_ACTIONS, GOLDEN_DECISIONS,
                                GOLDEN_SECTION, GOLDEN_TERMINATIONS, blocks, section_bytes)


pytestmark = pytest.mark.skipif(not have_compiler(), reason="no C compiler ($CC or cc)")

GOLDEN_SIM = r"""
#include <stdio.h>
#include "relayrl_bridge.h"
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "line %d: %s (%s)\n", __LINE__, #c, rrb_error(w)); return 10; } } while (0)
int main(int argc, char **argv) {
    char err[256]; int reason;
    rrb_world *w = rrb_open(rrb_memory_path_from_args(argc, argv), 20.0, &reason, err, sizeof err);
    if (!w) { fprintf(stderr, "%s\n", err); return 11; }
    rrb_obs_spec obs[2] = {{RRB_FLOAT32, 1, {2, 0, 0}}, {RRB_UINT8, 1, {3, 0, 0}}};
    uint32_t branches[2] = {2, 3};
    int g = rrb_register(w, "g", 3, 2, obs, 1, 2, branches);
    CHECK(g == 0);
    float o0[2] = {1.0f, -2.0f}, p0[2] = {0.5f, 3.0f}, f0[2] = {-0.5f, 2.0f};
    uint8_t o1[3] = {1, 2, 3}, p1[3] = {250, 0, 7}, f1[3] = {9, 8, 7};
    uint8_t m0[5] = {0, 1, 0, 0, 0}, m1[5] = {0, 0, 1, 0, 1};
    int r = rrb_request_decision(w, g, 7, 0.25f);
    CHECK(r == 0 && !rrb_set_observation(w, g, r, 0, o0) && !rrb_set_observation(w, g, r, 1, o1));
    CHECK(!rrb_set_action_mask(w, g, r, m0));
    r = rrb_request_decision(w, g, BIG_ID, -1.5f);
    CHECK(r == 1 && !rrb_set_observation(w, g, r, 0, p0) && !rrb_set_observation(w, g, r, 1, p1));
    CHECK(!rrb_set_action_mask(w, g, r, m1));
    r = rrb_end_episode(w, g, 9, -1.0f, 1);
    CHECK(r == 0 && !rrb_set_final_observation(w, g, r, 0, f0) && !rrb_set_final_observation(w, g, r, 1, f1));
    CHECK(rrb_step(w) == RRB_OK && rrb_decision_count(w, g) == 2);
    const float *c = rrb_continuous_actions(w, g);
    const int32_t *d = rrb_discrete_actions(w, g);
    printf("%g %g %d %d %d %d\n", c[0], c[1], d[0], d[1], d[2], d[3]);
    while (rrb_step(w) == RRB_OK) {
    }
    rrb_close(w);
    return 0;
}
"""

ODD_SIM = r"""
#include <stdio.h>
#include "relayrl_bridge.h"
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "line %d: %s (%s)\n", __LINE__, #c, rrb_error(w)); return 10; } } while (0)
int main(int argc, char **argv) {
    char err[256]; int reason;
    rrb_world *w = rrb_open(rrb_memory_path_from_args(argc, argv), 20.0, &reason, err, sizeof err);
    if (!w) { fprintf(stderr, "%s\n", err); return 11; }
    rrb_obs_spec obs[2] = {{RRB_UINT8, 1, {3, 0, 0}}, {RRB_UINT8, 1, {5, 0, 0}}};
    uint32_t branches[3] = {2, 1, 3};
    int p = rrb_register(w, "p", 3, 2, obs, 3, 3, branches);
    CHECK(p == 0);
    uint8_t a0[3] = {1, 2, 3}, a1[5] = {10, 11, 12, 13, 14}, b0[3] = {4, 5, 6}, b1[5] = {20, 21, 22, 23, 24};
    uint8_t f0[3] = {7, 8, 9}, f1[5] = {30, 31, 32, 33, 34};
    uint8_t ma[6] = {1, 0, 0, 0, 1, 0}, mb[6] = {0, 0, 0, 1, 0, 1}; /* branch b at M_b = 0, 2, 3 */
    int r = rrb_request_decision(w, p, 5, 1.0f);
    CHECK(r == 0 && !rrb_set_observation(w, p, r, 0, a0) && !rrb_set_observation(w, p, r, 1, a1));
    CHECK(!rrb_set_action_mask(w, p, r, ma));
    r = rrb_request_decision(w, p, 6, 2.0f);
    CHECK(r == 1 && !rrb_set_observation(w, p, r, 0, b0) && !rrb_set_observation(w, p, r, 1, b1));
    CHECK(!rrb_set_action_mask(w, p, r, mb));
    r = rrb_end_episode(w, p, 9, -1.0f, 0);
    CHECK(r == 0 && !rrb_set_final_observation(w, p, r, 0, f0) && !rrb_set_final_observation(w, p, r, 1, f1));
    CHECK(rrb_step(w) == RRB_OK && rrb_decision_count(w, p) == 2);
    const float *c = rrb_continuous_actions(w, p);
    const int32_t *d = rrb_discrete_actions(w, p);
    for (int i = 0; i < 2; i++) /* row-major: action j of row i at [i * C + j], branch b at [i * B + b] */
        printf("%g %g %g %d %d %d\n", c[i * 3], c[i * 3 + 1], c[i * 3 + 2], d[i * 3], d[i * 3 + 1], d[i * 3 + 2]);
    while (rrb_step(w) == RRB_OK) {
    }
    rrb_close(w);
    return 0;
}
"""

SPIN_PROBE = r"""
#include "relayrl_bridge.c"
int main(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i += 2)
        printf("%lld\n", spin_budget_ns(strtod(argv[i], NULL), strtoll(argv[i + 1], NULL, 10)));
    return 0;
}
"""


def compile_program(source: str, tmp_path, name: str, *flags: str):
    (tmp_path / f"{name}.c").write_text(source)
    exe = tmp_path / name
    sources = [str(tmp_path / f"{name}.c")] + ([] if '#include "relayrl_bridge.c"' in source
                                                 else [str(C_DIR / "relayrl_bridge.c")])
    result = subprocess.run([*compiler(), *CFLAGS, *flags, f"-I{C_DIR}", *sources, "-o", str(exe), "-lm"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return exe


def test_the_c_sdk_writes_the_golden_decision_and_termination_blocks(tmp_path):
    exe = compile_program(GOLDEN_SIM, tmp_path, "golden_sim", f"-DBIG_ID={BIG_ID}LL")
    folder = tmp_path / "bridge"
    env = BridgeEnv([str(exe)], timeout_s=20, directory=folder, log_path=tmp_path / "sim.log")
    try:
        decisions, terminations, actions = blocks(env.channel)
        assert decisions.hex() == GOLDEN_DECISIONS.hex()
        assert terminations.hex() == GOLDEN_TERMINATIONS.hex()
        env.set_actions("g", continuous=[[0.5], [-1.0]], discrete=[[0, 2], [0, 1]])
        env.step()
        assert blocks(env.channel)[2].hex() == GOLDEN_ACTIONS.hex()
    finally:
        env.close()
    log = (tmp_path / "sim.log").read_text()
    assert env.returncode == 0, log
    assert log.split() == ["0.5", "-1", "0", "2", "0", "1"]


def test_the_c_sdk_writes_the_golden_section_and_reads_row_major_actions(tmp_path):
    """Section size, pad8 after each observation block, masks at M_b, [N, C] and [N, B] row-major."""
    exe = compile_program(ODD_SIM, tmp_path, "odd_sim")
    env = BridgeEnv([str(exe)], timeout_s=20, directory=tmp_path / "bridge", log_path=tmp_path / "sim.log")
    try:
        assert section_bytes(env.channel).hex() == (GOLDEN_SECTION[:ACTION_AT] + bytes(80)).hex()
        env.set_actions("p", continuous=CONTINUOUS, discrete=DISCRETE)
        env.step()
        assert section_bytes(env.channel)[ACTION_AT:].hex() == GOLDEN_SECTION[ACTION_AT:].hex()
    finally:
        env.close()
    log = (tmp_path / "sim.log").read_text()
    assert env.returncode == 0, log
    assert [[float(v) for v in line.split()] for line in log.splitlines()] == \
        [[*c, *d] for c, d in zip(CONTINUOUS, DISCRETE)]


def test_the_c_spin_budget_follows_the_python_rule_and_0_never_spins(tmp_path):
    exe = compile_program(SPIN_PROBE, tmp_path, "spin_probe")
    args = [str(v) for (mean, maximum), _ in SPIN_CASES for v in (mean * 1e9, round(maximum * 1e9))]
    out = subprocess.run([str(exe), *args], capture_output=True, text=True, check=True).stdout.split()
    assert [int(v) for v in out] == [round(b * 1e9) for _, b in SPIN_CASES]


def test_a_c_simulator_built_never_to_spin_still_conforms(tmp_path):
    exe = build("echo_sim", tmp_path, extra_flags=("-DRRB_SPIN_MAX_NS=0",))
    check_conformance([str(exe)])


@pytest.fixture(scope="module")
def echo_sim(tmp_path_factory):
    return build("echo_sim", tmp_path_factory.mktemp("cbuild"))


def run_echo(exe, header) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), "--memory-path", str(header), "--bridge-timeout", "2"], capture_output=True,
                          text=True, timeout=60)


def test_a_c_simulator_leaves_a_channel_that_already_has_a_simulator_alone(echo_sim, tmp_path):
    trainer = Channel.create(tmp_path / "bridge", timeout_s=5)
    first = Channel.attach(trainer.header_path, timeout_s=5)
    try:
        before = bytes(trainer.header)
        run = run_echo(echo_sim, trainer.header_path)
        assert run.returncode == 4 and "already attached" in run.stderr, run.stderr
        assert bytes(trainer.header) == before
    finally:
        first.close()
        trainer.close()


def test_a_c_simulator_attaching_after_its_trainer_exited_is_told_so(echo_sim, tmp_path):
    trainer = Channel.create(tmp_path / "bridge", timeout_s=5)
    os.close(trainer.bell_in)  # the trainer's process is gone: nobody reads its doorbell
    trainer.bell_in = -1
    try:
        run = run_echo(echo_sim, trainer.header_path)
        assert run.returncode == 3 and "trainer of" in run.stderr and "has exited" in run.stderr, run.stderr
        assert list((tmp_path / "bridge").iterdir()) == [], "a simulator whose trainer died removes the files"
    finally:
        trainer.close()
