"""BridgeAgents: a simulator's behaviour as an agent env (spaces, actions, side-channel options)."""

from __future__ import annotations

import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest

from relayrl.bridge.agent_env import BridgeAgents
from relayrl.bridge.channel import BridgeError
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


HYBRID_SIM = textwrap.dedent("""
    from relayrl.bridge import World
    world = World()
    world.register("h", 2, [(3,)], continuous=2, branches=(3,))
    actions = {}
    while True:
        for a in range(2):  # each agent sees the action it was sent: continuous values, then the branch index
            c, d = actions.get(a, ((0.0, 0.0), (0,)))
            decision = world.request_decision("h", a).set_observation(0, [c[0], c[1], d[0]])
            if a == 0:
                decision.set_action_mask(0, [2])  # agent 0 may not choose option 2
        if world.step() == "closed":
            break
        actions = world.actions("h")
""")


def test_a_hybrid_behaviour_is_a_tuple_space_whose_rows_reach_the_simulator_as_both_parts():
    """Issue 26 item 5 (was: refused): continuous=2 and branches=(3,) become Tuple(Box(-1, 1, (2,)),
    MultiDiscrete([3])); a [n, 2 + 1] row is split into the continuous values and the branch index."""
    env = BridgeAgents([sys.executable, "-c", HYBRID_SIM])
    try:
        space = env.single_action_space
        assert space == gym.spaces.Tuple((gym.spaces.Box(-1.0, 1.0, (2,), np.float32), gym.spaces.MultiDiscrete([3])))
        turn = env.reset()
        np.testing.assert_array_equal(turn.action_mask, [[True, True, False], [True, True, True]])
        turn = env.step(np.array([[0.25, -0.5, 1.0], [1.0, 0.75, 2.0]], np.float32))
        np.testing.assert_allclose(turn.obs, [[0.25, -0.5, 1.0], [1.0, 0.75, 2.0]])
        with pytest.raises(EnvError, match=r"hybrid actions for behaviour 'h' have shape \(2, 2\), expected \(n, 3\).*"
                                           r"2 continuous values, then the indices of branches \[3\]"):
            env.step(np.zeros((2, 2), np.float32))
        with pytest.raises(BridgeError, match=r"continuous actions for 'h' have shape \(2, 3\), expected \(2, 2\)"):
            env.bridge.set_actions("h", continuous=np.zeros((2, 3)), discrete=np.zeros((2, 1)))  # BridgeEnv's own check
    finally:
        env.close()


IMAGE_SIM = textwrap.dedent("""
    import numpy as np
    from relayrl.bridge.world import CLOSED, World
    world = World(timeout_s=30)
    world.register("see", 3, [(2,), ((6, 6, 3), "uint8"), ((4, 4, 1), "float32")], branches=(2,))
    ids, t = np.arange(3), 0

    def observe():
        vec = np.stack([ids, np.full(3, t)], 1).astype(np.float32)
        image = np.broadcast_to(((ids * 10 + t) % 200).astype(np.uint8)[:, None, None, None], (3, 6, 6, 3)).copy()
        image[:, 0, 0, 0] = 255
        return [vec, image, np.full((3, 4, 4, 1), 0.5, np.float32)]

    while True:
        if t and t % 5 == 0:  # every agent's episode ends, and the next begins in the same turn
            world.set_terminations("see", ids, observe(), np.ones(3, np.float32))
        world.set_decisions("see", ids, observe(), np.ones(3, np.float32))
        if world.step() == CLOSED:
            break
        t += 1
""")


def test_images_and_several_observations_become_a_dict_of_blocks_whose_pixels_stay_uint8(tmp_path):
    from relayrl.envs.packed import PackedDict

    sim = tmp_path / "image_sim.py"
    sim.write_text(IMAGE_SIM)
    env = BridgeAgents([sys.executable, str(sim)])
    try:
        space = env.single_observation_space
        assert isinstance(space, PackedDict) and list(space.space.spaces) == ["obs0", "obs1", "obs2"]
        assert space.space["obs1"] == gym.spaces.Box(0, 255, (6, 6, 3), np.uint8)  # an image, its own dtype
        assert space.space["obs2"] == gym.spaces.Box(0.0, 1.0, (4, 4, 1), np.float32)  # a float image in [0, 1]
        env.reset()
        turn = env.step(np.zeros(3, np.int64))
        assert turn.obs.dtype == np.uint8 and turn.obs.shape == (3, space.nbytes)
        blocks = space.unpack(turn.obs)
        t = int(blocks["obs0"][0, 1])  # the simulator's turn count (a reset turn counts too)
        np.testing.assert_array_equal(blocks["obs0"], [[0, t], [1, t], [2, t]])
        assert blocks["obs1"].dtype == np.uint8 and blocks["obs1"][:, 1, 1, 0].tolist() == [t, 10 + t, 20 + t]
        assert blocks["obs1"][0, 0, 0, 0] == 255 and (blocks["obs2"] == 0.5).all()
    finally:
        env.close()


def test_ppo_trains_on_a_simulator_s_images_through_the_bridge(tmp_path):
    import relayrl

    sim = tmp_path / "image_sim.py"
    sim.write_text(IMAGE_SIM)
    config = {"ppo": {"num_steps": 16, "batch_size": 16, "epochs": 1},
              "eval": {"freq": 0, "episodes": 3}, "threads": 1}
    run = relayrl.train("ppo", f"bridge:{sys.executable} {sim}", config, total_steps=96, seed=0,
                        run_dir=tmp_path / "run", tensorboard=False)
    assert run.summary["updates"] > 0 and run.summary["last_eval_return"] > 0, run.summary
