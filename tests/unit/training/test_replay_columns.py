"""The columns a replay shard checks from the first chunk on match what collectors really store."""

import pytest

from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.envs import make_vec
from relayrl.runtime.shard import schema_of, schema_problem
from relayrl.training.collector import OffPolicyCollector
from relayrl.training.offpolicy import replay_columns


@pytest.mark.parametrize("algo, env", [("dqn", "CartPole-v1"), ("sac", "Pendulum-v1"), ("dqn", "MinAtar/Breakout-v1")])
def test_known_columns_fit_what_a_collector_stores(algo, env):
    cfg = build_config(algo, None, [f"env.id={env}"]).algo_config
    with make_vec(env, num_envs=2) as venv:
        policy = get_algo(algo).algo_cls(cfg, venv.single_observation_space, venv.single_action_space, 2).policy
        collector = OffPolicyCollector(venv, policy, 1, 0.99)
        collector.reset(seed=0)
        batch, _ = collector.collect(3)
    known = {k: (d, s) for k, d, s in replay_columns(policy)}
    assert set(known) == {"obs", "next_obs", "action"}
    assert schema_problem(known, batch, partial=True) == ""
    assert {k: schema_of(batch)[k] for k in known} == known
