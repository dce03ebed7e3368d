import dataclasses

import numpy as np
import pytest

from relayrl.runtime.messages import InsertTransitions, LoadParams


def test_messages_are_immutable_once_built():
    msg = InsertTransitions(worker_id=1, seq=0, version=3, batch={"obs": np.zeros((4, 2))}, env_steps=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.version = 4
    with pytest.raises(ValueError, match="read-only"):
        msg.batch["obs"][0, 0] = 1.0
    params = LoadParams(version=2, weights={"w": np.ones(3)})
    with pytest.raises(ValueError, match="read-only"):
        params.weights["w"][0] = 0.0
