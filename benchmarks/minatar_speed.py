"""MinAtar PPO throughput (issue 29): relayrl's PPO against SB3's, env steps per second of training, same settings.

    python benchmarks/minatar_speed.py [--games Breakout] [--rounds 3] [--steps 16384] [--manager auto]

Both sides train PPO on relayrl's ``MinAtar/<Game>-v1`` (MinAtar's boolean [10, 10, C] planes) on the CPU, with no
evaluation, with benchmarks/minatar_bench.py's settings: 8 envs, 128 steps per env, 4 epochs of minibatches of 256,
Adam 2.5e-4 (no annealing), clip 0.2, entropy 0.01, gamma 0.99, lambda 0.95, gradient norm 0.5, advantages
normalised per minibatch and rewards not normalised; the network is relayrl's ``SmallCNN`` (MinAtar's: 16 3x3
filters, a linear layer to 128) shared by actor and critic, then [64, 64] tanh heads (SB3 gets the same CNN as its
features extractor). relayrl's envs run in the manager ``--manager`` picks (``auto``: relayrl's default) and its
learner with its default torch threads; SB3's in its ``DummyVecEnv`` (``make_vec_env``'s default) with torch's
default threads.

The rate is env steps over the wall time of training alone (relayrl: the run's own ``wall_time_s``, from the
trainer's start, envs and model built; SB3: around ``model.learn``). Each run is a fresh process; the runs
alternate relayrl, SB3, relayrl, SB3, ... (``--rounds`` of each per game), so a change in the machine's load hits
both sides. Prints one JSON line per run (with the machine's 1-minute load average as it started), then a
markdown table: the medians, each side's range, and the ratio relayrl / SB3 of the medians. ``--sb3-threads 1``
gives SB3 relayrl's learner thread count on MinAtar (relayrl's ``threads: null`` is one thread for small images),
``--set threads=2`` gives relayrl SB3's; ``--set KEY=VALUE`` passes any relayrl option.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import launch, sb3_same_cnn  # noqa: E402
from minatar_bench import PPO  # noqa: E402

SIDES = ("relayrl", "sb3")


def run_relayrl(args: argparse.Namespace) -> dict:
    from relayrl.config import build_config
    from relayrl.training.experience import env_setup
    from relayrl.training.trainer import run_trainer

    sets = {**PPO, "env.manager": args.manager, "eval.freq": 0, "eval.episodes": 1, "eval.num_envs": 1,
            "device": "cpu"}
    config = build_config("ppo", None, [*(f"{k}={json.dumps(v)}" for k, v in sets.items()), *args.sets],
                          {"env.id": f"MinAtar/{args.game}-v1", "seed": args.seed, "total_steps": args.steps})
    with tempfile.TemporaryDirectory() as tmp:
        run_trainer(config, run_dir=tmp, tensorboard=False, quiet=True)
        events = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    train = [e for e in events if e["event"] == "train"]
    manager = env_setup(config, True)["manager"]  # (auto's choice, measured again: the run's own is not recorded)
    return {"steps": train[-1]["env_steps"], "seconds": train[-1]["wall_time_s"], "manager": manager,
            "collect_s": round(sum(e.get("time/collect_s", 0.0) for e in train), 2),
            "learn_s": round(sum(e.get("time/learn_s", 0.0) for e in train), 2)}


def run_sb3(args: argparse.Namespace) -> dict:
    import torch
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.env_util import make_vec_env

    from relayrl.envs.registry import make

    SameCNN = sb3_same_cnn()

    if args.sb3_threads:
        torch.set_num_threads(args.sb3_threads)
    env_id = f"MinAtar/{args.game}-v1"
    env = make_vec_env(lambda: make(env_id), n_envs=PPO["env.num_envs"], seed=args.seed)
    model = SB3PPO("MlpPolicy", env, n_steps=PPO["ppo.num_steps"], batch_size=PPO["ppo.batch_size"],
                   n_epochs=PPO["ppo.epochs"], learning_rate=PPO["ppo.actor_lr"], clip_range=PPO["ppo.clip"],
                   ent_coef=PPO["ppo.entropy_coef"], gamma=PPO["ppo.gamma"], gae_lambda=PPO["ppo.gae_lambda"],
                   max_grad_norm=PPO["ppo.grad_clip"], seed=args.seed, device="cpu",
                   policy_kwargs=dict(features_extractor_class=SameCNN, net_arch=dict(pi=[64, 64], vf=[64, 64]),
                                      activation_fn=torch.nn.Tanh))
    start = time.perf_counter()
    model.learn(total_timesteps=args.steps)
    seconds = time.perf_counter() - start
    env.close()
    return {"steps": model.num_timesteps, "seconds": seconds, "manager": "DummyVecEnv",
            "threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", nargs="+", default=["Breakout"], help="MinAtar games (MinAtar/<Game>-v1)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side per game, alternating")
    parser.add_argument("--steps", type=int, default=16_384, help="env steps of each run")
    parser.add_argument("--manager", default="auto", choices=["auto", "sync", "subproc", "async"],
                        help="relayrl's env.manager")
    parser.add_argument("--set", dest="sets", action="append", default=[],
                        help="another relayrl option for its runs, KEY=VALUE (repeatable), e.g. threads=1")
    parser.add_argument("--sb3-threads", type=int, default=0, help="SB3's torch threads (0: torch's default)")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--game", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run = run_relayrl if args.child == "relayrl" else run_sb3
        print("RESULT " + json.dumps(run(args)), flush=True)
        return
    rates: dict[tuple[str, str], list[float]] = {}
    for game in args.games:
        for i in range(args.rounds):
            for side in SIDES:
                load = os.getloadavg()[0]  # (the machine's 1-minute load as the run starts: how shared it was)
                r = launch(__file__, side, i, "--game", game, "--steps", str(args.steps), "--manager", args.manager,
                           "--sb3-threads", str(args.sb3_threads), *(f"--set={kv}" for kv in args.sets))
                rate = r["steps"] / r["seconds"]
                rates.setdefault((game, side), []).append(rate)
                print(json.dumps({"game": game, "side": side, "round": i, **r, "seconds": round(r["seconds"], 2),
                                  "env_steps_per_s": round(rate, 1), "load_before": round(load, 2)}), flush=True)
    print(f"\n{os.cpu_count()} cores, {args.steps} env steps per run, {args.rounds} runs per side, "
          f"relayrl env.manager={args.manager}{''.join(' ' + kv for kv in args.sets)}\n")
    print("| game | relayrl PPO env steps/s (median, range) | SB3 PPO env steps/s (median, range) | relayrl / SB3 |")
    print("|---|---:|---:|---:|")
    for game in args.games:
        ours, peer = rates[(game, "relayrl")], rates[(game, "sb3")]
        mo, mp = statistics.median(ours), statistics.median(peer)
        print(f"| {game} | {mo:,.0f} ({min(ours):,.0f}-{max(ours):,.0f}) | {mp:,.0f} ({min(peer):,.0f}-{max(peer):,.0f})"
              f" | {mo / mp:.2f} |")


if __name__ == "__main__":
    main()
