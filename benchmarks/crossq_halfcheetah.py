"""Return at 100k env steps on HalfCheetah-v5, and the wall time it took: relayrl's CrossQ (its defaults with
256x256 networks, as SB3's) against Stable-Baselines3 SAC (its defaults; SB3 has no CrossQ), seeds
alternating. Both times count building the model, learning and the final evaluation (10 deterministic
episodes on a separate env).

    python benchmarks/crossq_halfcheetah.py                                # seeds 0 and 1
    python benchmarks/crossq_halfcheetah.py --only relayrl --seeds 0 --budget 3000   # a quick check
    python benchmarks/crossq_halfcheetah.py --set "crossq.critic_hidden_sizes=[2048, 2048]"  # the paper's width
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from common import launch

ENV, EVAL_EPISODES = "HalfCheetah-v5", 10
MUJOCO = ("crossq.hidden_sizes=[256, 256]", "crossq.critic_hidden_sizes=[256, 256]")  # (the defaults are Pendulum's)


def run_ours(seed: int, budget: int, sets: tuple[str, ...]) -> dict:
    import tempfile

    from relayrl.config import build_config
    from relayrl.training.trainer import run_trainer

    config = build_config("crossq", None, ["eval.freq=0", f"eval.episodes={EVAL_EPISODES}", "eval.num_envs=10",
                                           *MUJOCO, *sets],
                          {"env.id": ENV, "seed": seed, "total_steps": budget})
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        summary = run_trainer(config, run_dir=tmp, tensorboard=False)
    return {"return": summary["last_eval_return"], "time_s": time.perf_counter() - start,
            "steps": summary["env_steps"], "updates": summary["updates"]}


def run_sb3(seed: int, budget: int) -> dict:
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    start = time.perf_counter()
    env = make_vec_env(ENV, n_envs=1, seed=seed)
    eval_env = make_vec_env(ENV, n_envs=1, seed=seed + 10_000)
    model = SAC("MlpPolicy", env, seed=seed, device="cpu")
    model.learn(total_timesteps=budget)
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
    return {"return": float(mean), "time_s": time.perf_counter() - start, "steps": budget,
            "updates": model._n_updates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--budget", type=int, default=100_000)
    parser.add_argument("--set", dest="sets", action="append", default=[], help="extra relayrl options")
    parser.add_argument("--only", choices=["relayrl", "sb3"], help="run one side only")
    parser.add_argument("--child", choices=["relayrl", "sb3"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        out = run_ours(args.seed, args.budget, tuple(args.sets)) if args.child == "relayrl" else \
            run_sb3(args.seed, args.budget)
        print("RESULT " + json.dumps(out))
        return
    sides = [args.only] if args.only else ["relayrl", "sb3"]
    results: dict[str, list[dict]] = {side: [] for side in sides}
    print(f"{'seed':>4} {'library':>8} {'return':>10} {'wall time (s)':>14} {'env steps':>10} {'updates':>8}")
    for seed in args.seeds:
        for which in sides:
            r = launch(__file__, which, seed, "--budget", str(args.budget), *[f"--set={s}" for s in args.sets])
            results[which].append(r)
            print(f"{seed:>4} {which:>8} {r['return']:>10.1f} {r['time_s']:>14.1f} {r['steps']:>10} "
                  f"{r['updates']:>8}", flush=True)
    for which, rs in results.items():
        print(f"{which}: median return {statistics.median(r['return'] for r in rs):.1f}, "
              f"median wall time {statistics.median(r['time_s'] for r in rs):.1f} s at {args.budget} env steps")


if __name__ == "__main__":
    main()
