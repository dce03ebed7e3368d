"""Milliseconds per PPO minibatch update, eager against ``ppo.compile`` modes and ``ppo.amp: bf16``.

One PPO learner (relayrl's, with benchmarks/gpu.py's Atari settings: batch 256, clip 0.1, entropy 0.01)
on the device given, a rollout of ``--steps`` x ``--envs`` random observations moved there as
``learn`` moves it (``device_steps``), then ``--updates`` minibatch updates timed after ``--warmup``
(which pays the compilation): forward, loss, backward, gradient clipping, both Adam steps and the one
read of the loss terms per update, as ``learn`` runs them. Networks:

- ``nature``: Atari, 4x84x84 uint8 frames, Nature CNN, 6 actions (the issue's 4.3 ms per update on an H200);
- ``minatar``: MinAtar/Breakout-v1's 10x10x4 planes (uint8 0/1), the small CNN, 3 actions;
- ``mlp``: CartPole-v1's 4 floats, the 64x64 MLPs, 2 actions.

Each mode runs in its own fresh learner with the same seed; the losses of the first update are printed
beside the time so a mode that computes something else shows. JSON lines, then a markdown table.

    python benchmarks/compiled_update.py [--net nature] [--device auto] [--modes off default ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Callable

import gymnasium as gym
import numpy as np
import torch

NETS = {"nature": (gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), 6),
        "minatar": (gym.spaces.Box(0, 1, (10, 10, 4), np.uint8), 3),
        "mlp": (gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), 2)}
SETS = ["ppo.epochs=1", "ppo.batch_size=256", "ppo.actor_lr=2.5e-4", "ppo.critic_lr=2.5e-4", "ppo.clip=0.1",
        "ppo.entropy_coef=0.01", "ppo.normalize_reward=false"]


def rollout(obs_space: gym.Space, n_actions: int, steps: int, envs: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    shape = (steps, envs)
    if obs_space.dtype == np.uint8:
        obs = rng.integers(0, int(obs_space.high.max()) + 1, (*shape, *obs_space.shape), dtype=np.uint8)
    else:
        obs = rng.standard_normal((*shape, *obs_space.shape)).astype(np.float32)
    return {"obs": obs, "action": rng.integers(0, n_actions, shape), "logp": np.full(shape, -np.log(n_actions),
            np.float32), "value": rng.standard_normal(shape).astype(np.float32),
            "reward": rng.standard_normal(shape).astype(np.float32), "terminated": np.zeros(shape, bool),
            "truncated": np.zeros(shape, bool), "next_value": np.zeros(shape, np.float32)}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prepare(net: str, mode: str, device: torch.device, args: argparse.Namespace) -> tuple[dict, Callable[[], None]]:
    """A learner for ``mode`` with its rollout on the device and its warm-up done: the row so far, and a round of
    ``--updates`` timed updates."""
    from relayrl.algos.ppo import PPO
    from relayrl.config import build_config

    compile_mode, _, amp = mode.partition("+")  # "default+bf16": compile default, amp bf16; "bf16": eager bf16
    if compile_mode == "bf16":
        compile_mode, amp = "off", "bf16"
    obs_space, n_actions = NETS[net]
    torch.manual_seed(0)
    cfg = build_config("ppo", None, [*SETS, f"ppo.compile={compile_mode}", f"ppo.amp={amp or 'off'}"]).ppo
    algo = PPO(cfg, obs_space, gym.spaces.Discrete(n_actions), args.envs)
    algo.to(device)
    data = rollout(obs_space, n_actions, args.steps, args.envs)
    sync(device)
    start = time.perf_counter()
    steps = algo.device_steps(data)
    sync(device)
    transfer_ms = (time.perf_counter() - start) * 1e3
    rng = np.random.default_rng(1)
    steps["advantage"] = algo.tensor(rng.standard_normal((args.steps, args.envs)).astype(np.float32))
    steps["return"] = algo.tensor(rng.standard_normal((args.steps, args.envs)).astype(np.float32))
    batches = list(algo.minibatches(steps, data)())
    clip = algo.loss_step.scalar(cfg.clip)
    start = time.perf_counter()
    first = algo.update(batches[0], clip)
    for i in range(1, args.warmup):
        algo.update(batches[i % len(batches)], clip)
    sync(device)
    row = {"net": net, "mode": mode, "device": str(device), "warmup_s": round(time.perf_counter() - start, 2),
           "rollout_to_device_ms": round(transfer_ms, 2), "first_policy_loss": round(first["loss/policy"], 5),
           "first_value_loss": round(first["loss/value"], 5), "threads": torch.get_num_threads(),
           "torch": torch.__version__}

    def round_() -> None:
        for i in range(args.updates):
            algo.update(batches[i % len(batches)], clip)
        sync(device)
    return row, round_


def measure(net: str, modes: list[str], device: torch.device, args: argparse.Namespace) -> list[dict]:
    """Every mode's ms per update on ``net``: the median over ``--rounds`` rounds, the modes taking turns round by
    round (so a load that comes and goes on the machine falls on all of them)."""
    prepared = [prepare(net, mode, device, args) for mode in modes]
    times: list[list[float]] = [[] for _ in modes]
    for _ in range(args.rounds):
        for (_, round_), spent in zip(prepared, times):
            start = time.perf_counter()
            round_()
            spent.append((time.perf_counter() - start) / args.updates * 1e3)
    return [{**row, "ms_per_update": round(statistics.median(spent), 3)} for (row, _), spent in zip(prepared, times)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--net", choices=sorted(NETS), nargs="+", default=["nature"])
    parser.add_argument("--device", default="auto", help="auto (cuda where there is one), cpu or cuda")
    parser.add_argument("--modes", nargs="+", help="off, default, reduce-overhead, max-autotune, bf16 (eager), "
                        "default+bf16, ... (default: off, default, bf16, default+bf16, and on CUDA reduce-overhead "
                        "and reduce-overhead+bf16)")
    parser.add_argument("--steps", type=int, default=128, help="rollout steps (x --envs; minibatches of 256)")
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--updates", type=int, default=100, help="timed updates per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, the modes taking turns (the median is "
                        "reported)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed updates first (the compilation)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads on the CPU (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available() if args.device == "auto" else args.device == "cuda"
    device = torch.device("cuda" if cuda else "cpu")
    modes = args.modes or ["off", "default", "bf16", "default+bf16",
                           *(["reduce-overhead", "reduce-overhead+bf16"] if cuda else [])]
    rows = []
    for net in args.net:
        for row in measure(net, modes, device, args):
            print(json.dumps(row), flush=True)
            rows.append(row)
    name = torch.cuda.get_device_name(device) if cuda else f"CPU, {torch.get_num_threads()} threads"
    print(f"\nPPO minibatch update (batch 256), {name}, torch {torch.__version__}\n")
    print("| net | mode | ms / update | x eager | first update(s), s | rollout to device, ms | policy loss (1st) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for row in rows:
        eager = next((r["ms_per_update"] for r in rows if r["net"] == row["net"] and r["mode"] == "off"), None)
        speedup = f"{eager / row['ms_per_update']:.2f}" if eager else "-"
        print(f"| {row['net']} | {row['mode']} | {row['ms_per_update']:.2f} | {speedup} | {row['warmup_s']:.1f} | "
              f"{row['rollout_to_device_ms']:.1f} | {row['first_policy_loss']:.5f} |")


if __name__ == "__main__":
    main()
