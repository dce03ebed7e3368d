# examples/robot/worker.py
"""Script 2 of 3 (TMRL's RolloutWorker), on each robot: steps the env with the latest weights and sends the
samples to the relay."""

from examples.robot.config import ALGO, CONFIG, ENV
from relayrl.remote import Worker

worker = Worker(ALGO, ENV, CONFIG)
stats = worker.run()  # until Ctrl-C
print(f"worker done: {stats['env_steps']} env steps, {stats['acked']} chunks taken by the trainer, "
      f"policy version {stats['version']}")
