"""make_pool asks the algorithm's config whether its options work with rollout workers, before any starts."""

from __future__ import annotations

import multiprocessing

import pytest

from relayrl.algos.ppo import PPOConfig
from relayrl.config import build_config
from relayrl.errors import ConfigError
from relayrl.runtime import make_pool


def test_a_worker_pool_asks_the_config_before_starting_a_worker(monkeypatch):
    asked = []

    def refuse(self, name, placement):
        asked.append(placement)
        raise ConfigError(f"{name} cannot run on {placement}")

    monkeypatch.setattr(PPOConfig, "check_placement", refuse)
    config = build_config("ppo", None, ["backend=mp", "workers=2"])
    with pytest.raises(ConfigError, match="ppo cannot run on workers"):
        make_pool(config)
    assert asked == ["workers"] and multiprocessing.active_children() == []
