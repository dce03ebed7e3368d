"""The contracts of relayrl/core.py are what the loop, the runtime and the relay rely on: every built-in
algorithm, policy and sample source is one of them, and nothing discovers their abilities with hasattr."""

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos import available, get_algo
from relayrl.config import default_config
from relayrl.core import Algorithm, Policy, SampleSource
from relayrl.errors import EnvError

ROOT = Path(__file__).resolve().parents[2] / "relayrl"
SPACES = {"dqn": (gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2)),
          "sac": (gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32))}
SPACES["crossq"] = SPACES["sac"]
SPACES["iql"] = SPACES["sac"]
PROBE = re.compile(r"\b(?:has|get)attr\(\s*(?:self\.)?(\w+)")
CONTRACT_OBJECTS = re.compile(r"policy|algo$|algorithm|source|samples|collector|learning|pool")


def test_nothing_in_training_runtime_or_net_probes_a_policy_algorithm_or_source():
    probes = []
    for folder in ("training", "runtime", "net"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                for name in PROBE.findall(line):
                    if CONTRACT_OBJECTS.search(name):
                        probes.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert probes == []


def test_the_probe_pattern_catches_the_probes_it_forbids():  # (so the test above can fail)
    caught = [name for line in ('hasattr(self.algo, "set_progress")', 'getattr(policy, "recurrent", False)',
                                'hasattr(self.samples, "poll")', 'getattr(config, config.algo)')
              for name in PROBE.findall(line) if CONTRACT_OBJECTS.search(name)]
    assert caught == ["algo", "policy", "samples"]


CONFIG_PROBE = re.compile(r"\b(?:has|get)attr\(\s*([\w.]+)")
CONFIG_NAME = re.compile(r"^(?:\w*_)?(?:cfg|config)$")  # cfg, config, algo_cfg, algo_config, default_config(...)


def config_probes(line: str) -> list[str]:
    """The objects of ``line``'s getattr/hasattr calls that are configs (any part of a dotted name)."""
    return [obj for obj in CONFIG_PROBE.findall(line) if any(CONFIG_NAME.match(part) for part in obj.split("."))]


def test_nothing_outside_the_algorithms_and_config_reads_an_option_by_name():
    """An algorithm's options are asked through AlgoConfig's methods (check_placement, prenorm_steps, ...),
    which the algorithms' configs override; only algos/ and config.py know the fields."""
    probes = []
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[0] == "algos" or relative == Path("config.py"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if config_probes(line):
                probes.append(f"{relative}:{number}: {line.strip()}")
    assert probes == []


def test_the_config_probe_pattern_catches_config_probes_only():  # (so the test above can fail)
    caught = ['getattr(cfg, "prenorm", False)', 'getattr(self.cfg, "prenorm", False)',
              'if getattr(config.algo_config, "prenorm", False):', 'hasattr(algo_cfg, "recurrent")',
              'getattr(config, config.algo)', 'x = getattr(default_config("sac"), "sac")']
    passed = ['getattr(module, name, None)', 'getattr(self.actors[k], method).remote(*args)',
              'hold = getattr(env.unwrapped, "wait", None)', 'value = getattr(self, name)',
              'hasattr(frame, "buffer")', 'getattr(configure, "x")']
    assert [line for line in caught if config_probes(line)] == caught
    assert [line for line in passed if config_probes(line)] == []


@pytest.mark.parametrize("name", ["ppo", "appo", "dqn", "sac", "td3", "redq", "crossq", "a2c", "pqn", "bc", "iql"])
def test_each_builtin_algorithm_builds_its_policy_apart(name):
    entry = get_algo(name)
    cfg = getattr(default_config(name), name)
    obs_space, act_space = SPACES.get(name, SPACES["sac" if name in ("td3", "redq") else "dqn"])
    policy = entry.build_policy(cfg, obs_space, act_space)
    assert isinstance(policy, Policy) and issubclass(entry.algo_cls, Algorithm)
    modules = [m for m in vars(policy).values() if isinstance(m, torch.nn.Module)]
    assert modules and not any(isinstance(v, torch.optim.Optimizer) for v in vars(policy).values())
    algo = entry.algo_cls(cfg, obs_space, act_space, 2)  # (pqn refuses a single env)
    policy.set_weights(algo.policy.get_weights(), version=3)  # the same weights fit the policy built alone
    obs = obs_space.sample()
    np.testing.assert_array_equal(policy.predict(obs), algo.policy.predict(obs))
    assert policy.version == 3
    assert sorted(available()) == sorted(["ppo", "appo", "dqn", "sac", "td3", "redq", "crossq", "a2c", "pqn", "bc", "iql"])


def test_predict_takes_one_observation_or_a_batch_and_refuses_other_shapes():
    obs_space, act_space = SPACES["sac"]
    policy = get_algo("sac").build_policy(getattr(default_config("sac"), "sac"), obs_space, act_space)
    one = policy.predict(np.zeros(3, np.float32))
    batch = policy.predict(np.zeros((5, 3), np.float32))
    assert one.shape == (1,) and batch.shape == (5, 1)
    assert act_space.contains(one.astype(np.float32))
    with pytest.raises(EnvError, match=r"observation of shape \(2,\), expected \(3,\)"):
        policy.predict(np.zeros(2, np.float32))


def test_sample_sources_are_sample_sources():
    from relayrl.net.backend import RelayBackend
    from relayrl.runtime.backends import Backend
    from relayrl.runtime.pool import AsyncOnPolicyPool, OffPolicyPool, OnPolicyPool
    from relayrl.training.agent_collectors import AgentRolloutCollector, AgentTransitionCollector
    from relayrl.training.collector import OffPolicyCollector, OnPolicyCollector

    assert issubclass(RelayBackend, Backend)  # the relay is one more transport under the worker pools
    for cls in (OffPolicyPool, OnPolicyPool, AsyncOnPolicyPool, AgentRolloutCollector,
                AgentTransitionCollector, OnPolicyCollector, OffPolicyCollector):
        assert issubclass(cls, SampleSource), cls
    assert OffPolicyPool.can_poll and not OffPolicyCollector.can_poll


def test_a_recurrent_policy_takes_and_returns_its_state_explicitly():
    from relayrl.config import build_config

    obs_space, act_space = SPACES["dqn"]
    policy = get_algo("ppo").build_policy(build_config("ppo", None, ["ppo.recurrent=gru"]).ppo, obs_space, act_space)
    obs = np.full(4, 0.5, np.float32)
    action, state = policy.predict(obs)  # None: an episode's start
    assert act_space.contains(int(action)) and state.shape == (1, policy.state_size)
    _, later = policy.predict(obs, state)
    assert not np.allclose(later, state)  # the state moved on
    again, same = policy.predict(obs, state)
    np.testing.assert_array_equal(same, later)  # and is the caller's to carry: nothing kept inside
    assert policy.predict(np.stack([obs, obs]))[1].shape == (2, policy.state_size)


def test_an_algorithm_is_built_by_keyword_in_the_order_its_contract_declares():
    """Algorithm.__init__ declares (cfg, obs_space, act_space, num_envs); the registry builds every algorithm
    that way, and its policy as (obs_space, act_space, cfg), with keywords."""
    import inspect

    import gymnasium as gym

    from relayrl.algos import get_algo
    from relayrl.config import build_config
    from relayrl.core import Algorithm

    assert list(inspect.signature(Algorithm.__init__).parameters) == ["self", "cfg", "obs_space", "act_space",
                                                                      "num_envs"]
    obs_space, act_space = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2)
    for name in ("ppo", "appo", "dqn"):
        entry = get_algo(name)
        algo = entry.build_algorithm(getattr(build_config(name), name), obs_space, act_space, 2)
        assert isinstance(algo, entry.algo_cls) and algo.policy.observation_space == obs_space
