"""Atari on a GPU machine (issue 29): relayrl's PPO against SB3's and against the env-only ceilings, one run.

    python benchmarks/gpu.py [--envs 16] [--ceiling-envs 16 64] [--seconds 20] [--steps 65536] [--device auto]

Rows, each in a fresh process, in this order (a row whose package is missing is skipped, and said):

- *env only, relayrl subproc*: relayrl's subproc manager (one worker process per core, at most the envs) stepping
  ``ALE/Pong-v5`` with relayrl's Atari preprocessing (frame skip 4 max-pooled, 84x84 grayscale, 30 no-op starts,
  a 4-frame stack, sticky actions 0.25 as v5 has them) and random actions, for ``--seconds``;
- *env only, relayrl native (ALE)*: relayrl's native manager (``make_vec(ENV_ID, n, manager="native")``: ALE's
  vector env behind relayrl's same-step autoreset, envs/ale_vector.py), random actions, for ``--seconds``;
- *env only, ALE vector env*: ale-py's own C++ ``AtariVectorEnv`` (>= 0.11) with the same preprocessing, random
  actions, for ``--seconds``: the fastest stepping measured here, the ceiling;
- *relayrl PPO* and *SB3 PPO*: ``--steps`` env steps of PPO on ALE/Pong-v5 with ``--envs`` envs (relayrl's
  ``env.manager: auto``, which picks the native manager for ALE ids; SB3's in worker processes), CleanRL's Atari
  settings (128 steps per env, 4 epochs, minibatches of 256, lr 2.5e-4, clip 0.1,
  entropy 0.01, the Nature CNN shared by actor and critic), the learner on ``--device``, no evaluation; the rate
  is env steps over the wall time of training alone.

The relayrl PPO rows are ``--variants`` of those settings (``VARIANTS``): ``plain`` as they are, at ``--envs``;
``overlap`` (learning overlapped with collection), ``groups`` (and two double-buffered env groups), ``fast`` (overlap, two double-buffered env groups, the update
compiled: CUDA graphs on CUDA), ``compiled`` (fast without the groups), ``fast_bf16`` (and bf16 autocast) and
``fast_5ms`` (fast at Python's own 5 ms GIL switch interval, not the overlap's 0.5 ms) at ``--fast-envs``. Their JSON lines add the
steady rate (from the end of the third iteration on: past the first compile) and the collect and learn seconds.

Prints one JSON line per row and a markdown table: env steps/s, and for the PPO rows the ratio to SB3's and to
the ceiling. On a 16-core GPU machine the defaults take about 4 minutes; on this 2-core machine use
``--envs 8 --ceiling-envs 8 --seconds 10 --steps 8192``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import launch  # noqa: E402

ENV_ID = "ALE/Pong-v5"
PPO_SETS = {"ppo.num_steps": 128, "ppo.epochs": 4, "ppo.batch_size": 256, "ppo.actor_lr": 2.5e-4,
            "ppo.critic_lr": 2.5e-4, "ppo.clip": 0.1, "ppo.entropy_coef": 0.01, "ppo.normalize_reward": False,
            "eval.freq": 0, "eval.episodes": 1, "eval.num_envs": 1}


def random_steps(step, n: int, n_actions: int, seconds: float) -> dict:
    """Step ``step(actions)`` with random actions for ``seconds`` (after one warm-up step); the env steps taken."""
    import numpy as np

    rng = np.random.default_rng(0)
    step(rng.integers(0, n_actions, n))  # (workers and threads warm)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step(rng.integers(0, n_actions, n))
        steps += n
    return {"steps": steps, "seconds": time.perf_counter() - start}


def env_subproc(args: argparse.Namespace) -> dict:
    from relayrl.envs import make_vec

    with make_vec(ENV_ID, args.n, manager="subproc", workers=min(args.n, os.cpu_count() or 1), seed=0) as venv:
        return random_steps(venv.step, args.n, venv.single_action_space.n, args.seconds)


def env_native(args: argparse.Namespace) -> dict:
    from relayrl.envs import make_vec

    with make_vec(ENV_ID, args.n, manager="native", seed=0) as venv:
        return random_steps(venv.step, args.n, venv.single_action_space.n, args.seconds)


def env_ale(args: argparse.Namespace) -> dict:
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv("pong", args.n, repeat_action_probability=0.25, frameskip=4, img_height=84, img_width=84,
                         grayscale=True, stack_num=4, noop_max=30, use_fire_reset=False, reward_clipping=False)
    try:
        env.reset(seed=0)
        return random_steps(env.step, args.n, env.single_action_space.n, args.seconds)
    finally:
        env.close()


# relayrl PPO rows: the same CleanRL settings, with issue 29's options on top ("plain" runs at --envs, the others at
# --fast-envs); compile "auto" is CUDA graphs on CUDA and off on the CPU
VARIANTS = {
    "plain": ("relayrl PPO", {}),
    "overlap": ("relayrl PPO, overlap", {"overlap": True}),
    "groups": ("relayrl PPO, overlap + 2 env groups", {"overlap": True, "env.groups": 2}),
    "compiled": ("relayrl PPO, overlap + compile auto", {"overlap": True, "ppo.compile": "auto"}),
    "fast": ("relayrl PPO, overlap + 2 env groups + compile auto",
             {"overlap": True, "env.groups": 2, "ppo.compile": "auto"}),
    "fast_bf16": ("relayrl PPO, overlap + 2 env groups + compile auto + bf16",
                  {"overlap": True, "env.groups": 2, "ppo.compile": "auto", "ppo.amp": "bf16"}),
}
# the same as "fast" with Python's own GIL switch interval (5 ms) instead of the overlap's 0.5 ms (training/overlap.py)
SWITCH_5MS = {"fast_5ms": ("relayrl PPO, fast at Python's 5 ms GIL switch interval", VARIANTS["fast"][1])}
VARIANTS.update(SWITCH_5MS)


def ppo_relayrl(args: argparse.Namespace) -> dict:
    from relayrl.config import build_config
    from relayrl.training.trainer import run_trainer

    from relayrl.training.overlap import OverlappedCollector

    if args.variant in SWITCH_5MS:
        OverlappedCollector.SWITCH_INTERVAL_S = None
    sets = {**PPO_SETS, "env.num_envs": args.n, "env.manager": "auto", "device": args.device,
            **VARIANTS[args.variant][1]}
    config = build_config("ppo", None, [f"{k}={json.dumps(v)}" for k, v in sets.items()],
                          {"env.id": ENV_ID, "seed": 0, "total_steps": args.steps})
    with tempfile.TemporaryDirectory() as tmp:
        run_trainer(config, run_dir=tmp, tensorboard=False, quiet=True)
        events = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    train = [e for e in events if e["event"] == "train"]
    last = train[-1]
    # the steady rate: from the end of the third iteration on (the first compile, the first overlap round behind)
    first = train[min(2, len(train) - 2)] if len(train) > 1 else {"env_steps": 0, "wall_time_s": 0.0}
    steady = (last["env_steps"] - first["env_steps"]) / max(last["wall_time_s"] - first["wall_time_s"], 1e-9)
    return {"steps": last["env_steps"], "seconds": last["wall_time_s"], "steady": steady,
            "collect_s": last.get("time/collect_s"), "learn_s": last.get("time/learn_s")}


def ppo_sb3(args: argparse.Namespace) -> dict:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv

    from relayrl.envs.registry import make

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    env = make_vec_env(lambda: make(ENV_ID), n_envs=args.n, seed=0, vec_env_cls=SubprocVecEnv)
    model = PPO("CnnPolicy", env, n_steps=128, batch_size=256, n_epochs=4, learning_rate=2.5e-4, clip_range=0.1,
                ent_coef=0.01, seed=0, device=device)
    start = time.perf_counter()
    model.learn(total_timesteps=args.steps)
    seconds = time.perf_counter() - start
    env.close()
    return {"steps": model.num_timesteps, "seconds": seconds}


ROWS = {"env_subproc": (env_subproc, "env only, relayrl subproc", None),
        "env_native": (env_native, "env only, relayrl native (ALE)", "ale_py.vector_env"),
        "env_ale": (env_ale, "env only, ALE vector env", "ale_py.vector_env"),
        "ppo_relayrl": (ppo_relayrl, "relayrl PPO", None),
        "ppo_sb3": (ppo_sb3, "SB3 PPO", "stable_baselines3")}


def _available(module: str | None) -> bool:
    if module is None:
        return True
    import importlib.util
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=16, help="envs of the PPO runs")
    parser.add_argument("--ceiling-envs", type=int, nargs="+", default=[16, 64], help="envs of the env-only rows")
    parser.add_argument("--seconds", type=float, default=20.0, help="each env-only row's stepping time")
    parser.add_argument("--steps", type=int, default=65_536, help="env steps of each PPO run")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=["plain", "fast"],
                        help="relayrl PPO rows (plain: CleanRL's settings at --envs; the others at --fast-envs)")
    parser.add_argument("--fast-envs", type=int, default=64, help="envs of the relayrl PPO rows other than plain")
    parser.add_argument("--child", choices=sorted(ROWS), help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="plain", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(ROWS[args.child][0](args)), flush=True)
        return
    common = ["--seconds", str(args.seconds), "--steps", str(args.steps), "--device", args.device]
    plan = [(row, n, None) for row in ("env_subproc", "env_native", "env_ale") for n in args.ceiling_envs]
    plan += [("ppo_relayrl", args.envs if v == "plain" else args.fast_envs, v) for v in args.variants]
    plan += [("ppo_sb3", args.envs, None)]
    results = []
    for row, n, variant in plan:
        fn, label, module = ROWS[row]
        if not _available(module):
            print(f"skipped: {label} ({module} is not installed)", flush=True)
            continue
        extra = [] if variant is None else ["--variant", variant]
        try:
            r = launch(__file__, row, 0, "--n", str(n), *common, *extra)
        except SystemExit as failed:  # (one row's failure, said, does not cost the others)
            print(f"failed: {VARIANTS[variant][0] if variant else label}: {failed}", flush=True)
            continue
        result = {"row": row, "label": VARIANTS[variant][0] if variant else label, "envs": n, "steps": r["steps"],
                  "seconds": round(r["seconds"], 2), "env_steps_per_s": round(r["steps"] / r["seconds"], 1)}
        if "steady" in r:
            result.update(steady_env_steps_per_s=round(r["steady"], 1), collect_s=r["collect_s"],
                          learn_s=r["learn_s"])
        results.append(result)
        print(json.dumps(result), flush=True)
    ceiling = max((r["env_steps_per_s"] for r in results if r["row"].startswith("env_")), default=None)
    sb3 = next((r["env_steps_per_s"] for r in results if r["row"] == "ppo_sb3"), None)
    print(f"\n{os.cpu_count()} cores, device {args.device}\n")
    print("| run | envs | env steps/s | steady (after 3 iterations) | / SB3 PPO | / ceiling |\n"
          "|---|---:|---:|---:|---:|---:|")
    for r in results:
        rate = r["env_steps_per_s"]
        steady = f"{r['steady_env_steps_per_s']:,.0f}" if "steady_env_steps_per_s" in r else ""
        vs_sb3 = f"{rate / sb3:.2f}" if sb3 and r["row"].startswith("ppo_") else ""
        vs_ceiling = f"{rate / ceiling:.2f}" if ceiling else ""
        print(f"| {r['label']} | {r['envs']} | {rate:,.0f} | {steady} | {vs_sb3} | {vs_ceiling} |")


if __name__ == "__main__":
    main()
