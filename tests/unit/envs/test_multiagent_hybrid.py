"""PettingZoo ParallelEnvs with a hybrid action space (relayrl/envs/hybrid.py): each agent's [C + B] row reaches
the env as its (continuous, discrete) tuple; PPO trains on it, and relayrl.load's predict and relayrl export
give the two parts."""

import json

import numpy as np
import pytest

pytest.importorskip("pettingzoo")
from pettingzoo.test import parallel_api_test  # noqa: E402

from relayrl.envs.multiagent import MultiAgentVectorEnv  # noqa: E402
from relayrl.envs.vector import ActionError  # noqa: E402
from relayrl.testing.multiagent_envs import HybridEchoEnv  # noqa: E402

ENV = "pettingzoo:relayrl.testing.multiagent_envs:hybrid_echo"


def test_each_agent_gets_its_continuous_and_discrete_part():
    parallel_api_test(HybridEchoEnv(), num_cycles=10)
    with MultiAgentVectorEnv([HybridEchoEnv]) as venv:
        assert venv.single_action_space == HybridEchoEnv()._act_space
        venv.reset(seed=0)
        turn = venv.step(np.array([[0.25, -0.5, 2.0], [1.0, 0.0, 0.0]], np.float32))
        np.testing.assert_allclose(turn.obs, [[0.25, -0.5, 2.0], [1.0, 0.0, 0.0]])
        np.testing.assert_allclose(turn.reward, [1.75, 0.5])
        with pytest.raises(ActionError, match=r"shape \(2, 2\), expected \(2, 3\)"):
            venv.step(np.zeros((2, 2), np.float32))


def test_ppo_trains_and_the_run_loads_and_exports_the_two_parts(tmp_path, capsys):
    import relayrl
    from relayrl.cli import main

    run = tmp_path / "run"
    sets = ["env.num_envs=2", "ppo.num_steps=16", "ppo.batch_size=32", "eval.freq=0", "eval.episodes=4",
            "eval.num_envs=1"]
    assert main(["train", "ppo", "--env", ENV, "--total-steps", "256", "--run-dir", str(run), "--quiet",
                 "--no-tensorboard", *[arg for s in sets for arg in ("--set", s)]]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["updates"] > 0 and summary["last_eval_return"] is not None
    policy = relayrl.load(run)
    continuous, discrete = policy.predict(np.zeros(3, np.float32))
    assert continuous.shape == (2,) and continuous.dtype == np.float32 and discrete.shape == (1,)
    assert discrete.dtype == np.int64 and 0 <= discrete[0] < 3
    capsys.readouterr()
    assert main(["export", str(run), "--format", "torchscript"]) == 0
    sidecar = json.loads((run / "policy.pt.json").read_text())
    assert [o["name"] for o in sidecar["outputs"]] == ["continuous_action", "discrete_action"]
