"""Simulators written against the Python SDK (``relayrl.bridge.World``); C twins in ``relayrl/bridge/c/examples``."""
