"""PPO with observation normalisation on two mp rollout workers (roadrunner's update_norm with workers):
workers normalise with the statistics published with the weights, report the moments of what they saw,
and the learner merges them, so its statistics count every observation any worker acted on."""

import json

from relay_procs import train_with_one_worker  # same folder

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


def test_prenorm_on_two_mp_workers_fills_the_statistics_from_their_first_rollouts_before_learning(tmp_path):
    """Issue 27 (was refused): the workers' first rollouts are the warm-up, their moments merged, not learned
    from; with update_norm=false the statistics then hold exactly them."""
    sets = ["ppo.obs_norm=true", "ppo.prenorm=true", "ppo.prenormalize_steps=10", "ppo.update_norm=false",
            "workers=2", "backend=mp", "env.num_envs=2", "ppo.num_steps=8", "ppo.batch_size=32", "eval.episodes=1"]
    config = build_config("ppo", None, sets, {"total_steps": 96, "seed": 0})
    summary = launch.run(config, run_dir=tmp_path / "run", tensorboard=False)
    stats = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.safetensors").state["algo"]["obs_rms"]
    # 10 vector steps x 2 envs = 20 observations wanted: one round of rollouts, 2 workers x 2 envs x 8 steps
    assert float(stats["count"]) == 32 and (stats["var"] > 0).all()
    assert summary["env_steps"] >= 96 and summary["updates"] > 0
    trains = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
              if '"train"' in line]
    # the warm-up's 32 env steps count (as on local envs) and were not learned from: the first round learned from
    # the next 32, collected with the merged statistics
    assert trains[0]["env_steps"] == 64
    # roadrunner's sampling figures: the workers' own collecting rate summed, the rate seen, the overhead
    last = trains[-1]
    assert last["workers/ideal_steps_per_s"] > 0 and last["workers/steps_per_s"] > 0
    assert last["workers/overhead"] == 1 - last["workers/steps_per_s"] / last["workers/ideal_steps_per_s"]


def test_prenorm_with_a_remote_worker_warms_up_on_its_first_rollouts(tmp_path):
    """The same through a real relay: a remote worker's first rollouts are the trainer's warm-up."""
    sets = ["--set=ppo.obs_norm=true", "--set=ppo.prenorm=true", "--set=ppo.prenormalize_steps=10",
            "--set=ppo.update_norm=false", "--set=env.num_envs=2", "--set=ppo.num_steps=16",
            "--set=net.heartbeat_s=0.2"]
    train_with_one_worker("ppo", "CartPole-v1", tmp_path / "run",
                          ["--total-steps", "128", "--set=eval.episodes=1", *sets], sets)
    stats = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.safetensors").state["algo"]["obs_rms"]
    assert float(stats["count"]) == 32  # one rollout of 2 envs x 16 steps covers the 10 x 2 wanted
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["backend"] == "relay" and summary["env_steps"] >= 128 and summary["updates"] > 0
