"""Recurrent PPO learns a memory task that feed-forward PPO cannot: CartPole-v1 without its velocities."""

from relayrl.config import build_config
from relayrl.training.trainer import train

MEMORY = ["env.id=relayrl/CartPoleNoVel-v1", "env.manager=sync", "eval.freq=5000", "eval.episodes=10"]


def test_recurrent_ppo_reaches_400_where_feed_forward_stays_below_100(tmp_path):
    # seed 0 reaches 400 at 15,360 steps (~10 s); benchmarks/recurrent_memory.py has more seeds
    budget = {"seed": 0, "total_steps": 50_000, "stop_value": 400}
    gru = train(build_config("ppo", None, [*MEMORY, "ppo.recurrent=gru", "ppo.hidden_sizes=[64]"], budget),
                run_dir=tmp_path / "gru", tensorboard=False)
    assert gru["solved"] and gru["env_steps_to_stop_value"] <= 30_000, gru
    # feed-forward PPO with the steps the recurrent policy needed (it stays near 50 even with 100k)
    mlp = train(build_config("ppo", None, MEMORY, {**budget, "total_steps": gru["env_steps"]}),
                run_dir=tmp_path / "mlp", tensorboard=False)
    assert not mlp["solved"] and mlp["best_eval_return"] < 100, mlp
