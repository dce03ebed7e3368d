"""PPO with observation normalisation on two mp rollout workers (roadrunner's update_norm with workers):
workers normalise with the statistics published with the weights, report the moments of what they saw,
and the learner merges them, so its statistics count every observation any worker acted on."""

from relayrl import launch
from relayrl.config import build_config
from relayrl.io.checkpoint import load_checkpoint


def test_ppo_with_obs_norm_learns_on_two_mp_workers(tmp_path):
    sets = ["ppo.obs_norm=true", "workers=2", "backend=mp", "env.num_envs=4", "ppo.num_steps=64",
            "ppo.batch_size=256", "eval.freq=4096", "eval.episodes=5"]
    config = build_config("ppo", None, sets, {"total_steps": 60_000, "seed": 0, "stop_value": 300})
    summary = launch.run(config, run_dir=tmp_path / "run", tensorboard=False)
    assert summary["backend"] == "mp" and summary["best_eval_return"] >= 300, summary
    last = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.safetensors")
    stats = last.state["algo"]["obs_rms"]
    # every observation a worker acted on, and no other: 2 workers x 4 envs x 64 steps per rollout
    assert float(stats["count"]) == summary["env_steps"]
    assert (stats["var"] > 0).all() and (abs(stats["mean"]) < 5).all()  # real statistics, not the initial ones
