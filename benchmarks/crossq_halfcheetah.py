"""Return at 100k env steps on HalfCheetah-v5, and the wall time it took: relayrl's CrossQ at its defaults
(64x64 actor and critics) against Stable-Baselines3 SAC at its defaults (256x256; SB3 has no CrossQ), seeds
alternating, each library at its default torch threads. Both times count building the model, learning and the
final evaluation (10 deterministic episodes on a separate env).

    python benchmarks/crossq_halfcheetah.py                                # seeds 0 and 1
    python benchmarks/crossq_halfcheetah.py --only relayrl --seeds 0 --budget 3000   # a quick check
    python benchmarks/crossq_halfcheetah.py --set "crossq.hidden_sizes=[256, 256]" \
        --set "crossq.critic_hidden_sizes=[256, 256]"                     # SB3's widths (2048: the paper's critics)
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import Comparison, sb3_envs

ENV, EVAL_EPISODES = "HalfCheetah-v5", 10


def run_ours(seed: int, args: argparse.Namespace) -> dict:
    import tempfile

    from relayrl.config import build_config
    from relayrl.training.trainer import run_trainer

    config = build_config("crossq", None, ["eval.freq=0", f"eval.episodes={EVAL_EPISODES}", "eval.num_envs=10",
                                           *args.sets],
                          {"env.id": ENV, "seed": seed, "total_steps": args.budget})
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        summary = run_trainer(config, run_dir=tmp, tensorboard=False)
    return {"return": summary["last_eval_return"], "time_s": time.perf_counter() - start,
            "steps": summary["env_steps"], "updates": summary["updates"]}


def run_sb3(seed: int, args: argparse.Namespace) -> dict:
    from stable_baselines3 import SAC
    from stable_baselines3.common.evaluation import evaluate_policy

    start = time.perf_counter()
    env, eval_env = sb3_envs(ENV, seed)
    model = SAC("MlpPolicy", env, seed=seed, device="cpu")
    model.learn(total_timesteps=args.budget)
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
    return {"return": float(mean), "time_s": time.perf_counter() - start, "steps": args.budget,
            "updates": model._n_updates}


class ReturnAtBudget:
    """Each run's final eval return and wall time; then each side's medians."""

    def header(self) -> str:
        return f"{'seed':>4} {'library':>8} {'return':>10} {'wall time (s)':>14} {'env steps':>10} {'updates':>8}"

    def row(self, seed: int, which: str, r: dict) -> str:
        return f"{seed:>4} {which:>8} {r['return']:>10.1f} {r['time_s']:>14.1f} {r['steps']:>10} {r['updates']:>8}"

    def summary(self, results: dict[str, list[dict]], args: argparse.Namespace) -> None:
        for which, rs in results.items():
            print(f"{which}: median return {statistics.median(r['return'] for r in rs):.1f}, "
                  f"median wall time {statistics.median(r['time_s'] for r in rs):.1f} s at {args.budget} env steps")


if __name__ == "__main__":
    Comparison(__file__, __doc__, {"relayrl": run_ours, "sb3": run_sb3}, ReturnAtBudget(), seeds=[0, 1],
               budget=100_000, sets_help="extra relayrl options", only=True).main()
