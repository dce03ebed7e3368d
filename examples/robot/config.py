# examples/robot/config.py
"""What the worker and the trainer share (TMRL's config.json): the algorithm, the env and the options; the relay's
address and the training budget can be set from the environment (ROBOT_RELAY, ROBOT_STEPS)."""

import os

RELAY = os.environ.get("ROBOT_RELAY", "127.0.0.1:5555")
ALGO = "examples.robot.algorithm:ddpg"  # your own algorithm, by reference
ENV = "examples.robot.env:make"  # your own env, by reference
TOTAL_STEPS = int(os.environ.get("ROBOT_STEPS", "5000"))
CONFIG = {
    "ddpg": {
        "hidden": 64,
        "replay": "examples.robot.memory:Memory",  # your own memory, by reference
    },
    "net": {"server": RELAY},
}
