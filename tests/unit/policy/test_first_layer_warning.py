"""Big frames make a huge first layer (the linear layer after a CNN's convolutions): above 10M weights a
warning names the size and the fix (``env.resize``), once per network and image size (policy/encoders.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from relayrl.policy.encoders import BIG_LAYER, NatureCNN, SmallCNN, warn_big_layer


def test_a_first_layer_over_10m_weights_warns_once_naming_its_size_and_the_fix(caplog):
    with caplog.at_level("WARNING", logger="relayrl"):
        NatureCNN(gym.spaces.Box(0, 255, (84, 84, 4), np.uint8))  # Atari's: 1.6M weights, quiet
        SmallCNN(gym.spaces.Box(0, 1, (10, 10, 4), bool))
        assert caplog.records == []
        big = NatureCNN(gym.spaces.Box(0, 255, (173, 171, 3), np.uint8))  # (a size no other test builds)
        linear = big.net[1]
        weights = linear.in_features * linear.out_features
        assert weights > BIG_LAYER
        [record] = caplog.records
        message = record.getMessage()
        assert record.levelname == "WARNING" and "173x171x3" in message
        assert f"{weights / 1e6:.1f}M weights" in message and str(linear.in_features) in message
        assert "--set env.resize=[84,84]" in message and "env.grayscale=true" in message
        assert not warn_big_layer("NatureCNN", big.layout, linear.in_features, linear.out_features)  # said once
        assert len(caplog.records) == 1
