"""SharedSimulator (relayrl/bridge/attach.py): training and evaluation on one simulator, as with
`--env bridge:attach`; after an evaluation, training's running episodes end as interrupted."""

from __future__ import annotations

import sys

import numpy as np

from relayrl.bridge.agent_env import BridgeBehaviours
from relayrl.envs.agents import OneBehaviour
from relayrl.bridge.attach import SharedSimulator

BALL3D = [sys.executable, "-m", "relayrl.bridge.examples.ball3d", "--agents", "3"]


def test_training_after_an_evaluation_starts_fresh_episodes_and_ends_the_old_ones_interrupted():
    shared = SharedSimulator(BridgeBehaviours(BALL3D))
    try:
        training, evaluation = OneBehaviour(shared.training, "ball3d"), OneBehaviour(shared.evaluation, "ball3d")
        training.reset(0)
        before = training.step(np.zeros((3, 2), np.float32))
        evaluation.reset(1)
        evaluation.step(np.zeros((3, 2), np.float32))
        after = training.step(np.full((3, 2), 0.5, np.float32))  # answers `before`, which the evaluation replaced
        assert sorted(after.end_ids.tolist()) == sorted(before.ids.tolist())
        assert after.interrupted.all() and (after.end_reward == 0).all()
        assert np.array_equal(after.end_obs, before.obs)
        assert (after.obs[:, :2] == 0).all(), "the reset's fresh episodes, untilted: the stale actions were not sent"
        following = training.step(np.full((3, 2), 0.5, np.float32))  # then training goes on as usual
        assert sorted(following.ids.tolist()) == sorted(after.ids.tolist())
        assert np.allclose(following.obs[:, :2], 0.25 * 0.5), "ball3d: tilt = 0.25 rad x the action"
    finally:
        shared.training.close()
        shared.evaluation.close()
    assert shared.env.bridge.instances[0].channel.closed
