"""Action masks through the relay: a relayrl worker on a masked env acts under the masks (its test
episodes too) and sends them with its chunks (the masks acted under for PPO, those of the next
observations for DQN); the trainer's RelayBackend accepts that column, checks its width, and hands it
to the learner. Real sockets: a relay in a thread, the worker's loop in a thread."""

from __future__ import annotations

import numpy as np
import pytest

from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.net import wire
from relayrl.net.backend import relay_pool
from relayrl.net.chunk_checks import Refusal
from relayrl.net.remote_worker import RemoteWorker
from relayrl.testing.masked import MaskedChoiceEnv
from relayrl.testing.relay import running_relay, running_worker

ENV = "relayrl.testing.masked:relayrl-test/MaskedChoice-v0"
T, N = 8, 2


def config(algo: str, address: str, tmp_path, *sets: str):
    algo_sets = {"ppo": [f"ppo.num_steps={T}", "ppo.batch_size=16"], "a2c": [f"a2c.num_steps={T}"],
                 "pqn": [f"pqn.num_steps={T}"], "dqn": ["dqn.steps_per_iteration=8", "dqn.batch_size=8"]}[algo]
    return build_config(algo, None, ["net.heartbeat_s=0.1", "net.timeout_s=5", "net.connect_timeout_s=10",
                                     f"env.num_envs={N}", f"net.weights_dir={tmp_path / 'weights'}", *algo_sets,
                                     *sets], {"net.server": address, "env.id": ENV})


@pytest.mark.timeout(60)  # (a trainer that refused the masked chunks would wait for a rollout for ever)
@pytest.mark.parametrize("algo, column", [("ppo", "action_mask"), ("dqn", "next_action_mask"), ("a2c", "action_mask"),
                                          ("pqn", "action_mask")])
def test_a_masked_env_sends_its_masks_and_the_learner_takes_them(tmp_path, algo, column):
    MaskedChoiceEnv.forbidden_taken = 0
    with running_relay() as relay:
        source = relay_pool(config(algo, relay.address, tmp_path, "net.remote_env=true"))
        worker = RemoteWorker(config(algo, relay.address, tmp_path, "net.pace_timeout_s=30"), name="w")
        try:
            with running_worker(worker):
                obs_space, act_space = source.backend.await_spaces(timeout=10)
                learner = get_algo(algo).algo_cls(config(algo, relay.address, tmp_path).algo_config, obs_space,
                                                  act_space, N)
                source.publish(learner.policy.get_weights(), 1)
                batch, steps = source.pull()
                while not batch:
                    batch, more = source.pull()
                    steps += more
                assert worker.run_episodes(3, seed=0)  # test episodes act under the masks as well
        finally:
            source.close()
    mask = batch[column]
    assert mask.dtype == bool and mask.shape[-1] == 5 and (mask.sum(-1) == 2).all()  # two options allowed per step
    if algo != "dqn":
        chosen = np.take_along_axis(mask, batch["action"][..., None].astype(int), -1)
        assert chosen.all()  # every action taken was allowed by the mask stored with it
    assert MaskedChoiceEnv.forbidden_taken == 0
    assert np.isfinite(learner.learn(batch)["loss/policy" if algo in ("ppo", "a2c") else "loss/td"])


def test_a_mask_of_the_wrong_width_is_refused_by_cause(tmp_path):
    env = MaskedChoiceEnv()
    with running_relay() as relay:
        source = relay_pool(config("dqn", relay.address, tmp_path), env.observation_space, env.action_space)
        try:
            chunk = {"obs": np.zeros((4, 2), np.float32), "next_obs": np.zeros((4, 2), np.float32),
                     "action": np.zeros(4, np.int64), "reward": np.zeros(4, np.float32),
                     "terminated": np.zeros(4, bool), "discount": np.ones(4, np.float32)}
            def message(**extra):
                return wire.Message("samples", sender="w", seq=1, version=0, arrays={**chunk, **extra},
                                    meta={"env_steps": 4})
            assert "next_action_mask" not in source.backend.checks.check(message())  # without masks: taken
            assert source.backend.checks.check(message(next_action_mask=np.ones((4, 5), bool)))["next_action_mask"].all()
            with pytest.raises(Refusal, match=r"next_action_mask rows have shape \(4,\), expected \(5,\)"):
                source.backend.checks.check(message(next_action_mask=np.ones((4, 4), bool)))
        finally:
            source.close()
