"""Scripted policies for tests and the docs (``relayrl worker --policy relayrl.testing.scripted:NAME``)."""

from __future__ import annotations

import numpy as np


def pendulum_swing(obs: np.ndarray) -> np.ndarray:
    """Pendulum-v1: pump energy with the angular velocity, hold the top with a PD controller near it."""
    cos, sin, vel = obs[:, 0], obs[:, 1], obs[:, 2]
    theta = np.arctan2(sin, cos)
    torque = np.where(cos > 0.95, -10.0 * theta - 2.0 * vel, 2.0 * np.sign(vel + 1e-6))
    return np.clip(torque, -2.0, 2.0).astype(np.float32)[:, None]


def cartpole_balance(obs: np.ndarray) -> np.ndarray:
    """CartPole-v1: push towards the side the pole falls to."""
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)


def wrong_shape(obs: np.ndarray) -> np.ndarray:
    return np.zeros((len(obs), 3), np.float32)


def out_of_bounds(obs: np.ndarray) -> np.ndarray:
    return np.full((len(obs), 1), 5.0, np.float32)


def raises(obs: np.ndarray) -> np.ndarray:
    raise RuntimeError("joystick unplugged")
