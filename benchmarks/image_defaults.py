"""Each discrete-action algorithm's CartPole-tuned defaults against the settings published image benchmarks use,
on pictures: MinAtar (and an ALE game), same env steps, eval return along the way.

For each algorithm two configs run per seed, each in a fresh process and alternating: ``defaults`` (nothing set
but the env, the budget and the evaluation cadence: what a user who names an image env gets) and ``published``
(the settings below, from the sources named). The table gives the final and the mean evaluation return (the
mean over the run's evaluations: how soon it learns) and the env steps per second.

    python benchmarks/image_defaults.py --algos ppo a2c pqn dqn appo --env MinAtar/Breakout-v1 --seeds 0 1 --threads 1
    python benchmarks/image_defaults.py --algos ppo --env ALE/Breakout-v5 --steps 100000 --seeds 0 --train-returns
    python benchmarks/image_defaults.py --algos ppo --configs defaults   # what relayrl picks now, alone

Only algorithms with Discrete actions are measured: MinAtar and ALE games have no Box actions (SAC, TD3, CrossQ
and REDQ refuse them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from common import launch

PUBLISHED = {
    # CleanRL ppo_atari.py (Huang et al. 2022, "The 37 implementation details of PPO"): 8 envs x 128 steps,
    # 4 epochs of 4 minibatches, Adam 2.5e-4 annealed, clip 0.1, entropy 0.01, no reward normalisation
    "ppo": {"ppo.num_steps": 128, "ppo.epochs": 4, "ppo.batch_size": 256, "ppo.actor_lr": 2.5e-4,
            "ppo.critic_lr": 2.5e-4, "ppo.anneal_lr": True, "ppo.clip": 0.1, "ppo.entropy_coef": 0.01,
            "ppo.normalize_reward": False},
    # APPO: PPO's objective on lagging workers; CleanRL's PPO Atari values, APPO's own 2 epochs
    "appo": {"appo.num_steps": 128, "appo.batch_size": 256, "appo.actor_lr": 2.5e-4, "appo.critic_lr": 2.5e-4,
             "appo.anneal_lr": True, "appo.clip": 0.1, "appo.entropy_coef": 0.01, "appo.normalize_reward": False},
    # SB3 RL Zoo a2c.yml, atari: 16 envs, entropy 0.01, value coefficient 0.25 (RMSprop 7e-4, 5 steps: the defaults)
    "a2c": {"env.num_envs": 16, "a2c.entropy_coef": 0.01, "a2c.vf_coef": 0.25},
    # CleanRL dqn_atari.py / MinAtar's DQN, scaled to a short run as benchmarks/minatar_bench.py does: one env,
    # batch 32, an update every 4 steps, Adam 1e-4, target copy every 1,000 steps, epsilon to 0.05 over 50k
    "dqn": {"env.num_envs": 1, "dqn.buffer_size": 100_000, "dqn.batch_size": 32, "dqn.start_training": 5_000,
            "dqn.updates_per_step": 0.25, "dqn.steps_per_iteration": 4, "dqn.lr": 1e-4, "dqn.gamma": 0.99,
            "dqn.target_update_period": 250, "dqn.double": False, "dqn.epsilon_end": 0.05,
            "dqn.epsilon_decay_steps": 50_000},
    # purejaxql pqn_minatar.yaml, its 128 envs and 32 minibatches scaled to 32 and 8 (benchmarks/pqn_minatar.py)
    "pqn": {"env.num_envs": 32, "pqn.num_steps": 32, "pqn.epochs": 2, "pqn.minibatches": 8, "pqn.lr": 5e-4,
            "pqn.anneal_lr": True, "pqn.lam": 0.65, "pqn.epsilon_end": 0.05, "pqn.hidden_sizes": [128]},
}


def run_child(algo: str, config_name: str, env_id: str, seed: int, steps: int, eval_every: int, episodes: int,
              threads: int | None, train_returns: bool) -> dict:
    from relayrl.config import build_config
    from relayrl.training.trainer import run_trainer

    sets = {"eval.freq": 0 if train_returns else eval_every, "eval.episodes": episodes, "eval.num_envs": 1,
            "threads": threads}
    if config_name == "published":
        sets.update(PUBLISHED[algo])
        if algo == "pqn":
            sets["pqn.epsilon_decay_steps"] = max(1, steps // 10)
    config = build_config(algo, None, [f"{k}={json.dumps(v)}" for k, v in sets.items()],
                          {"env.id": env_id, "seed": seed, "total_steps": steps})
    with tempfile.TemporaryDirectory() as tmp:
        summary = run_trainer(config, run_dir=tmp, tensorboard=False, quiet=True)
        events = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
        chosen = (Path(tmp) / "config.yaml").read_text()
    if not train_returns:
        returns = [e["eval/return_mean"] for e in events if e["event"] == "eval"]
    else:  # the training episodes' mean return in each window of eval_every env steps
        windows: dict[int, list[float]] = {}
        for e in events:
            if e["event"] == "train" and "train/return_mean" in e:
                windows.setdefault(min(e["env_steps"] - 1, steps - 1) // eval_every, []).append(e["train/return_mean"])
        returns = [statistics.mean(windows[k]) for k in sorted(windows)]
    return {"returns": returns, "steps_per_s": summary["env_steps"] / max(summary["wall_time_s"], 1e-9),
            "config": chosen}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=["ppo", "a2c", "pqn", "dqn", "appo"])
    parser.add_argument("--env", default="MinAtar/Breakout-v1")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per run (DQN: --dqn-steps)")
    parser.add_argument("--dqn-steps", type=int, default=100_000)
    parser.add_argument("--eval-every", type=int, default=25_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--configs", nargs="+", default=["defaults", "published"])
    parser.add_argument("--threads", type=int, default=None,
                        help="the learner's torch threads (default: relayrl's choice; 1 on a loaded machine, where a "
                             "second thread waits on the first, changes the speed only)")
    parser.add_argument("--train-returns", action="store_true",
                        help="score each window of --eval-every steps by its training episodes' mean return, no "
                             "evaluation (ALE: a deterministic policy that never serves plays until the time limit)")
    parser.add_argument("--json", default=None, help="append every run's result to this file (JSON lines)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        algo, config_name = args.child.split(":")
        steps = args.dqn_steps if algo == "dqn" else args.steps
        print("RESULT " + json.dumps(run_child(algo, config_name, args.env, args.seed, steps, args.eval_every,
                                                args.eval_episodes, args.threads, args.train_returns)))
        return
    scored = "training episodes' mean return per window of" if args.train_returns else "eval every"
    print(f"{args.env}: {scored} {args.eval_every} env steps" +
          ("" if args.train_returns else f", {args.eval_episodes} episodes"))
    print(f"{'algo':>5} {'config':>10} {'seed':>4} {'final':>7} {'mean':>7} {'steps/s':>8}  returns")
    table: dict[tuple[str, str], list[dict]] = {}
    for algo in args.algos:
        for seed in args.seeds:
            for config_name in args.configs:
                extra = ["--env", args.env, "--steps", str(args.steps), "--dqn-steps", str(args.dqn_steps),
                         "--eval-every", str(args.eval_every), "--eval-episodes", str(args.eval_episodes),
                         *(["--threads", str(args.threads)] if args.threads is not None else []),
                         *(["--train-returns"] if args.train_returns else [])]
                r = launch(__file__, f"{algo}:{config_name}", seed, *extra)
                table.setdefault((algo, config_name), []).append(r)
                rets = r["returns"]
                print(f"{algo:>5} {config_name:>10} {seed:>4} {rets[-1]:>7.2f} {statistics.mean(rets):>7.2f} "
                      f"{r['steps_per_s']:>8.0f}  {' '.join(f'{x:.1f}' for x in rets)}", flush=True)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps({"algo": algo, "config": config_name, "seed": seed, "env": args.env,
                                            **r}) + "\n")
    print("\nmedians over seeds (final / mean over the run):")
    for (algo, config_name), rs in table.items():
        print(f"{algo:>5} {config_name:>10}: {statistics.median(r['returns'][-1] for r in rs):.2f} / "
              f"{statistics.median(statistics.mean(r['returns']) for r in rs):.2f}")


if __name__ == "__main__":
    main()
