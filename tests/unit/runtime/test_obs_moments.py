"""Observation normalisation with rollout workers: a worker normalises with the learner's statistics,
counts the raw observations it acted on, and the pool hands their moments to the learner to merge."""

import numpy as np

from relayrl.config import build_config
from relayrl.policy.normalizer import RunningMeanStd
from relayrl.runtime.messages import LoadParams
from relayrl.runtime.rollout_worker import RolloutWorker

SETS = ["ppo.obs_norm=true", "env.num_envs=2", "ppo.num_steps=8"]


def test_a_worker_reports_what_it_saw_and_leaves_the_statistics_to_the_learner():
    config = build_config("ppo", None, SETS)
    worker = RolloutWorker(0, config, seed=0)
    raw = []
    real_step = worker.venv.step

    def step(actions):  # record every raw observation the policy will act on next
        result = real_step(actions)
        raw.append(result.obs.copy())
        return result

    raw.append(worker.collector._obs.copy())
    worker.venv.step = step
    published = worker.policy.obs_rms.state_dict()
    msg = worker.collect()
    seen = np.concatenate(raw[:-1]).astype(np.float64)  # (the last observation is acted on in the next chunk)
    assert msg.obs_moments["count"] == len(seen) == 16
    np.testing.assert_allclose(msg.obs_moments["mean"], seen.mean(0), rtol=1e-9)
    np.testing.assert_allclose(msg.obs_moments["var"], seen.var(0), rtol=1e-9)
    np.testing.assert_array_equal(worker.policy.obs_rms.mean, published["mean"])  # the worker's copy is frozen
    assert worker.collect().obs_moments["count"] == 16  # moments since the last chunk only
    stats = RunningMeanStd((4,))
    stats.update(np.ones((3, 4)))
    worker.load(LoadParams(1, {**worker.policy.get_weights(), "obs_rms": stats.state_dict()}))
    np.testing.assert_array_equal(worker.policy.obs_rms.mean, np.ones(4))  # the learner's, with its weights
    worker.close()


def test_the_learner_merges_the_moments_into_its_statistics():
    from relayrl.algos import get_algo

    config = build_config("ppo", None, SETS)
    worker = RolloutWorker(0, config, seed=0)
    learner = get_algo("ppo").algo_cls(config.ppo, worker.venv.single_observation_space,
                                       worker.venv.single_action_space, 2)
    msg = worker.collect()
    assert learner.policy.obs_rms.count == 0
    learner.policy.merge_observation_moments(msg.obs_moments)  # what the pool does with every chunk's moments
    assert learner.policy.obs_rms.count == 16
    np.testing.assert_allclose(learner.policy.obs_rms.mean, msg.obs_moments["mean"], rtol=1e-12)
    np.testing.assert_allclose(learner.policy.obs_rms.var, msg.obs_moments["var"], rtol=1e-12)
    worker.close()
