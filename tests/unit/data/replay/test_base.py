"""``Replay`` is the type a memory subclasses: the built-in buffer and the replay service are ones, the
required methods are enforced when a memory is built, and the optional ones have their documented defaults."""

import numpy as np
import pytest

import relayrl.core
from relayrl.data.replay import Replay, ReplayBuffer
from relayrl.runtime.service import ReplayService


class Minimal(Replay):
    def __init__(self):
        self.rows = 0

    def add(self, batch):
        self.rows += len(batch["obs"])

    def sample(self, n, version=None):
        return {"obs": np.zeros((n, 1))}

    def __len__(self):
        return self.rows


def test_the_built_in_replays_are_replays_and_core_re_exports_the_type():
    assert issubclass(ReplayBuffer, Replay) and issubclass(ReplayService, Replay)
    assert relayrl.core.Replay is Replay


def test_a_memory_without_sample_is_refused_when_built():
    class NoSample(Replay):
        def add(self, batch):
            pass

        def __len__(self):
            return 0

    with pytest.raises(TypeError, match="sample"):
        NoSample()


def test_optional_parts_have_their_defaults(tmp_path):
    memory = Minimal()
    memory.add({"obs": np.zeros((3, 1))})
    assert len(memory) == 3 and memory.max_staleness is None and memory.stats() == {}
    assert memory.save(tmp_path / "replay.safetensors") is None and not (tmp_path / "replay.safetensors").exists()
    with pytest.raises(NotImplementedError, match="Minimal does not do priorities"):
        memory.update_priorities(np.arange(3), np.ones(3))
