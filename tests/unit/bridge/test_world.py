"""The Python simulator SDK (``World``): behaviours declared at construction, rows that can never carry
an earlier agent's observations, action masks that stay in their branch, and growth mid-turn that
keeps the rows already requested."""

from __future__ import annotations

import numpy as np
import pytest

from inprocess import finish, trainer_and_world  # same folder
from relayrl.bridge import BehaviourSpec, BridgeError, ObsSpec, World
from relayrl.bridge.channel import Channel

WALKER = dict(name="walker", max_agents=2, observations=[(2,), ((1,), "uint8")], continuous=1)
PICKER = dict(name="picker", max_agents=2, observations=[(1,)], branches=(3, 2))


@pytest.fixture
def world(tmp_path):
    """A World attached to a trainer channel nobody answers: for what happens before a hand-over."""
    trainer = Channel.create(tmp_path / "bridge", timeout_s=5)
    world = World(str(trainer.header_path), timeout_s=5)
    for behaviour in (WALKER, PICKER):
        world.register(**behaviour)
    yield world
    world.close()
    trainer.close()


def test_behaviours_given_to_the_constructor_reach_the_trainer_in_order(tmp_path):
    spec = BehaviourSpec("eye", 4, (ObsSpec((2, 2, 3), np.dtype("u1")),), branches=(5,))

    def sim(world):
        world.register("late", 1, [(1,)], continuous=1)  # register still adds one at run time
        finish(world)

    with trainer_and_world(tmp_path / "bridge", sim, behaviours=[spec, WALKER]) as env:
        assert list(env.behaviours) == ["eye", "walker", "late"]
        assert env.behaviours["eye"] == spec
        assert env.behaviours["walker"] == BehaviourSpec("walker", 2, (ObsSpec((2,)), ObsSpec((1,), np.dtype("u1"))),
                                                         continuous=1)


@pytest.mark.parametrize("behaviour, message", [
    (dict(name="w", max_agents=2, observations=[(2,)], continous=1), r"unexpected keyword .*continous.*give name"),
    (dict(name="w", max_agents=0, observations=[(2,)], continuous=1), "max agents must be in"),
    ("walker", "takes BehaviourSpec objects or dicts .* not str"),
])
def test_a_wrong_behaviour_is_refused_before_attaching(tmp_path, behaviour, message):
    trainer = Channel.create(tmp_path / "bridge", timeout_s=5)
    try:
        with pytest.raises((BridgeError, ValueError), match=message):
            World(str(trainer.header_path), behaviours=[behaviour], timeout_s=5)
        assert trainer.simulator_version == (0, 0), "the channel was attached by a World that then failed"
    finally:
        trainer.close()


def test_a_step_with_an_observation_left_unset_is_refused_and_nothing_is_sent(world):
    world.request_decision("walker", 1).set_observation(0, [1.0, 2.0])  # observation 1 forgotten
    with pytest.raises(BridgeError, match=r"decision request of agent 1 of 'walker' has no observation 1: "
                                          r"call \.set_observation\(1, value\)"):
        world.step()
    assert world.channel.turn == 0, "a refused step must not hand over"


def test_an_ended_episode_needs_its_final_observations_too(world):
    world.end_episode("picker", 4, interrupted=True)
    with pytest.raises(BridgeError, match="ended episode of agent 4 of 'picker' has no observation 0"):
        world.step()


def test_a_reused_row_never_resends_the_previous_agents_observation(tmp_path):
    """Turn 1: agent 1 in row 0. Turn 2: agent 2 takes row 0 and forgets an observation: the step is
    refused instead of sending agent 1's data as agent 2's; once set, agent 2's own data goes out."""
    def sim(world):
        world.register(**WALKER)
        world.request_decision("walker", 1).set_observation(0, [1.0, 1.0]).set_observation(1, [11])
        assert world.step() == "ok"
        late = world.request_decision("walker", 2).set_observation(0, [2.0, 2.0])
        with pytest.raises(BridgeError, match="agent 2 of 'walker' has no observation 1"):
            world.step()
        late.set_observation(1, [22])
        finish(world)

    with trainer_and_world(tmp_path / "bridge", sim) as env:
        env.step()
        decisions, _ = env.get_steps("walker")
        assert decisions.agent_id.tolist() == [2]
        assert decisions.obs[0].tolist() == [[2.0, 2.0]] and decisions.obs[1].tolist() == [[22]]


def test_observations_are_checked_when_set(world):
    row = world.request_decision("walker", 1)
    with pytest.raises(BridgeError, match=r"has observations 0\.\.1, not 2"):
        row.set_observation(2, [1.0])
    with pytest.raises(BridgeError, match=r"observation 0 of 'walker' has shape \(2,\), got a value of shape \(3,\)"):
        row.set_observation(0, [1.0, 2.0, 3.0])


def test_an_action_mask_stays_inside_its_branch(world):
    row = world.request_decision("picker", 1).set_observation(0, [0.0])
    with pytest.raises(BridgeError, match=r"branch 0 of 'picker' has options 0\.\.2: cannot forbid \[3\]"):
        row.set_action_mask(0, [1, 3])  # option 3 of branch 0 would be option 0 of branch 1
    with pytest.raises(BridgeError, match=r"cannot forbid \[-1\]"):
        row.set_action_mask(1, [-1])  # would be the last option of branch 0
    with pytest.raises(BridgeError, match="has 2 discrete branches: there is no branch 2"):
        row.set_action_mask(2, [0])
    row.set_action_mask(1, [1])
    rows = world._decisions["picker"]
    assert rows.extra[0].tolist() == [False, False, False, False, True], "a refused call must write nothing"


def test_more_agents_registered_mid_turn_keep_the_rows_already_requested(tmp_path):
    def sim(world):
        world.register(**WALKER)
        early = [world.request_decision("walker", i).set_observation(0, [i, -i]).set_reward(0.5 * i)
                 for i in range(2)]
        world.end_episode("walker", 40).set_observation(0, [4, 0]).set_observation(1, [4]).set_reward(-1.0)
        world.register("walker", 5, [(2,), ((1,), "uint8")], continuous=1)  # the same spec, more agents
        for i, row in enumerate(early):  # a builder from before the growth still writes its row
            row.set_observation(1, [10 + i])
        for i in range(2, 5):
            world.request_decision("walker", i).set_observation(0, [i, -i]).set_observation(1, [10 + i]) \
                .set_reward(0.5 * i)
        finish(world)

    with trainer_and_world(tmp_path / "bridge", sim) as env:
        assert env.behaviours["walker"].max_agents == 5
        decisions, ended = env.get_steps("walker")
        assert decisions.agent_id.tolist() == [0, 1, 2, 3, 4]
        assert decisions.obs[0].tolist() == [[i, -i] for i in range(5)]
        assert decisions.obs[1].tolist() == [[10 + i] for i in range(5)]
        assert decisions.reward.tolist() == [0.5 * i for i in range(5)]
        assert ended.agent_id.tolist() == [40] and ended.obs[1].tolist() == [[4]]
