"""Shared fixtures: small budgets and test-only environments."""

from __future__ import annotations

import pytest

import relayrl.testing.envs  # noqa: F401  (registers the relayrl-test/ envs, NanReward-v0 among them)
from relayrl.config import build_config


@pytest.fixture
def tiny_config():
    """A PPO config that runs a few iterations in well under a second."""

    def make(*sets: str, **overrides):
        base = ["env.num_envs=2", "ppo.num_steps=16", "ppo.batch_size=16", "ppo.epochs=2",
                "eval.freq=64", "eval.episodes=2", "eval.num_envs=2"]
        return build_config("ppo", None, [*base, *sets], {"total_steps": 128, **overrides})

    return make


@pytest.fixture(autouse=True)
def _relayrl_logger_restored():
    """``relayrl.cli.main`` called in-process sends the "relayrl" logger to the stderr of that moment
    and stops its propagation, as a CLI process should; put it back after each test, so a later test's
    caplog sees the records and no handler writes to a capture stream pytest has closed."""
    import logging

    logger = logging.getLogger("relayrl")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    yield
    logger.handlers[:], logger.propagate, logger.level = saved[0], saved[1], saved[2]
