"""make_pool asks the algorithm's config whether its options work with rollout workers, before any starts."""

from __future__ import annotations

import multiprocessing

import pytest

from relayrl.config import build_config
from relayrl.errors import ConfigError
from relayrl.runtime import make_pool


def test_a_worker_pool_refuses_ppo_prenorm_before_starting_a_worker():
    config = build_config("ppo", None, ["ppo.obs_norm=true", "ppo.prenorm=true", "backend=mp", "workers=2"])
    with pytest.raises(ConfigError, match=r"rollout workers replace: set ppo\.prenorm=false"):
        make_pool(config)
    assert multiprocessing.active_children() == []
