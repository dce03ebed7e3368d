"""The learner's loss, compiled and in bf16 as an algorithm section's ``compile`` and ``amp`` ask
(options.CompiledUpdateConfig): the part of an update torch.compile and CUDA graphs speed up.

An algorithm wraps the function that runs its networks and computes its loss (PPO's ``loss``, DQN's
``td_loss``, SAC's ``losses``) in a ``CompiledLoss`` and calls that instead; the backward pass, gradient
clipping and the (fused) optimiser step stay eager. What is compiled is the function, never the modules,
so parameters, state dicts, checkpoints and exported graphs are the same as an eager run's (no
``_orig_mod.`` keys). Inside the function, ``autocast()`` runs the networks' forward pass in bf16 when
``amp: bf16``; the function casts their outputs to float32 before any loss.

    self.loss_step = CompiledLoss(self.loss, cfg, "ppo")
    loss, terms = self.loss_step(mb, self.loss_step.scalar(clip))   # ...backward, step as before

Compilation happens at the first call, so that is where a machine without inductor's C++ compiler is
found: ``CompiledLoss`` turns the backend's failure into one ConfigError naming the option and the fix.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Callable, ContextManager

import torch

from relayrl.errors import ConfigError
from relayrl.options import CompiledUpdateConfig

CPU = torch.device("cpu")


def compile_mode(requested: str, device: torch.device, name: str) -> str | None:
    """torch.compile's mode for ``compile: requested`` on ``device`` (None: eager)."""
    if requested == "off" or (requested == "auto" and device.type != "cuda"):
        return None  # (auto: on the CPU compiling measured mixed, 0.8x-1.4x, after seconds of compiling)
    if requested == "auto":
        return "reduce-overhead"
    if requested == "reduce-overhead" and device.type != "cuda":
        raise ConfigError(f"{name}.compile=reduce-overhead replays the update as CUDA graphs, and this learner is on "
                          f"{device.type}: set {name}.compile=default (torch.compile without CUDA graphs), auto or off")
    return requested


CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # modes whose update is replayed as CUDA graphs


def shared_mode(mode: str | None, requested: str, learners: int, name: str) -> str | None:
    """``compile_mode``'s mode for one of ``learners`` data-parallel learners: their gradients are averaged between
    the backward pass and the step, outside the compiled loss, and a CUDA graph replaying the update cannot take part
    in that all-reduce. ``auto`` then compiles without CUDA graphs; asking for them is refused."""
    if learners == 1 or mode not in CUDA_GRAPH_MODES:
        return mode
    if requested == "auto":
        return "default"
    raise ConfigError(f"{name}.compile={requested} replays the update as CUDA graphs, which cannot take part in the "
                      f"gradient all-reduce of {learners} learners: set {name}.compile=default (torch.compile without "
                      f"CUDA graphs), auto or off, or train with learners=1")


def check_backend(device: torch.device, name: str, requested: str) -> None:
    """Refuse to compile where inductor cannot build kernels: no C++ compiler for the CPU's, no Triton for CUDA's
    (found when the learner is placed, before a run starts; the first update's own failure is the last word)."""
    from torch._inductor import cpp_builder
    from torch.utils._triton import has_triton

    if device.type == "cuda" and not has_triton():
        raise ConfigError(f"{name}.compile={requested} builds CUDA kernels with Triton, which this torch cannot "
                          f"import: install triton (pip install triton), or set {name}.compile=off")
    if device.type == "cpu":
        try:
            cpp_builder.get_cpp_compiler()
        except Exception as error:  # (inductor's InvalidCxxCompiler, or what probing the compiler raised)
            raise ConfigError(f"{name}.compile={requested} builds CPU kernels with a C++ compiler, and none works here "
                              f"({type(error).__name__}: {first_line(error)}): install g++ (or set CXX to one), or "
                              f"set {name}.compile=off") from None


def first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def check_amp(amp: str, device: torch.device, name: str) -> None:
    """Refuse ``amp: bf16`` where autocast has no bfloat16: a CUDA GPU older than Ampere."""
    if amp == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"{name}.amp=bf16, and this GPU ({torch.cuda.get_device_name(device)}) has no bfloat16: set "
                          f"{name}.amp=off")


class CompiledLoss:
    """``fn`` as ``cfg.compile`` and ``cfg.amp`` ask, on the device of the last ``to(device)``; called as ``fn`` is.
    Built at the first call after each ``to`` (an algorithm is built on the CPU, then placed: the options are checked
    against the device it is placed on, or against the CPU at the first use of one never placed)."""

    def __init__(self, fn: Callable[..., Any], cfg: CompiledUpdateConfig, name: str,
                 device: torch.device | None = None):
        self.fn, self.cfg, self.name = fn, cfg, name
        self.device: torch.device | None = None
        self.mode: str | None = None
        self.amp = False
        self._compiled: Callable[..., Any] | None = None
        self._built = False  # whether a call has compiled it (the backend's failures are ConfigErrors before then)
        self.learners = 1  # data-parallel learners sharing the update (share)
        if device is not None:
            self.to(device)

    def to(self, device: torch.device) -> None:
        """Run on ``device`` from now on; refuses options that cannot work there (ConfigError)."""
        self.device = torch.device(device)
        self.mode = shared_mode(compile_mode(self.cfg.compile, self.device, self.name), self.cfg.compile, self.learners,
                                self.name)
        if self.mode is not None:
            check_backend(self.device, self.name, self.cfg.compile)
        check_amp(self.cfg.amp, self.device, self.name)
        self.amp = self.cfg.amp == "bf16"
        self._compiled, self._built = None, False

    def share(self, learners: int) -> None:
        """Compile for one of ``learners`` data-parallel learners (``shared_mode``); refuses CUDA graphs for several."""
        self.learners = learners
        self.to(self.device or CPU)

    def placed(self) -> CompiledLoss:
        """Itself, placed on the CPU if it never was."""
        if self.device is None:
            self.to(CPU)
        return self

    @property
    def compiled(self) -> bool:
        return self.placed().mode is not None

    def autocast(self) -> ContextManager[Any]:
        """Where ``fn`` runs its networks: bf16 autocast with ``amp: bf16``, else nothing."""
        if not self.placed().amp:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def scalar(self, value: float) -> float | torch.Tensor:
        """A float argument that changes between calls (an annealed clip range), as ``fn`` takes it: a 0-d tensor on
        the device when compiled (a new float would be a new constant, a recompilation), else the float."""
        return torch.tensor(value, device=self.device) if self.compiled else value  # (compiled: placed)

    def __call__(self, *args: Any) -> Any:
        if self.placed().mode is None:
            return self.fn(*args)
        if self._compiled is None:
            self._compiled = torch.compile(self.fn, mode=self.mode)  # (static shapes; a size that changes, as padded
            # sequences' lengths do, makes them dynamic after one recompilation)
        if self.mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # the last call's outputs are read: its buffers may be reused
        if self._built:
            return self._compiled(*args)
        try:
            out = self._compiled(*args)
        except torch._dynamo.exc.BackendCompilerFailed as error:
            raise ConfigError(self.failure(error)) from None
        self._built = True
        return out

    def failure(self, error: Exception) -> str:
        """The one-line message for a backend that could not compile ``fn`` on this machine."""
        cause = error.inner_exception if isinstance(error, torch._dynamo.exc.BackendCompilerFailed) else error
        return (f"{self.name}.compile={self.cfg.compile}: torch.compile could not build the update on this machine "
                f"({type(cause).__name__}: {first_line(cause)}); inductor needs a working C++ compiler (CXX, or g++ on "
                f"PATH) and, on CUDA, Triton: install them, or set {self.name}.compile=off")

    def __deepcopy__(self, memo: dict[int, Any]) -> CompiledLoss:
        """A copy for a copied algorithm (``timing_step``'s): ``fn`` bound to the copy, not compiled yet."""
        clone = CompiledLoss(copy.deepcopy(self.fn, memo), self.cfg, self.name)
        clone.learners = self.learners
        if self.device is not None:
            clone.to(self.device)
        return clone
