"""Several simulator instances (issue 26, item 3): env steps per second of 1, 2 and 4 instances of the
example simulator at a 1 ms step, stepped in parallel by ``relayrl.bridge.instances.BridgeInstances``
(what ``relayrl train ... --env bridge:CMD --workers N`` uses).

The simulator is the C example ``relayrl/bridge/c/examples/ball3d.c`` with ``--step-ms 1``: every step
costs it 1 ms of CPU (a busy wait, like a heavier physics step), for its 12 agents (``--agents``). The
trainer side does what a training run's env stepping does, without a policy: ``get_steps`` (every
instance's rows joined, copied), ``set_actions`` (zeros, split back per instance), ``step`` (the turn
handed to every instance, then waited for from each). An env step is one agent decision, as in
training. Each figure is the median over ``--rounds`` rounds of about ``--seconds`` each, the instance
counts alternating round by round, after a warm-up; every instance runs from the start to the end.

    python benchmarks/bridge_instances.py [--counts 1 2 4] [--rounds 5] [--seconds 2] [--spin-us 500]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np


def steps_per_second(env, seconds: float) -> tuple[float, float]:
    """(agent decisions, turns) per second over about ``seconds`` of consecutive turns."""
    decisions = turns = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        steps, _ = env.get_steps("ball3d")
        env.set_actions("ball3d", continuous=np.zeros((len(steps), 2), np.float32))
        env.step()
        decisions += len(steps)
        turns += 1
    return decisions / elapsed, turns / elapsed


def main(argv: list[str] | None = None) -> dict:
    from relayrl.bridge.cbuild import build
    from relayrl.bridge.instances import BridgeInstances
    from relayrl.bridge.sidechannel import StatsChannel

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--step-ms", type=float, default=1.0)
    parser.add_argument("--agents", type=int, default=12)
    parser.add_argument("--spin-us", type=float, default=500.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        exe = build("ball3d", os.path.join(tmp, "build"))
        command = [str(exe), "--agents", str(args.agents), "--step-ms", str(args.step_ms)]
        envs = {n: BridgeInstances(command, n, timeout_s=60, spin_us=args.spin_us, side_channels=[StatsChannel()])
                for n in args.counts}  # (ball3d sends a stat every turn: received, not warned about)
        try:
            for env in envs.values():
                env.reset()
                steps_per_second(env, 0.3)  # warm-up
            results: dict[int, list[tuple[float, float]]] = {n: [] for n in args.counts}
            for _ in range(args.rounds):
                for n, env in envs.items():
                    results[n].append(steps_per_second(env, args.seconds))
        finally:
            for env in envs.values():
                env.close()
    base = statistics.median(r[0] for r in results[args.counts[0]])
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end; simulator C ball3d, "
          f"{args.agents} agents, {args.step_ms:g} ms a step; spin_us={args.spin_us:g}")
    print(f"{'instances':>9} {'env steps/s':>12} {'turns/s':>9} {'x ' + str(args.counts[0]):>6}")
    table = {}
    for n in args.counts:
        steps = statistics.median(r[0] for r in results[n])
        turns = statistics.median(r[1] for r in results[n])
        table[n] = {"env_steps_per_s": round(steps), "turns_per_s": round(turns, 1), "speedup": round(steps / base, 2)}
        print(f"{n:>9} {steps:>12.0f} {turns:>9.1f} {steps / base:>6.2f}")
    print("RESULT " + json.dumps(table))
    return table


if __name__ == "__main__":
    main()
