"""The learners' contract without a group: one learner's calls, joining a group, and what is refused before any
learner starts (in this process; the group itself is tested with real processes in test_learner_exactness.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos import get_algo
from relayrl.algos.compiled import shared_mode
from relayrl.config import build_config
from relayrl.core import Algorithm
from relayrl.errors import ConfigError
from relayrl.learners import SOLO, init_collective, per_learner
from relayrl.learners.moments import PooledMoments
from relayrl.policy.normalizer import RunningMeanStd
from relayrl.testing.learners import Alone

BOX, DISCRETE = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2)


def build(name, *sets, act_space=DISCRETE):
    cfg = build_config(name, None, list(sets)).algo_config
    return get_algo(name).build_algorithm(cfg, BOX, act_space, 2)


def test_one_learner_calls_return_their_input_and_change_no_gradient():
    layer = torch.nn.Linear(3, 2)
    layer(torch.ones(4, 3)).sum().backward()
    before = [p.grad.clone() for p in layer.parameters()]
    values = torch.tensor([1.0, 2.0])
    assert SOLO.average_gradients(layer.parameters(), values) is values
    for p, grad in zip(layer.parameters(), before):
        assert torch.equal(p.grad, grad)
    assert SOLO.any_(True) and not SOLO.any_(False) and SOLO.max_(3) == 3
    assert SOLO.broadcast_object({"a": 1}) == {"a": 1}
    rms = RunningMeanStd((2,))
    rms.update(np.ones((5, 2)))
    PooledMoments(rms).pool(SOLO)
    assert rms.count == 5  # (nothing pooled, nothing changed)


def test_every_algorithm_starts_as_a_single_learner():
    algo = build("ppo")
    assert algo.learners is SOLO and algo.learners.size == 1


def test_one_learner_needs_no_group(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert init_collective() is SOLO
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert init_collective() is SOLO


def test_joining_a_group_without_a_rendezvous_address_says_what_to_set(monkeypatch):
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigError, match="MASTER_ADDR and MASTER_PORT are not set: start them with torchrun"):
        init_collective()
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ConfigError, match="WORLD_SIZE='two' is not a whole number"):
        init_collective()
    with pytest.raises(ConfigError, match=r"learner rank 2 of 2: the rank must be in \[0, 2\)"):
        init_collective(rank=2, size=2)


def test_algorithms_that_do_not_declare_data_parallel_are_refused_for_several_learners():
    for name in ("ppo", "appo", "dqn", "sac"):
        get_algo(name).check_learners(4)
    for name in ("a2c", "td3", "crossq", "redq", "pqn", "bc", "iql"):
        get_algo(name).check_learners(1)  # (one learner: any algorithm)
        with pytest.raises(ConfigError, match=f"^{name} cannot learn with 2 learners: .*does not declare "
                                              "data_parallel = True.*set learners=1, or train with ppo, appo, dqn or sac"):
            get_algo(name).check_learners(2)
    with pytest.raises(ConfigError, match="learners=0"):
        get_algo("ppo").check_learners(0)
    a2c = build("a2c")
    with pytest.raises(ConfigError, match="A2C does not declare data_parallel = True"):
        a2c.bind_learners(Alone(0, 2))


def test_a_user_algorithm_declares_it_with_a_class_attribute():
    class Mine(Algorithm):
        data_parallel = True

        def learn(self, batch, progress=0.0):
            return {}

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    algo = Mine(None, BOX, DISCRETE, 1)
    algo.bind_learners(Alone(1, 3))
    assert algo.learners.rank == 1 and algo.learners.size == 3


def test_options_several_learners_cannot_share_are_refused_before_learning():
    with pytest.raises(ConfigError, match="ppo.batch_size=15 cannot be shared by 2 learners.*multiple of 2"):
        build("ppo", "ppo.batch_size=15").bind_learners(Alone(0, 2))
    with pytest.raises(ConfigError, match="ppo.recurrent=gru cannot be shared by 2 learners"):
        build("ppo", "ppo.recurrent=gru").bind_learners(Alone(0, 2))
    with pytest.raises(ConfigError, match="dqn.batch_size=63 cannot be shared by 2 learners"):
        build("dqn", "dqn.batch_size=63").bind_learners(Alone(0, 2))
    with pytest.raises(ConfigError, match="sac.batch_size=255 cannot be shared by 2 learners"):
        build("sac", "sac.batch_size=255", act_space=BOX).bind_learners(Alone(0, 2))
    with pytest.raises(ConfigError, match="sac.compile=max-autotune replays the update as CUDA graphs, which cannot "
                                          "take part in the gradient all-reduce of 2 learners"):
        build("sac", "sac.compile=max-autotune", act_space=BOX).bind_learners(Alone(0, 2))
    build("ppo", "ppo.recurrent=gru").bind_learners(SOLO)  # (one learner: as before)


def test_compile_auto_leaves_out_cuda_graphs_for_several_learners():
    assert shared_mode("reduce-overhead", "auto", 1, "ppo") == "reduce-overhead"
    assert shared_mode("reduce-overhead", "auto", 2, "ppo") == "default"
    assert shared_mode(None, "off", 2, "ppo") is None and shared_mode("default", "default", 2, "ppo") == "default"
    with pytest.raises(ConfigError, match="ppo.compile=reduce-overhead replays"):
        shared_mode("reduce-overhead", "reduce-overhead", 2, "ppo")


def test_a_learners_share_of_a_batch_must_be_whole():
    assert per_learner(256, 4, "sac.batch_size") == 64 and per_learner(256, SOLO, "sac.batch_size") == 256
    with pytest.raises(ConfigError, match="sac.batch_size=250 cannot be shared by 4 learners"):
        per_learner(250, 4, "sac.batch_size")


def test_the_learners_package_imports_nothing_of_the_loop_the_runtime_or_the_cli():
    """relayrl/learners/ is the algorithms' side: the placement (runtime, launch, CLI) builds on it, not under it."""
    import ast
    from pathlib import Path

    import relayrl.learners

    forbidden = ("relayrl.training", "relayrl.runtime", "relayrl.net", "relayrl.bridge", "relayrl.cli",
                 "relayrl.launch", "relayrl.api")
    found = []
    for path in Path(relayrl.learners.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.name}: {name}" for name in names if name.startswith(forbidden)]
    assert found == []
