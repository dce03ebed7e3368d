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


def test_a_sender_cannot_change_a_message_after_sending_it():
    owned = np.zeros(4)  # an array that owns its memory becomes the message's, without a copy
    msg = InsertTransitions(0, 0, 0, {"reward": owned}, 4)
    with pytest.raises(ValueError, match="read-only"):
        owned[0] = 1.0  # the sender's own handle: its write raises instead of reaching the receiver
    assert np.shares_memory(msg.batch["reward"], owned)
    buffer = np.zeros((2, 4))  # a view into a buffer the sender writes again (a preallocated store): copied
    msg = InsertTransitions(0, 1, 0, {"reward": buffer[0]}, 4, obs_moments={"mean": buffer[1]})
    buffer[:] = 7.0
    assert not msg.batch["reward"].any() and not msg.obs_moments["mean"].any()
    frozen_view = buffer[0].view()  # a read-only view of a writable buffer is no protection either
    frozen_view.flags.writeable = False
    msg = InsertTransitions(0, 2, 0, {"reward": frozen_view}, 4)
    buffer[0] = 3.0
    assert (msg.batch["reward"] == 7.0).all()


def test_read_only_memory_a_transport_received_is_kept_without_a_copy():
    from relayrl.net import wire
    frames = wire.encode(wire.SAMPLES, sender="w", version=1, arrays={"reward": np.arange(4, dtype=np.float32)})
    received = wire.decode([memoryview(bytes(f)) if not isinstance(f, memoryview) else f for f in frames])
    msg = InsertTransitions(0, 0, 1, received.arrays, 4)
    assert np.shares_memory(msg.batch["reward"], received.arrays["reward"])
    assert msg.batch["reward"].tolist() == [0, 1, 2, 3]


def test_a_weights_snapshot_is_not_changed_by_the_learners_later_updates():
    import torch
    live = torch.zeros(3)  # get_weights() gives tensors that share memory with the model
    params = LoadParams(1, {"model": {"w": live}})
    kept = params.snapshot()
    live.add_(1.0)  # an optimiser step
    assert kept.version == 1 and kept.weights["model"]["w"].tolist() == [0.0, 0.0, 0.0]


def test_on_the_inline_backend_workers_hold_their_own_weights_and_chunks_nobody_can_change():
    import torch
    from relayrl.algos import get_algo
    from relayrl.config import build_config
    from relayrl.runtime import make_backend

    config = build_config("dqn", None, ["workers=1", "backend=inline", "env.num_envs=2", "dqn.hidden_sizes=[8]"])
    backend = make_backend(config)
    backend.start(0)
    try:
        worker = backend.workers[0]
        learner = get_algo("dqn").build_policy(config.dqn, worker.venv.single_observation_space,
                                               worker.venv.single_action_space)
        backend.publish(LoadParams(1, learner.get_weights()), 0)
        before = {k: v.clone() for k, v in worker.policy.get_weights()["model"].items()}
        with torch.no_grad():
            for p in learner.model.parameters():
                p.add_(1.0)  # the learner's next update, in place
        after = worker.policy.get_weights()["model"]
        assert all(torch.equal(before[k], after[k]) for k in before)
        chunk = backend.receive()[0]
        assert chunk.version == 1 and chunk.batch
        for key, value in chunk.batch.items():
            with pytest.raises(ValueError, match="read-only"):
                value.reshape(-1)[:1] = 0
    finally:
        backend.close()


def test_mp_publish_copies_the_weights_into_its_board_so_later_updates_do_not_reach_the_workers():
    import torch
    from relayrl.algos import get_algo
    from relayrl.config import build_config
    from relayrl.envs import make_vec
    from relayrl.runtime.backends.mp import MpBackend

    config = build_config("dqn", None, ["env.num_envs=2", "dqn.hidden_sizes=[8]"])
    with make_vec("CartPole-v1", 1) as venv:
        learner = get_algo("dqn").build_policy(config.dqn, venv.single_observation_space, venv.single_action_space)
    backend = MpBackend(config, 1)
    try:
        backend.start(0)
        live = learner.get_weights()  # (tensors of the live model: the transport copies them at publish)
        backend.publish(LoadParams(3, live), 0)
        before = {key: value.clone() for key, value in live["model"].items()}
        with torch.no_grad():
            for p in learner.model.parameters():
                p.add_(1.0)  # the learner's next update
        weights, version, _ = backend._board.read()  # what the workers read
        assert version == 3
        for key, value in before.items():
            np.testing.assert_array_equal(weights[f"model/{key}"], value.numpy())
    finally:
        backend.close()
