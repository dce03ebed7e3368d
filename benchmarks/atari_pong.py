"""PPO on ALE/Pong-v5 end to end: env steps per second of relayrl against Stable-Baselines3 on the same
env and settings (learning Pong is not expected in a short run on 2 cores; this times the pipeline).

Both step the same env object, relayrl's ``ALE/Pong-v5`` (Gymnasium's AtariPreprocessing: frame skip
4, 84x84 grayscale, no-op starts; a 4-frame stack: [4, 84, 84] uint8), with the Nature CNN, 8 envs x
128 steps, 4 epochs of minibatches of 256 (CleanRL's Atari settings). The actor and the critic share
one CNN on both sides (each library's default), and each learner runs on its default torch threads
(relayrl: one per core for images; SB3: torch's default). The rate is env steps over the wall time of training alone
(relayrl: its last training event; SB3: ``learn`` without evaluation). Runs alternate in fresh processes.

    python benchmarks/atari_pong.py --steps 20480 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from common import launch

ENV_ID = "ALE/Pong-v5"
SETS = {"env.num_envs": 8, "ppo.num_steps": 128, "ppo.epochs": 4, "ppo.batch_size": 256, "ppo.actor_lr": 2.5e-4,
        "ppo.critic_lr": 2.5e-4, "ppo.clip": 0.1, "ppo.entropy_coef": 0.01, "ppo.normalize_reward": False,
        "eval.freq": 0, "eval.episodes": 1, "eval.num_envs": 1}


def run_relayrl(steps: int, seed: int, manager: str) -> dict:
    from relayrl.config import build_config
    from relayrl.training.trainer import run_trainer

    sets = {**SETS, "env.manager": manager}
    config = build_config("ppo", None, [f"{k}={json.dumps(v)}" for k, v in sets.items()],
                          {"env.id": ENV_ID, "seed": seed, "total_steps": steps})
    with tempfile.TemporaryDirectory() as tmp:
        run_trainer(config, run_dir=tmp, tensorboard=False, quiet=True)
        events = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    last = [e for e in events if e["event"] == "train"][-1]
    return {"steps": last["env_steps"], "seconds": last["wall_time_s"]}


def run_sb3(steps: int, seed: int, manager: str) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    from relayrl.envs.registry import make

    vec = SubprocVecEnv if manager == "subproc" else DummyVecEnv
    env = make_vec_env(lambda: make(ENV_ID), n_envs=8, seed=seed, vec_env_cls=vec)
    model = PPO("CnnPolicy", env, n_steps=128, batch_size=256, n_epochs=4, learning_rate=2.5e-4, clip_range=0.1,
                ent_coef=0.01, seed=seed, device="cpu")
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    return {"steps": model.num_timesteps, "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_480)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--manager", choices=["sync", "subproc"], default="subproc",
                        help="relayrl env.manager; SB3 gets SubprocVecEnv or DummyVecEnv to match")
    parser.add_argument("--child", choices=["relayrl", "sb3"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run = run_relayrl if args.child == "relayrl" else run_sb3
        print("RESULT " + json.dumps(run(args.steps, args.seed, args.manager)))
        return
    rates: dict[str, list[float]] = {"relayrl": [], "sb3": []}
    for repeat in range(args.repeats):
        for which in rates:
            r = launch(__file__, which, repeat, "--steps", str(args.steps), "--manager", args.manager)
            rates[which].append(r["steps"] / r["seconds"])
            print(f"run {repeat} {which:>8}: {r['steps']} env steps in {r['seconds']:.1f} s, "
                  f"{rates[which][-1]:.0f} env steps/s", flush=True)
    ours, peer = statistics.median(rates["relayrl"]), statistics.median(rates["sb3"])
    print(f"\nmedian env steps/s: relayrl {ours:.0f}, sb3 {peer:.0f}, ratio relayrl/sb3 {ours / peer:.2f}")


if __name__ == "__main__":
    main()
