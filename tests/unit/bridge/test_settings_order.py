"""docs/bridge-protocol.md §3.1 and §5: the settings of ``env.kwargs`` (environment parameters, engine
configuration) travel with the trainer's first turn, the first reset, and both simulator SDKs hand them
to their handlers before they reset; the trainer writes the parameters in the mapping's order, then the
engine settings in the order of their message types whatever the mapping's order."""

from __future__ import annotations

import shlex
import sys

import pytest

from relayrl.bridge.agent_env import BridgeAgents
from relayrl.bridge.cbuild import have_compiler
from test_c_golden import compile_program  # same folder

PY_SIM = r"""
from relayrl.bridge import SideChannel, World
from relayrl.bridge.sidechannel import (ENGINE_CONFIGURATION, ENVIRONMENT_PARAMETERS, EngineConfigurationChannel,
                                        EnvironmentParametersChannel)
log = []
engine = SideChannel(ENGINE_CONFIGURATION, lambda p: log.append(f"engine {EngineConfigurationChannel.decode(p)[0]}"))
params = SideChannel(ENVIRONMENT_PARAMETERS, lambda p: log.append(f"param {EnvironmentParametersChannel.decode(p)[0]}"))
channels = [engine, params]
with World(timeout_s=20, side_channels=channels,
           behaviours=[dict(name="b", max_agents=1, observations=[(1,)], continuous=1)]) as world:
    world.on_reset(lambda: log.append("reset"))
    while True:
        world.request_decision("b", 0).set_observation(0, [0.0])
        if world.step() == "closed":
            break
print(" | ".join(log))
"""

C_SIM = r"""
#include <stdio.h>
#include <string.h>
#include "relayrl_bridge.h"
static const uint8_t ENGINE[16] = {0x2c, 0x34, 0x51, 0xe9, 0x7e, 0x4f, 0xea, 0x11,
                                   0xb2, 0x38, 0x78, 0x4f, 0x43, 0x87, 0xd1, 0xf7};
static const char *TYPES[5] = {"screen_resolution", "quality_level", "time_scale", "target_frame_rate",
                               "capture_frame_rate"};
static int handler(rrb_world *w, const uint8_t id[16], const uint8_t *p, uint32_t len, void *user) {
    (void)w, (void)user, (void)len;
    int32_t v;
    memcpy(&v, p, 4);
    if (memcmp(id, ENGINE, 16) == 0) printf("engine %s | ", v >= 0 && v < 5 ? TYPES[v] : "?");
    else printf("param %.*s | ", (int)v, (const char *)p + 4);
    return 1;
}
int main(int argc, char **argv) {
    char err[256]; int reason;
    rrb_world *w = rrb_open(rrb_memory_path_from_args(argc, argv), 20.0, &reason, err, sizeof err);
    if (!w) { fprintf(stderr, "%s\n", err); return 11; }
    rrb_set_message_handler(w, handler, NULL);
    rrb_obs_spec spec = {RRB_FLOAT32, 1, {1, 0, 0}};
    int b = rrb_register(w, "b", 1, 1, &spec, 1, 0, NULL);
    float o = 0.0f;
    for (;;) {
        int row = rrb_request_decision(w, b, 0, 0.0f);
        if (row < 0 || rrb_set_observation(w, b, row, 0, &o) < 0) return 12;
        int r = rrb_step(w);
        if (r == RRB_RESET) printf("reset | ");
        else if (r != RRB_OK) break;
    }
    printf("\n");
    rrb_close(w);
    return 0;
}
"""


@pytest.mark.parametrize("simulator", ["python", "c"])
def test_the_settings_go_with_the_first_reset_in_a_fixed_order_and_are_applied_before_it(tmp_path, simulator,
                                                                                          capfd):
    if simulator == "python":
        command = shlex.join([sys.executable, "-c", PY_SIM])
    elif have_compiler():
        command = shlex.quote(str(compile_program(C_SIM, tmp_path, "settings_sim")))
    else:
        pytest.skip("no C compiler ($CC or cc)")
    capfd.readouterr()
    env = BridgeAgents(command, timeout_s=20, parameters={"zeta": 1.0, "alpha": 2.0},
                       engine={"target_frame_rate": 30, "time_scale": 20.0, "height": 48, "width": 64})
    try:
        turn = env.reset()
        env.step(turn.obs[:, :1] * 0)
        env.reset()  # a second reset: the settings are not sent again
    finally:
        env.close()
    assert env.bridge.instances[0].returncode == 0
    seen = [part.strip() for part in capfd.readouterr().out.split("|") if part.strip()]
    assert seen == ["param zeta", "param alpha", "engine screen_resolution", "engine time_scale",
                    "engine target_frame_rate", "reset", "reset"]
