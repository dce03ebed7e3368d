"""What `learners` > 1 refuses before any learner starts, and the supervisor's stop flag as a learner sees it (the
learner group itself runs in tests/integration/test_learners_placed.py, with real processes)."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from relayrl.config import build_config
from relayrl.errors import ConfigError
from relayrl.training.group_trainer import SharedStop
from relayrl.training.learner_group import Supervisor, check_learners


def config(algo: str, *sets: str):
    return build_config(algo, None, list(sets))


@pytest.mark.parametrize("algo,sets,named", [
    ("ppo", ["learners=2", "env.num_envs=3"], "env.num_envs=3"),
    ("ppo", ["learners=2", "env.num_envs=4", "ppo.batch_size=63"], "ppo.batch_size=63"),
    ("dqn", ["learners=4", "env.num_envs=4", "dqn.batch_size=34"], "dqn.batch_size=34"),
    ("sac", ["learners=2", "env.id=Pendulum-v1", "env.num_envs=2", "sac.batch_size=255"], "sac.batch_size=255"),
    ("ppo", ["learners=2", "workers=2"], "--workers"),
    ("ppo", ["learners=2", "backend=mp"], "--workers/--backend"),
    ("ppo", ["learners=2", "net.server=127.0.0.1:5555"], "--server"),
    ("ppo", ["learners=2", "overlap=true"], "overlap"),
    ("ppo", ["learners=2", "env.id=bridge:./sim"], "bridge:./sim"),
    ("td3", ["learners=2", "env.id=Pendulum-v1"], "data_parallel"),
])
def test_what_the_learners_cannot_share_is_refused_naming_it(algo, sets, named):
    with pytest.raises(ConfigError, match="learners") as refused:
        check_learners(config(algo, *sets))
    assert named in str(refused.value)


def test_what_they_can_share_is_taken():
    check_learners(config("ppo", "learners=2", "env.num_envs=4", "ppo.batch_size=64"))
    check_learners(config("sac", "learners=2", "env.id=Pendulum-v1", "env.num_envs=2", "sac.batch_size=256"))
    check_learners(config("td3", "env.id=Pendulum-v1", "env.num_envs=3"))  # (one learner: anything goes)


def test_hooks_other_than_before_run_are_refused():
    cfg = config("ppo", "learners=2", "env.num_envs=4")
    with pytest.raises(ConfigError, match="after_iter"):
        Supervisor(cfg, {"hooks": [("after_iter", print, {})]})
    Supervisor(cfg, {"hooks": [("before_run", print, {})], "run_dir": "unused"})


def test_a_learner_sees_the_supervisors_stop_and_its_reason():
    flag = mp.get_context("spawn").Value("i", 0, lock=False)
    stop = SharedStop(flag)
    assert not stop.is_set()
    flag.value = 2
    assert stop.is_set() and stop.reason == "terminated"
    flag.value = 1
    assert stop.reason == "interrupted"
