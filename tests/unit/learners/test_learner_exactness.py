"""Two data-parallel learners (real processes, gloo on 127.0.0.1), each given half of a fixed batch, end where one
learner ends on the whole batch; and what must be agreed between them is agreed.

One group of two learner processes runs every scenario of relayrl/testing/learners.py in order (one start, ~3 s of
imports); each test compares its scenario's results with the same scenario run here by one learner (``SOLO``).

Tolerance: float32 sums taken in another order (each learner sums its half, the all-reduce adds the halves) differ
in the last bits, and Adam carries those through a few steps: rtol 1e-5 and atol 1e-6 on the on-policy weights
and DQN's, atol 1e-5 on SAC's (its loss runs the actor twice and the critics three times per update).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from relayrl.learners import SOLO
from relayrl.testing.learners import SCENARIOS, Alone, observations, run_group

GROUP = ["ppo_exact", "appo_exact", "dqn_exact", "sac_exact", "ppo_kl", "ppo_interrupt", "ppo_obs_norm", "appo_widths",
         "metrics", "gather"]


@pytest.fixture(scope="module")
def learners():
    """Each learner's results, by scenario (an "error: ..." string where one raised); the learners find their group
    as under torchrun, in MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK (the fault tests: by address)."""
    return run_group(GROUP, size=2, deadline_s=120, timeout_s=30, torchrun=True)


def results(learners, name):
    for rank, out in enumerate(learners):
        assert not isinstance(out[name], str), f"learner {rank}: {out[name]}"
    return [out[name] for out in learners]


def assert_same_weights(result, reference, skip=(), rtol=1e-5, atol=1e-6):
    keys = [key for key in reference if key not in skip]
    assert keys and set(keys) <= set(result)
    for key in keys:
        np.testing.assert_allclose(result[key], reference[key], rtol=rtol, atol=atol, err_msg=key)


@pytest.mark.parametrize("name", ["ppo_exact", "appo_exact"])
def test_two_learners_on_halves_of_a_rollout_end_with_one_learners_weights(learners, name):
    """3 epochs x 2 iterations, advantages normalised over both halves, rewards scaled by the pooled return std,
    the averaged gradient clipped (grad_clip=0.05 is active): one minibatch per epoch, each learner's being its own
    columns, so the two halves make the whole minibatch exactly."""
    first, second = results(learners, name)
    reference = SCENARIOS[name](SOLO)
    for key in first:  # both learners hold the same weights and statistics, bit for bit
        if key != "ret":
            np.testing.assert_array_equal(first[key], second[key], err_msg=key)
    assert_same_weights(first, reference, skip=("ret",))
    # each learner's running returns are its own columns' (the one learner's, side by side)
    np.testing.assert_allclose(np.concatenate([first["ret"], second["ret"]]), reference["ret"], rtol=1e-6)


def test_two_dqn_learners_on_halves_of_a_replay_batch_end_with_one_learners_weights(learners):
    first, second = results(learners, "dqn_exact")
    reference = SCENARIOS["dqn_exact"](SOLO)
    assert_same_weights(first, reference, skip=("priorities",))
    assert_same_weights(second, reference, skip=("priorities",))
    # each reports its own rows' priorities: side by side, the one learner's
    np.testing.assert_allclose(np.concatenate([first["priorities"], second["priorities"]], axis=1),
                               reference["priorities"], rtol=1e-5, atol=1e-6)


def test_two_sac_learners_on_halves_of_a_replay_batch_end_with_one_learners_weights(learners):
    """Actor, twin critics, temperature (autotune) and the soft target; the sampling noise is a function of each
    row (testing/learners.py rowwise_noise), so a half of the batch gets the noise it gets in the whole."""
    first, second = results(learners, "sac_exact")
    reference = SCENARIOS["sac_exact"](SOLO)
    assert_same_weights(first, reference, rtol=1e-5, atol=1e-5)
    assert_same_weights(second, reference, rtol=1e-5, atol=1e-5)


def test_the_kl_early_stop_is_taken_by_every_learner_at_the_same_minibatch(learners):
    """Alone, learner 1 (its columns' log-probabilities far from the policy's) would stop after its first minibatch
    and learner 0 many later; together they stop at the same one, decided on the KL of both halves (later than
    learner 1 alone, sooner than learner 0 alone), and hold the same weights."""
    alone = [float(SCENARIOS["ppo_kl"](Alone(rank, 2))["updates"]) for rank in (0, 1)]
    first, second = results(learners, "ppo_kl")
    assert first["kl_stop"] == second["kl_stop"] == 1.0
    assert first["updates"] == second["updates"]
    assert alone[1] < first["updates"] < alone[0]
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)


def test_a_stop_asked_of_one_learner_stops_every_learner(learners):
    """Learner 0's stop event is set, learner 1's is not: both end the iteration before any update (alone, learner 1
    would wait in its first all-reduce for a learner that never comes)."""
    first, second = results(learners, "ppo_interrupt")
    assert first["interrupted"] == second["interrupted"] == 1.0
    assert first["updates"] == second["updates"] == 0.0


def test_observation_statistics_are_the_same_on_every_learner_and_count_every_learners_observations(learners):
    first, second = results(learners, "ppo_obs_norm")
    for round_ in (0, 1):
        key = f"round{round_}"
        np.testing.assert_array_equal(first[key], second[key])
        seen = np.concatenate([observations(rank, r) for r in range(round_ + 1) for rank in (0, 1)]).astype(np.float64)
        mean, var, count = np.split(first[key], [3, 6])
        assert count[0] == len(seen)
        np.testing.assert_allclose(mean, seen.mean(0), rtol=1e-10)
        np.testing.assert_allclose(var, seen.var(0), rtol=1e-10)


def test_learners_whose_rollouts_differ_in_width_take_as_many_minibatches(learners):
    """Learner 0's 48 steps make 6 minibatches of 8, learner 1's 16 make 2: both take 2 per epoch (taking 6, learner 0
    would wait in an all-reduce learner 1 never makes), and hold the same weights."""
    first, second = results(learners, "appo_widths")
    assert first["updates"] == second["updates"] == 2 * 2
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)


def test_metrics_are_averaged_over_the_learners(learners):
    first, second = results(learners, "metrics")
    assert first == second == {"loss": 0.5, "updates": 5.0, "rank": 0.5}


def test_every_learner_gets_every_learners_objects_in_rank_order(learners):
    first, second = results(learners, "gather")
    np.testing.assert_array_equal(first["episodes"], [0.0, 1.0, 1.0])
    np.testing.assert_array_equal(second["episodes"], [0.0, 1.0, 1.0])
    assert SOLO.all_gather_object({"a": 1}) == [{"a": 1}]


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="NCCL needs a GPU per learner: two CUDA devices")
def test_learners_on_two_gpus_average_their_gradients_over_nccl():
    outs = run_group(["nccl_average"], size=2, deadline_s=120, timeout_s=60, device="cuda")
    for out in results(outs, "nccl_average"):
        np.testing.assert_allclose(out["weight"], np.full((2, 3), 4 * 1.5))  # 4 rows of 1 and of 2: mean 6
        np.testing.assert_allclose(out["bias"], np.full(2, 4.0))
        np.testing.assert_allclose(out["values"], [0.5])
        assert bool(out["any"])
