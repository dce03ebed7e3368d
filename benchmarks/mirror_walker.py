"""Mirror loss on Walker2d-v5 (issue 8): does ``ppo.mirror=1`` give a more symmetric gait than
``ppo.mirror=0`` at a similar return, on the same budget?

    pip install -c constraints.txt -e '.[mujoco]'
    python benchmarks/mirror_walker.py [--steps 400000] [--seeds 0] [--episodes 10]

Both runs train in parallel processes (one core each), then each policy runs ``--episodes``
deterministic evaluation episodes. Gait asymmetry: for each leg joint (thigh, leg, foot), the
Wasserstein-1 distance between the distribution of the right joint's angle and the left one's over
all evaluation steps, divided by their pooled standard deviation, averaged over the three joints.
A symmetric gait moves both legs through the same angles (half a stride apart), so it scores near
0; a limping gait (one leg stiff, or a different range) scores high. The policy's own mirror error
E||pi(s) - M_a pi(M_o s)||^2 on the visited states is reported too.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np

RIGHT, LEFT = slice(2, 5), slice(5, 8)  # Walker2d-v5 observation: joint angles of each leg


def sets_for(mirror: float, steps: int, seed: int) -> tuple[list[str], dict]:
    sets = ["env.num_envs=8", "env.manager=sync", "ppo.num_steps=256", "ppo.batch_size=256", "ppo.epochs=10", "ppo.actor_lr=3e-4",
            "ppo.critic_lr=3e-4", "ppo.obs_norm=true", "ppo.hidden_sizes=[64,64]", "eval.freq=50000",
            "eval.episodes=5", "eval.num_envs=5", "threads=1", f"ppo.mirror={mirror}"]
    return sets, {"env.id": "Walker2d-v5", "total_steps": steps, "seed": seed}


def train_one(args: tuple) -> dict:
    mirror, steps, seed, run_dir = args
    from relayrl import launch
    from relayrl.config import build_config

    sets, overrides = sets_for(mirror, steps, seed)
    config = build_config("ppo", None, sets, overrides)
    start = time.perf_counter()
    summary = launch.run(config, run_dir=Path(run_dir), tensorboard=False)
    summary["train_s"] = time.perf_counter() - start
    return summary


def w1(a: np.ndarray, b: np.ndarray) -> float:
    """Wasserstein-1 distance between two 1-D samples (quantiles on a common grid)."""
    q = np.linspace(0, 1, 201)
    return float(np.mean(np.abs(np.quantile(a, q) - np.quantile(b, q))))


def gait(run_dir: Path, episodes: int, seed: int) -> dict:
    import gymnasium as gym
    import torch

    from relayrl.algos import get_algo
    from relayrl.config import build_config, read_yaml
    from relayrl.io.checkpoint import load_checkpoint
    from relayrl.policy.mirror import MirrorSpec

    config = build_config("ppo", read_yaml(run_dir / "config.yaml"))
    env = gym.make("Walker2d-v5")
    algo = get_algo("ppo").algo_cls(config.ppo, env.observation_space, env.action_space, 1)
    algo.load_state_dict(load_checkpoint(run_dir / "checkpoints" / "best.safetensors").state["algo"])
    policy = algo.policy
    spec = MirrorSpec.load("auto", "Walker2d-v5", 17, 6)
    returns, angles, errors = [], [], []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + 1000 + k)
        total, done = 0.0, False
        while not done:
            action = policy.act(obs[None].astype(np.float32), "eval").env_action[0]
            mirrored = (obs[spec.obs_index] * spec.obs_sign)[None].astype(np.float32)
            back = policy.act(mirrored, "eval").env_action[0]
            errors.append(float(np.mean((action - back[spec.act_index] * spec.act_sign) ** 2)))
            angles.append(obs.copy())
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    q = np.array(angles)
    right, left = q[:, RIGHT], q[:, LEFT]
    per_joint = [w1(right[:, j], left[:, j]) / (np.sqrt((right[:, j].var() + left[:, j].var()) / 2) + 1e-8)
                 for j in range(3)]
    del torch
    return {"return_mean": float(np.mean(returns)), "return_std": float(np.std(returns)),
            "asymmetry": float(np.mean(per_joint)), "asymmetry_per_joint": [round(x, 3) for x in per_joint],
            "policy_mirror_error": float(np.mean(errors)), "eval_steps": len(q)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("runs/mirror_walker"))
    args = parser.parse_args()
    jobs = [(mirror, args.steps, seed, str(args.out / f"seed{seed}_mirror{mirror:g}"))
            for seed in args.seeds for mirror in (0.0, 1.0)]
    with mp.get_context("spawn").Pool(2) as pool:
        summaries = pool.map(train_one, jobs)
    rows = []
    for (mirror, _, seed, run_dir), summary in zip(jobs, summaries):
        result = gait(Path(run_dir), args.episodes, seed)
        rows.append({"mirror": mirror, "seed": seed, "train_s": round(summary["train_s"], 1),
                     "best_eval_return": summary["best_eval_return"], **result})
        print(json.dumps(rows[-1]), flush=True)
    print(f"\nWalker2d-v5, PPO, {args.steps} env steps per run, {args.episodes} deterministic episodes each")
    print(f"{'mirror':>6} {'seed':>4} {'train s':>8} {'eval return':>16} {'asymmetry':>9} {'mirror err':>10}")
    for r in rows:
        print(f"{r['mirror']:>6g} {r['seed']:>4} {r['train_s']:>8.0f} {r['return_mean']:>9.0f} ± {r['return_std']:<5.0f}"
              f" {r['asymmetry']:>9.3f} {r['policy_mirror_error']:>10.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
