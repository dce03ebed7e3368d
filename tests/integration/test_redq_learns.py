"""REDQ learns its reference task, Pendulum-v1, in fewer env steps than SAC (benchmarks/redq_pendulum.py)."""

import pytest

from relayrl.config import build_config
from relayrl.training.trainer import run_trainer


def test_redq_swings_pendulum_up_within_1500_steps(tmp_path):
    """Measured at the end of 1,500 env steps (5 episodes): -123, -146, -371 on seeds 0-2 (SAC is near random
    there, about -1,200): the threshold leaves room for a slower seed."""
    config = build_config("redq", None, ["redq.start_training=500", "eval.freq=0", "eval.episodes=5",
                                         "eval.num_envs=5"], {"seed": 1, "total_steps": 1500})
    summary = run_trainer(config, run_dir=tmp_path / "run", tensorboard=False)
    assert summary["updates"] == 5 * (summary["env_steps"] - 500) and summary["last_eval_return"] > -600, summary


@pytest.mark.solve
def test_default_redq_reaches_minus_200_on_pendulum_in_half_of_sacs_steps(tmp_path):
    """SAC's default reaches -200 at 4,000 env steps on seed 0 (eval every 1,000); REDQ at 2,000."""
    config = build_config("redq", None, ["eval.freq=1000", "eval.episodes=5"],
                          {"seed": 0, "total_steps": 20_000, "stop_value": -200})
    summary = run_trainer(config, run_dir=tmp_path / "run", tensorboard=False)
    assert summary["solved"] and summary["env_steps_to_stop_value"] <= 2000, summary
