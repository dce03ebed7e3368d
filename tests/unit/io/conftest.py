"""Fixtures of the io tests."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture
def run_cli():
    """``relayrl.cli.main`` in this process, leaving the "relayrl" logger as it was (main sends it to stderr
    and stops its propagation, which would hide later tests' records from caplog)."""
    from relayrl.cli import main

    logger = logging.getLogger("relayrl")
    handlers, propagate, level = logger.handlers[:], logger.propagate, logger.level
    yield main
    logger.handlers[:] = handlers
    logger.propagate = propagate
    logger.setLevel(level)
