"""BridgeAgents: a simulator's behaviour as an agent env (spaces, actions, side-channel options)."""

from __future__ import annotations

import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest

from relayrl.bridge.agents import BridgeAgents
from relayrl.errors import ConfigError, EnvError

PARAMS_SIM = textwrap.dedent("""
    from relayrl.bridge import World, EngineConfigurationChannel, EnvironmentParametersChannel, SideChannel
    got = {"gravity": 0.0, "time_scale": 0.0}
    def on_param(payload):
        key, value = EnvironmentParametersChannel.decode(payload)
        got[key] = value
    def on_engine(payload):
        name, values = EngineConfigurationChannel.decode(payload)
        got[name] = values[0]
    world = World(side_channels=[SideChannel(EnvironmentParametersChannel().channel_id, on_param),
                                 SideChannel(EngineConfigurationChannel().channel_id, on_engine)])
    world.register("b", 3, [(2,), ((1, 2), "uint8")], branches=(4,))
    world.register("other", 1, [(1,)], continuous=1)
    actions = {}
    while True:
        for a in range(3):
            world.request_decision("b", a).set_observation(0, [got["gravity"], got["time_scale"]]) \\
                .set_observation(1, [[a, actions.get(a, 0)]])
        status = world.step()
        if status == "closed":
            break
        actions = {k: int(d[0]) for k, (c, d) in world.actions("b").items()}
""")


def test_side_channel_options_reach_the_simulator_and_discrete_actions_come_back():
    env = BridgeAgents([sys.executable, "-c", PARAMS_SIM], behaviour="b", parameters={"gravity": 3.5},
                       engine={"time_scale": 20})
    try:
        assert env.single_observation_space.shape == (4,) and env.single_action_space == gym.spaces.Discrete(4)
        assert env.num_envs == 3
        turn = env.reset()
        np.testing.assert_array_equal(turn.ids, [0, 1, 2])
        np.testing.assert_allclose(turn.obs[:, :2], [[3.5, 20.0]] * 3)
        turn = env.step(np.array([3, 1, 2]))
        np.testing.assert_array_equal(turn.obs[:, 3], [3, 1, 2])  # each agent's discrete action echoed
        assert turn.obs.dtype == np.float32 and len(turn.end_ids) == 0 and turn.end_obs.shape == (0, 4)
    finally:
        env.close()


def test_a_simulator_with_several_behaviours_needs_one_named():
    with pytest.raises(ConfigError, match=r"behaviours \['b', 'other'\].*behaviour: NAME"):
        BridgeAgents([sys.executable, "-c", PARAMS_SIM])


def test_unknown_engine_options_are_named():
    with pytest.raises(ConfigError, match="env.kwargs.engine"):
        BridgeAgents([sys.executable, "-c", PARAMS_SIM], engine={"timescale": 2})


def test_hybrid_actions_are_refused_with_the_reason():
    sim = textwrap.dedent("""
        from relayrl.bridge import World
        world = World()
        world.register("h", 2, [(1,)], continuous=1, branches=(2,))
        world.step()
    """)
    with pytest.raises(EnvError, match="continuous actions or discrete branches, not both"):
        BridgeAgents([sys.executable, "-c", sim])
