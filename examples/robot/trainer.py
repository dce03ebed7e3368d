# examples/robot/trainer.py
"""Script 3 of 3 (TMRL's Trainer), on the machine that learns: trains on the samples the workers send through the
relay, publishes the weights back to them, and writes the run as every relayrl run."""

import relayrl
from examples.robot.config import ALGO, CONFIG, ENV, TOTAL_STEPS

run = relayrl.train(ALGO, ENV, CONFIG, total_steps=TOTAL_STEPS)
print(f"trained on {run.summary['env_steps']} env steps, best eval return {run.summary['best_eval_return']:.1f}, "
      f"run in {run.run_dir}")
