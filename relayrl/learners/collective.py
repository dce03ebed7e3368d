"""What data-parallel learners say to each other: gradients averaged before every optimiser step, and the few
numbers that must be agreed so that no learner takes a branch the others do not (CleanRL's multi-GPU PPO,
RLlib's LearnerGroup).

An algorithm talks to a ``Collective`` and never asks whether it is distributed: a single learner holds ``SOLO``
(size 1), whose every call returns its input. ``init_collective`` joins a group of learners over torch.distributed
(gloo for CPU tensors, NCCL for CUDA ones) and returns a ``Collective`` of that group::

    learners = init_collective(rank, size, "tcp://127.0.0.1:29500", device)   # or init_collective() under torchrun
    algo.bind_learners(learners)                                               # relayrl.core.Algorithm
    ...
    loss.backward()
    learners.average_gradients(params)     # one all-reduce for every gradient: all learners now hold the same
    clip_grad_norm_(params, max_norm)      # ... and clip and step as one learner on the whole batch would
    optim.step()

Every learner must make the same calls in the same order with tensors of the same shapes: a learner that skips
one leaves the others waiting in it until the group's timeout (``timeout_s``), when their call raises
``LearnerGroupError`` instead of hanging.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from datetime import timedelta
from typing import Callable, Iterable

import torch

from relayrl.errors import ConfigError, RelayRLError

# what torchrun (and relayrl's own placement) sets for every learner process
ENV_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
DEFAULT_TIMEOUT_S = 300.0


class LearnerGroupError(RelayRLError):
    """A collective between learners failed: a peer died, hung past the timeout, or the group broke."""

    exit_code = 1


class Collective(ABC):
    """One learner's end of its group: ``rank`` in [0, ``size``)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0  # the learner's index on its machine (its GPU: cuda:local_rank)

    @abstractmethod
    def average_gradients(self, params: Iterable[torch.Tensor], values: torch.Tensor | None = None
                          ) -> torch.Tensor | None:
        """Replace every ``p.grad`` of ``params`` (those with a gradient: the same ones on every learner) by its mean
        over the learners, in ONE all-reduce; ``values`` (a 1-d tensor, e.g. the loss terms) travel in it and their
        mean is returned (None without). Call it after ``backward`` and before clipping and the optimiser step."""

    @abstractmethod
    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed over the learners, in place; returns it."""

    @abstractmethod
    def any_(self, flag: bool) -> bool:
        """Whether any learner's ``flag`` is set (every learner gets the same answer): a stop they all take."""

    @abstractmethod
    def max_(self, value: int) -> int:
        """The largest ``value`` over the learners: a count of data-dependent steps they all take."""

    @abstractmethod
    def broadcast_object(self, obj: object, src: int = 0) -> object:
        """Learner ``src``'s ``obj`` on every learner (e.g. its state at the start: identical initial weights)."""

    def all_gather_object(self, obj: object) -> list[object]:
        """Every learner's ``obj`` (picklable), in rank order, on every learner (e.g. the episodes each finished)."""
        return [obj]

    def mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` averaged over the learners, in place; returns it."""
        return self.sum_(tensor).div_(self.size) if self.size > 1 else tensor

    def mean_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Each metric averaged over the learners, in one all-reduce (every learner must give the same keys): what
        learner 0 logs for the group. One learner: ``metrics`` as they are."""
        if self.size == 1:
            return metrics
        keys = sorted(metrics)
        values = self.mean_(torch.tensor([float(metrics[key]) for key in keys], dtype=torch.float64))
        return dict(zip(keys, values.tolist()))

    def close(self) -> None:
        """Leave the group (a single learner has none)."""


class Solo(Collective):
    """A single learner: every call returns its input, at no cost."""

    def average_gradients(self, params: Iterable[torch.Tensor], values: torch.Tensor | None = None
                          ) -> torch.Tensor | None:
        return values

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def any_(self, flag: bool) -> bool:
        return bool(flag)

    def max_(self, value: int) -> int:
        return int(value)

    def broadcast_object(self, obj: object, src: int = 0) -> object:
        return obj


SOLO = Solo()


class ProcessGroup(Collective):
    """The learners of torch.distributed's default process group (``init_collective`` joins it)."""

    def __init__(self, rank: int, size: int, local_rank: int, device: torch.device, timeout_s: float):
        self.rank, self.size, self.local_rank = rank, size, local_rank
        self.device, self.timeout_s = torch.device(device), timeout_s

    def average_gradients(self, params: Iterable[torch.Tensor], values: torch.Tensor | None = None
                          ) -> torch.Tensor | None:
        grads = [p.grad for p in params if p.grad is not None]
        parts = [g.reshape(-1) for g in grads]
        dtype = grads[0].dtype if grads else torch.float32
        if values is not None:
            parts.append(values.detach().reshape(-1).to(dtype))
        if not parts:
            return values
        bucket = torch.cat(parts) if len(parts) > 1 else parts[0].clone()
        self._all_reduce(bucket)
        bucket.div_(self.size)
        offset = 0
        for g in grads:  # back into each gradient, in place (the optimiser holds these tensors)
            g.copy_(bucket[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
        if values is None:
            return None
        return bucket[offset:].view_as(values).to(values.dtype)

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        self._all_reduce(tensor)
        return tensor

    def any_(self, flag: bool) -> bool:
        return bool(self._reduce_host(float(bool(flag)), torch.distributed.ReduceOp.MAX))

    def max_(self, value: int) -> int:
        return int(self._reduce_host(float(value), torch.distributed.ReduceOp.MAX))

    def broadcast_object(self, obj: object, src: int = 0) -> object:
        box = [obj if self.rank == src else None]
        self._call("broadcast_object_list", lambda: torch.distributed.broadcast_object_list(
            box, src=src, device=self.device if self.device.type == "cuda" else None))
        return box[0]

    def all_gather_object(self, obj: object) -> list[object]:
        out: list[object] = [None] * self.size
        self._call("all_gather_object", lambda: torch.distributed.all_gather_object(out, obj))
        return out

    def close(self) -> None:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

    # ---- the calls themselves: a failure is one LearnerGroupError naming what to look at
    def _reduce_host(self, value: float, op: torch.distributed.ReduceOp) -> float:
        tensor = torch.tensor([value], dtype=torch.float64)  # a CPU tensor: gloo, even in a CUDA group
        self._call("all_reduce", lambda: torch.distributed.all_reduce(tensor, op=op))
        return float(tensor.item())

    def _all_reduce(self, tensor: torch.Tensor) -> None:
        self._call("all_reduce", lambda: torch.distributed.all_reduce(tensor))

    def _call(self, what: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except (RuntimeError, ValueError) as error:  # (gloo: a closed connection or a timeout; torch's DistError)
            raise LearnerGroupError(
                f"learner {self.rank} of {self.size}: {what} failed ({type(error).__name__}: {first_line(error)}); "
                f"another learner died, or did not join this collective within {self.timeout_s:g} s (every learner "
                "must make the same calls): see its own log for why") from None


def first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def backend_for(device: torch.device) -> str:
    """gloo for a CPU learner; NCCL for CUDA tensors and gloo for the CPU ones (the agreed flags) of a GPU learner."""
    return "cpu:gloo,cuda:nccl" if torch.device(device).type == "cuda" else "gloo"


def init_collective(rank: int | None = None, size: int | None = None, init_method: str | None = None,
                    device: torch.device | str = "cpu", timeout_s: float = DEFAULT_TIMEOUT_S,
                    local_rank: int | None = None) -> Collective:
    """Join the group of ``size`` learners as ``rank``, and return its ``Collective`` (``SOLO`` when ``size`` is 1).

    Arguments left out are read from the environment torchrun sets: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, and
    the rendezvous ``MASTER_ADDR``:``MASTER_PORT`` (``init_method`` None: ``env://``; or give
    ``"tcp://host:port"``). ``timeout_s``: how long a collective waits for a peer before it raises
    ``LearnerGroupError`` (gloo: the call raises, and it raises at once when a peer's connection closes; NCCL: its
    watchdog ends the process, as torch does, since the GPU's stream cannot be trusted after a failed collective).
    """
    size = _env_int("WORLD_SIZE", 1) if size is None else size
    rank = _env_int("RANK", 0) if rank is None else rank
    local_rank = _env_int("LOCAL_RANK", rank) if local_rank is None else local_rank
    if size < 1 or not 0 <= rank < size:
        raise ConfigError(f"learner rank {rank} of {size}: the rank must be in [0, {size}) and the size at least 1 "
                          "(RANK and WORLD_SIZE, or the placement's arguments)")
    if size == 1:
        return SOLO
    if init_method is None:
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
        if missing:
            raise ConfigError(f"{size} learners need a rendezvous address, and {' and '.join(missing)} "
                              f"{'is' if len(missing) == 1 else 'are'} not set: start them with torchrun, set "
                              "MASTER_ADDR and MASTER_PORT, or pass init_method='tcp://host:port'")
        init_method = "env://"
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
    try:
        torch.distributed.init_process_group(backend_for(device), init_method=init_method, rank=rank, world_size=size,
                                             timeout=timedelta(seconds=timeout_s),
                                             device_id=device if device.type == "cuda" else None)
    except (RuntimeError, ValueError) as error:
        raise LearnerGroupError(f"learner {rank} of {size} could not join its group at {init_method} within "
                                f"{timeout_s:g} s ({type(error).__name__}: {first_line(error)}): check that every "
                                "learner was started with the same address and size") from None
    return ProcessGroup(rank, size, local_rank, device, timeout_s)


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not a whole number (torchrun sets {', '.join(ENV_VARS)})") from None


def per_learner(total: int, learners: Collective | int, what: str) -> int:
    """``total`` shared equally by the learners (``what`` names it in the refusal of a total they cannot share)."""
    size = learners if isinstance(learners, int) else learners.size
    if total % size:
        raise ConfigError(f"{what}={total} cannot be shared by {size} learners (each takes {what} / learners): set "
                          f"{what} to a multiple of {size}")
    return total // size

