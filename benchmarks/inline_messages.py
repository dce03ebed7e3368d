"""Inline backend's env steps/s through its messages (issue 28: messages own their arrays; compare checkouts).

    PYTHONPATH=CHECKOUT python benchmarks/inline_messages.py [--algo dqn|ppo] [--seconds 5]

Two inline workers (4 CartPole envs each) collect chunks, received as the learner's pool receives them, with a
publish of the learner's weights between receives as an off-policy learner does; nothing is learned. Prints one
JSON line with env steps/s.
"""

from __future__ import annotations

import argparse
import json
import time

from relayrl.config import build_config
from relayrl.runtime import make_backend
from relayrl.runtime.messages import LoadParams


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--algo", default="dqn")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    config = build_config(args.algo, None, ["workers=2", "backend=inline", "env.num_envs=4"])
    backend = make_backend(config)
    backend.start(0)
    try:
        weights = backend.workers[0].policy.get_weights()
        steps, version, start = 0, 0, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            version += 1
            backend.publish(LoadParams(version, weights), steps)
            backend.request(version)
            steps += sum(msg.env_steps for msg in backend.receive())
        elapsed = time.perf_counter() - start
    finally:
        backend.close()
    print(json.dumps({"algo": args.algo, "env_steps_per_s": round(steps / elapsed, 1)}))


if __name__ == "__main__":
    main()
