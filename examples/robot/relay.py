# examples/robot/relay.py
"""Script 1 of 3 (TMRL's Server), on a machine the trainer and the robots can reach: the relay."""

from examples.robot.config import RELAY
from relayrl.remote import Relay

Relay(bind=RELAY).serve()  # until Ctrl-C
