"""relayrl: one set of RL algorithms for a laptop, a Ray cluster, remote robots and simulators."""

__version__ = "0.1.0"
