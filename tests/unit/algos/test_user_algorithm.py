"""Your own algorithm by reference, "package.module:name" (relayrl/algos/__init__.py): the module registers
it when imported, its section is ``name``, and every way a reference can be wrong is a ConfigError that
names the module or class and the fix."""

from __future__ import annotations

import itertools
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

import relayrl.algos as algos
from relayrl.algos import get_algo, registry
from relayrl.config import build_config, default_config, to_yaml, validate
from relayrl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
REF = "examples.reinforce:reinforce"
_count = itertools.count()

# a module that registers an algorithm built from the example's classes, with one thing changed (``{body}``)
USER_MODULE = textwrap.dedent("""
    from examples.reinforce import Reinforce, ReinforceConfig, ReinforcePolicy
    from relayrl.algos import register
    {body}
""")


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch, tmp_path):
    """The registrations and imports of a test stay in it (test_core checks the built-ins are all there is)."""
    algos.available()  # the built-ins register once per process: into the real registry, before the copy
    monkeypatch.setattr(registry, "REGISTERED", dict(registry.REGISTERED))
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name == "examples" or name.startswith(("examples.", "user_algo_")):
            del sys.modules[name]


def user_module(tmp_path: Path, body: str) -> str:
    name = f"user_algo_{next(_count)}"
    (tmp_path / f"{name}.py").write_text(USER_MODULE.format(body=textwrap.dedent(body)))
    return name


def test_a_reference_imports_the_module_and_finds_the_algorithm_it_registers():
    entry = get_algo(REF)
    assert "examples.reinforce" in sys.modules and entry.name == "reinforce" and entry.on_policy
    assert entry.algo_cls.__name__ == "Reinforce" and entry.policy_cls.__name__ == "ReinforcePolicy"
    assert get_algo(REF) is entry
    with pytest.raises(ConfigError, match="unknown algorithm 'reinforce': did you mean 'examples.reinforce:reinforce'"):
        get_algo("reinforce")  # a user algorithm is always named by reference, so every process can import it
    assert get_algo("ppo").name == "ppo"  # the built-ins keep their plain names


def test_its_config_section_is_the_registered_name_and_round_trips_through_yaml():
    config = build_config(REF, None, ["reinforce.lr=0.01", "env.num_envs=2"])
    assert config.algo == REF and config.reinforce.lr == 0.01
    assert config.algo_config is config.reinforce  # how the loop, workers and evaluator find it
    data = yaml.safe_load(to_yaml(config))
    assert data["algo"] == REF and data["reinforce"]["lr"] == 0.01 and "ppo" not in data
    assert build_config(REF, data) == config  # relayrl config -> --config
    assert validate(REF, config.model_dump()) == config  # config.yaml and checkpoints -> eval, --resume
    assert default_config(REF).reinforce.num_steps == 64
    with pytest.raises(ConfigError, match="unknown config key 'reinforce.lrr': did you mean 'reinforce.lr'"):
        build_config(REF, None, ["reinforce.lrr=1"])
    with pytest.raises(ConfigError, match="for algo 'examples.reinforce:reinforce' but you asked to train 'ppo'"):
        build_config("ppo", data)


def test_the_policy_is_built_apart_and_acts(tmp_path):
    import gymnasium as gym
    import numpy as np

    config = build_config(REF)
    env = gym.make("CartPole-v1")
    policy = get_algo(config.algo).build_policy(config.algo_config, env.observation_space,
                                                env.action_space)
    assert policy.predict(np.zeros(4, np.float32)) in (0, 1)
    out = policy.act(np.zeros((3, 4), np.float32), "collect")
    assert out.action.shape == out.logp.shape == out.value.shape == (3,)


@pytest.mark.parametrize("ref, message", [
    ("no_such_package.algo:x", "algorithm 'no_such_package.algo:x': cannot import module 'no_such_package.algo' "
                               "(ModuleNotFoundError: No module named 'no_such_package')"),
    ("examples.reinforce:nope", "module 'examples.reinforce' does not register 'nope' (it registers 'reinforce'): "
                                "call relayrl.algos.register('nope', Config, Algorithm, Policy, on_policy=...)"),
    ("examples.reinforce", "unknown algorithm 'examples.reinforce'"),
    ("examples/reinforce.py:reinforce", "expected 'package.module:name'"),
])
def test_a_reference_that_does_not_resolve_names_the_module_and_the_fix(ref, message):
    with pytest.raises(ConfigError) as info:
        build_config(ref)
    assert message in str(info.value) and "\n" not in str(info.value)


BROKEN = {
    "missing learn": ("""
        from relayrl.core import Algorithm
        class NoLearn(Algorithm):
            def __init__(self, cfg, obs_space, act_space, num_envs): ...
            def state_dict(self): return {}
            def load_state_dict(self, state): ...
        register("nolearn", ReinforceConfig, NoLearn, ReinforcePolicy, on_policy=True)
        """, "nolearn", "the algorithm class {module}.NoLearn does not define learn (abstract in "
                        "relayrl.core.Algorithm): define it"),
    "missing act and value": ("""
        from relayrl.core import Policy
        class Half(Policy):
            def __init__(self, obs_space, act_space, cfg): ...
            def get_weights(self): return {}
            def set_weights(self, weights, version=None): ...
        register("half", ReinforceConfig, Reinforce, Half, on_policy=True)
        """, "half", "the policy class {module}.Half does not define act (abstract in relayrl.core.Policy)"),
    "no value for on-policy": ("""
        class NoValue(ReinforcePolicy):
            value = __import__("relayrl.core").core.Policy.value
        register("novalue", ReinforceConfig, Reinforce, NoValue, on_policy=True)
        """, "novalue", "the policy class {module}.NoValue does not define value(obs), which on-policy collection "
                        "bootstraps from"),
    "an algorithm built in another order": ("""
        class Backwards(Reinforce):
            def __init__(self, obs_space, act_space, config, n): ...
        register("backwards", ReinforceConfig, Backwards, ReinforcePolicy, on_policy=True)
        """, "backwards", "the algorithm class {module}.Backwards is built as Backwards(cfg, obs_space, act_space, "
                          "num_envs), but its constructor takes (obs_space, act_space, config, n)"),
    "a policy built in the algorithm's order": ("""
        class Sideways(ReinforcePolicy):
            def __init__(self, cfg, obs_space, act_space, num_envs): ...
        register("sideways", ReinforceConfig, Reinforce, Sideways, on_policy=True)
        """, "sideways", "the policy class {module}.Sideways is built as Sideways(obs_space, act_space, cfg)"),
    "not an Algorithm": ("""
        class Plain:
            def learn(self, batch, progress=0.0): return {}
        register("plain", ReinforceConfig, Plain, ReinforcePolicy, on_policy=True)
        """, "plain", "the algorithm class {module}.Plain does not subclass relayrl.core.Algorithm: derive it "
                      "from Algorithm and define learn, load_state_dict, state_dict"),
    "config not an AlgoConfig": ("""
        register("dictcfg", dict, Reinforce, ReinforcePolicy, on_policy=True)
        """, "dictcfg", "the config class builtins.dict is not a relayrl.config.AlgoConfig"),
    "off-policy without replay options": ("""
        register("offp", ReinforceConfig, Reinforce, ReinforcePolicy, on_policy=False)
        """, "offp", "must subclass relayrl.config.ReplayLoopConfig"),
    "a name that is a common section": ("""
        register("env", ReinforceConfig, Reinforce, ReinforcePolicy, on_policy=True)
        """, "env", "'env' cannot name a config section"),
    "an error at import": ("""
        raise RuntimeError("the GPU is on fire")
        """, "x", "cannot import module '{module}' (RuntimeError: the GPU is on fire): fix the module"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_algorithm_module_is_a_config_error_naming_the_class_and_the_method(tmp_path, case):
    body, name, message = BROKEN[case]
    module = user_module(tmp_path, body)
    with pytest.raises(ConfigError) as info:
        get_algo(f"{module}:{name}")
    assert message.format(module=module) in str(info.value) and "\n" not in str(info.value)


def test_a_module_registers_under_its_own_reference_and_a_builtin_name_stays_the_builtin(tmp_path):
    module = user_module(tmp_path, """
        register("ppo", ReinforceConfig, Reinforce, ReinforcePolicy, on_policy=True)
        """)
    mine = get_algo(f"{module}:ppo")
    assert mine.algo_cls.__name__ == "Reinforce" and get_algo("ppo").algo_cls.__name__ == "PPO"
    assert build_config(f"{module}:ppo", None, ["ppo.lr=0.5"]).ppo.lr == 0.5  # the section is the name


EXPORTABLE = """
    from torch import nn
    from relayrl.policy.graph import ARGMAX, ObservationInput, PolicyGraph

    class Greedy(nn.Module):
        def __init__(self, policy):
            super().__init__()
            self.observation, self.actor = ObservationInput(policy.obs_rms, (-1,)), policy.actor

        def forward(self, obs):
            return self.actor(self.observation(obs)).argmax(-1)

    class ExportablePolicy(ReinforcePolicy):
        def export_graph(self):
            return PolicyGraph(Greedy(self), ARGMAX)

    register("exportable", ReinforceConfig, Reinforce, ExportablePolicy, on_policy=True)
    """


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
def test_export_takes_its_policy_by_the_graph_it_declares_and_names_the_method_when_it_declares_none(tmp_path,
                                                                                                   capsys):
    import gymnasium as gym
    import numpy as np
    import torch

    import relayrl
    from relayrl.cli import main
    from relayrl.export import export_policy
    from relayrl.training.trainer import run_trainer

    space = gym.make("CartPole-v1").observation_space
    config = build_config(REF)  # the example's policy declares no graph: refused, naming what to define
    policy = get_algo(REF).build_policy(config.algo_config, space, gym.spaces.Discrete(2))
    with pytest.raises(ConfigError, match=r"cannot export a ReinforcePolicy: .*define ReinforcePolicy.export_graph\(\) "
                                          r"returning a relayrl.policy.graph.PolicyGraph") as info:
        export_policy(policy, tmp_path / "refused.pt", "torchscript")
    assert "\n" not in str(info.value) and not list(tmp_path.glob("refused*"))

    ref = f"{user_module(tmp_path, EXPORTABLE)}:exportable"  # one that declares its graph: a run of it exports
    run = tmp_path / "run"
    run_trainer(build_config(ref, None, ["env.num_envs=2", "exportable.num_steps=16", "eval.freq=0", "eval.episodes=1",
                                   "eval.num_envs=1"], {"total_steps": 64}), run_dir=run, tensorboard=False)
    assert main(["export", str(run), "--format", "torchscript"]) == 0
    assert "policy.pt" in capsys.readouterr().out
    obs = np.random.default_rng(3).normal(0.0, 2.0, (50, *space.shape)).astype(np.float32)
    got = torch.jit.load(str(run / "policy.pt"))(torch.from_numpy(obs)).numpy()
    want = relayrl.load(run).predict(obs)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 1  # (the check is not of a constant policy)
