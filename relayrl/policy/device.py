"""The learner's device: ``device: auto | cpu | cuda`` resolved against the machine and the algorithm.

The learner's networks, optimiser state and each update's batch live on that device; whatever leaves
the learner (published weights, checkpoints, priorities, actions) is on the CPU, so rollout workers,
remote workers and evaluators never see a GPU tensor. ``auto`` is CUDA when torch has a CUDA device and
the algorithm learns on it, else the CPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from relayrl.errors import ConfigError

CPU = torch.device("cpu")


def resolve_device(requested: str, supported: tuple[str, ...], algo: str) -> torch.device:
    """The device ``requested`` ("auto", "cpu", "cuda") means here, for an algorithm learning on ``supported``."""
    if requested == "cpu":
        return CPU
    cuda = torch.cuda.is_available()
    if requested == "auto":
        return torch.device("cuda") if cuda and "cuda" in supported else CPU
    if requested != "cuda":
        raise ConfigError(f"device={requested!r}: use auto, cpu or cuda")
    if not cuda:
        raise ConfigError("device=cuda, but torch finds no CUDA device on this machine (torch.cuda.is_available() is "
                          "False): use --device cpu, or auto to take CUDA only where there is one")
    if "cuda" not in supported:
        raise ConfigError(f"{algo} learns on the CPU only: use --device cpu (or auto)")
    return torch.device("cuda")


def cpu_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """``module.state_dict()`` on the CPU (the tensors themselves when they already are: no copy)."""
    return {key: value.cpu() for key, value in module.state_dict().items()}


def cpu_tree(state: Any) -> Any:
    """A nested state (dicts, lists, tuples; an optimiser's ``state_dict()``) with every tensor on the CPU (the
    tensors themselves when they already are) and everything else as it is."""
    if isinstance(state, torch.Tensor):
        return state.cpu()
    if isinstance(state, dict):
        return {key: cpu_tree(value) for key, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(cpu_tree(value) for value in state)
    return state


def host_to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A stored array (a rollout's or replay batch's column) as a tensor on ``device``, dtype kept (uint8 images move
    as uint8, a quarter of float32's bytes; the caller casts on the device). On CUDA it goes through page-locked
    memory (torch's caching host allocator: the block is reused once the copy is done) without blocking the
    host, which can prepare the next column meanwhile; on the CPU it shares the array's memory."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def float_to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """``host_to_device`` cast to float32 on the device (rewards, flags, weights, observations as networks read
    them: data/dtypes.py's ``to_tensor``, through pinned memory on CUDA)."""
    return host_to_device(array, device).float()
