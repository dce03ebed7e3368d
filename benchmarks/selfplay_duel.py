"""Self-play on a two-team example (issue 26, item 2): PPO learns the race of
``relayrl/bridge/examples/duel.py`` by self-play only (blue and red, one policy, frozen snapshots as
opponents), then its blue side plays a fixed scripted red it never met (``--opponent scripted``: a runner
that steps towards the coin half the time). Per seed: the win rate against the scripted opponent before
training (the initial policy) and after, and the ELO curve of each side (selfplay/elo_blue, elo_red from
metrics.jsonl) as a PNG.

    python benchmarks/selfplay_duel.py [--seeds 0 1 2] [--steps 30000] [--games 400] [--plot docs/img/selfplay_elo.png]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

SELFPLAY = ["selfplay.enabled=true", "selfplay.save_steps=3000", "selfplay.swap_steps=1500",
            "selfplay.team_change=6000", "eval.freq=0"]


def duel(*extra: str) -> str:
    return "bridge:" + " ".join([shlex.quote(sys.executable), "-m", "relayrl.bridge.examples.duel", *extra])


def win_rate(policy, games: int, seed: int) -> float:
    """Blue's share of wins against the scripted red, deterministic, over ``games`` matches."""
    from relayrl.bridge.agent_env import BridgeAgents
    from relayrl.training.agent_collectors import AgentEvaluator

    env = BridgeAgents(duel("--opponent", "scripted", "--seed", str(seed + 1000))[len("bridge:"):])
    try:
        result = AgentEvaluator(env, games, seed=seed).evaluate(policy)
    finally:
        env.close()
    return float((result.returns > 0).mean())


def train(seed: int, steps: int, folder: Path) -> Path:
    from relayrl.config import build_config
    from relayrl.launch import run

    config = build_config("ppo", None, [f"env.id={duel('--seed', str(seed))}", *SELFPLAY],
                          {"total_steps": steps, "seed": seed})
    run_dir = folder / f"seed{seed}"
    run(config, run_dir=run_dir, quiet=True, tensorboard=False)
    return run_dir


def elo_curves(run_dir: Path) -> tuple[list[int], dict[str, list[float]]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "selfplay/elo_blue" in r]
    return [r["env_steps"] for r in rows], {side: [r[f"selfplay/elo_{side}"] for r in rows] for side in ("blue", "red")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--games", type=int, default=400)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()

    import torch

    import relayrl
    from relayrl.algos import get_algo
    from relayrl.config import default_config
    from relayrl.bridge.agent_env import BridgeAgents

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        curves = {}
        for seed in args.seeds:
            probe = BridgeAgents(duel("--opponent", "scripted")[len("bridge:"):])
            spaces = probe.single_observation_space, probe.single_action_space
            probe.close()
            torch.manual_seed(seed)
            initial = get_algo("ppo").build_policy(default_config("ppo").algo_config, *spaces)
            before = win_rate(initial, args.games, seed)
            run_dir = train(seed, args.steps, Path(tmp))
            after = win_rate(relayrl.load(run_dir / "checkpoints" / "last.safetensors"), args.games, seed)
            summary = json.loads((run_dir / "summary.json").read_text())
            curves[seed] = elo_curves(run_dir)
            results.append({"seed": seed, "win_rate_before": before, "win_rate_after": after,
                            "wall_time_s": summary["wall_time_s"],
                            "elo_end": {side: values[-1] for side, values in curves[seed][1].items()}})
            print(json.dumps(results[-1]), flush=True)
        after = [r["win_rate_after"] for r in results]
        print(f"win rate against the scripted opponent after {args.steps} self-play steps: median "
              f"{statistics.median(after):.3f} (min {min(after):.3f}) over seeds {args.seeds}; before training: median "
              f"{statistics.median(r['win_rate_before'] for r in results):.3f}")
        if args.plot is not None:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            fig, ax = plt.subplots(figsize=(7, 4))
            for seed, (steps, sides) in curves.items():
                for side, colour in (("blue", "tab:blue"), ("red", "tab:red")):
                    ax.plot(steps, sides[side], color=colour, alpha=0.4 + 0.6 * (seed == args.seeds[0]),
                            label=f"{side} (seed {seed})" if seed == args.seeds[0] else None)
            ax.set_xlabel("env steps (the learning side's decisions)")
            ax.set_ylabel("ELO")
            ax.set_title("PPO self-play on duel.py: each side's rating")
            ax.legend()
            fig.tight_layout()
            args.plot.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(args.plot, dpi=100)
            print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
