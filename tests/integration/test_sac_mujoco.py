"""SAC learns a MuJoCo task (float64 observations) with its default settings (issue 13, item 0)."""

import pytest

from relayrl import launch
from relayrl.config import build_config
from relayrl.io.metrics import read_metrics


@pytest.mark.solve
def test_default_sac_balances_the_inverted_pendulum(tmp_path):
    pytest.importorskip("mujoco")
    # measured with seeds 0-2: 1000 (the maximum) at 7k-10k env steps, 80-100 s on 2 busy cores
    config = build_config("sac", None, ["eval.freq=1000", "eval.episodes=5", "eval.num_envs=1"],
                          {"env.id": "InvertedPendulum-v5", "seed": 0, "total_steps": 15_000, "stop_value": 500})
    summary = launch.run(config, run_dir=tmp_path / "run", quiet=True, tensorboard=False)
    evals = [e["eval/return_mean"] for e in read_metrics(tmp_path / "run") if e["event"] == "eval"]
    assert evals[0] < 100, evals  # a policy that has not learned drops the pole within a few dozen steps
    assert summary["solved"] and summary["best_eval_return"] >= 500, (summary, evals)
