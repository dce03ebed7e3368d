"""Time to solve CartPole-v1: relayrl's default PPO against Stable-Baselines3 PPO (RL Zoo hyperparameters).

Both evaluate 10 deterministic episodes every 5,000 env steps and stop at a mean return of 475.
The time counted is wall time from the start of training (envs and model built, imports done) to
the end of the first evaluation that reached 475. Each run is a fresh process; runs alternate
between the two libraries seed by seed so both see the same machine conditions.

    pip install -c constraints.txt -e '.[bench]'
    python benchmarks/ppo_cartpole.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

STOP = 475.0
EVAL_EVERY = 5_000
EVAL_EPISODES = 10
SB3_BUDGET = 100_000  # RL Zoo's n_timesteps for CartPole-v1 (sets the linear schedules)


def run_relayrl(seed: int, budget: int) -> dict:
    import tempfile

    from relayrl.config import build_config
    from relayrl.train.loop import train

    config = build_config("ppo", None, [f"eval.freq={EVAL_EVERY}", f"eval.episodes={EVAL_EPISODES}"],
                          {"env.id": "CartPole-v1", "seed": seed, "total_steps": budget, "stop_value": STOP})
    with tempfile.TemporaryDirectory() as tmp:
        summary = train(config, run_dir=tmp, tensorboard=False)
    return {"time_s": summary["time_to_stop_value_s"], "steps": summary["env_steps_to_stop_value"],
            "updates": summary["updates"]}


def run_sb3(seed: int, budget: int, threads: int | None) -> dict:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
    from stable_baselines3.common.env_util import make_vec_env

    if threads:
        torch.set_num_threads(threads)

    def linear(start: float):
        return lambda progress_remaining: progress_remaining * start

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=seed + 10_000)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed, device="cpu")
    solved: dict = {}

    class MarkSolved(StopTrainingOnRewardThreshold):
        def _on_step(self) -> bool:
            keep_going = super()._on_step()
            if not keep_going and not solved:
                solved.update(time=time.perf_counter(), steps=self.num_timesteps)
            return keep_going

    callback = EvalCallback(eval_env, callback_on_new_best=MarkSolved(reward_threshold=STOP),
                            eval_freq=EVAL_EVERY // 8, n_eval_episodes=EVAL_EPISODES, deterministic=True)
    start = time.perf_counter()
    model.learn(total_timesteps=budget, callback=callback)
    return {"time_s": solved["time"] - start if solved else None, "steps": solved.get("steps"),
            "updates": model._n_updates}


def child(args: argparse.Namespace) -> None:
    if args.child == "relayrl":
        out = run_relayrl(args.seed, args.budget)
    else:
        out = run_sb3(args.seed, SB3_BUDGET, args.sb3_threads)
    print("RESULT " + json.dumps(out))


def launch(which: str, seed: int, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", which, "--seed", str(seed), "--budget", str(args.budget)]
    if args.sb3_threads:
        cmd += ["--sb3-threads", str(args.sb3_threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise SystemExit(f"{which} seed {seed} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=150_000, help="relayrl's env step budget")
    parser.add_argument("--sb3-threads", type=int, default=None,
                        help="torch threads for SB3 (default: torch's own choice, as SB3 users run it)")
    parser.add_argument("--child", choices=["relayrl", "sb3"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    results: dict[str, list[dict]] = {"relayrl": [], "sb3": []}
    print(f"{'seed':>4} {'library':>8} {'time to 475 (s)':>16} {'env steps':>10} {'updates':>8}")
    for seed in args.seeds:
        for which in ("relayrl", "sb3"):
            r = launch(which, seed, args)
            results[which].append(r)
            t = "not solved" if r["time_s"] is None else f"{r['time_s']:.2f}"
            print(f"{seed:>4} {which:>8} {t:>16} {str(r['steps']):>10} {r['updates']:>8}", flush=True)

    def median(which: str, key: str) -> float:
        values = [r[key] if r[key] is not None else float("inf") for r in results[which]]
        return statistics.median(values)

    ours, sb3 = median("relayrl", "time_s"), median("sb3", "time_s")
    print(f"\nmedian time to {STOP:.0f}: relayrl {ours:.2f} s, SB3 {sb3:.2f} s, ratio relayrl/SB3 {ours / sb3:.3f}")
    print(f"median env steps to {STOP:.0f}: relayrl {median('relayrl', 'steps'):.0f}, SB3 {median('sb3', 'steps'):.0f}")


if __name__ == "__main__":
    main()
