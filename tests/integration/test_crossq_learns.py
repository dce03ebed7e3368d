"""CrossQ learns Pendulum-v1, its reference task: a short run in the default suite, the full solve marked."""

import pytest

from relayrl.config import build_config
from relayrl.io.metrics import read_metrics
from relayrl.training.trainer import run_trainer


def test_crossq_lifts_pendulum_far_above_random_in_3000_steps(tmp_path):
    # measured with seeds 0-2: evals at 1000/2000/3000 steps -1358/-861/-219, -1346/-223/-215, -1151/-380/-187
    # (a policy that has not learned scores about -1200), 22 s each on 2 busy cores
    sets = ["eval.freq=1000", "eval.episodes=5", "eval.num_envs=5"]  # the defaults: 64x64, 500 start transitions
    summary = run_trainer(build_config("crossq", None, sets, {"total_steps": 3000, "seed": 0}),
                          run_dir=tmp_path / "run", tensorboard=False)
    evals = [e["eval/return_mean"] for e in read_metrics(tmp_path / "run") if e["event"] == "eval"]
    assert summary["updates"] == summary["env_steps"] - 500  # one update per env step from the start on
    assert evals[0] < -700 and summary["best_eval_return"] > -400, evals


@pytest.mark.solve
def test_default_crossq_reaches_minus_200_on_pendulum(tmp_path):
    config = build_config("crossq", None, ["eval.freq=1000", "eval.episodes=5"],
                          {"seed": 0, "total_steps": 10_000, "stop_value": -200})
    summary = run_trainer(config, run_dir=tmp_path / "run", tensorboard=False)
    assert summary["solved"], summary
