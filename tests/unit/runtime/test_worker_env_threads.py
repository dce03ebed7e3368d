"""A rollout worker's native ALE envs step on the threads it is given (the mp backend gives 1: its worker
processes, one per core, are the parallelism), and on one per core when it is given none."""

import os

import pytest

from relayrl.config import build_config
from relayrl.runtime.rollout_worker import RolloutWorker

pytest.importorskip("ale_py.vector_env")


@pytest.mark.parametrize("env_threads, expected", [(1, 1), (None, min(3, os.cpu_count() or 1))])
def test_a_workers_ale_envs_step_on_the_threads_it_is_given(env_threads, expected):
    config = build_config("ppo", None, ["env.id=ALE/Pong-v5", "env.num_envs=3", "ppo.num_steps=4"])
    worker = RolloutWorker(0, config, seed=0, env_threads=env_threads)
    try:
        assert worker.venv.backend.threads == expected  # (env.manager auto picked the native manager)
        assert worker.collect().env_steps == 12
    finally:
        worker.close()


def test_the_threads_of_a_worker_do_not_reach_managers_without_them():
    config = build_config("ppo", None, ["env.id=CartPole-v1", "env.num_envs=2", "ppo.num_steps=4"])
    for manager in ("native", "sync"):
        worker = RolloutWorker(0, config.model_copy(update={"env": config.env.model_copy(update={"manager": manager})}),
                               seed=0, env_threads=1)
        try:
            assert worker.collect().env_steps == 8
        finally:
            worker.close()
