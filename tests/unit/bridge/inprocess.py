"""Both ends of a bridge in one test process: the trainer (``BridgeEnv`` in attach mode) in the test's
thread, a Python ``World`` in a second thread, so a test can look at the shared bytes between turns
and script the simulator as a plain function."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from relayrl.bridge import BridgeEnv, World


class SimThread(threading.Thread):
    """Runs ``script(world)`` against the channel at ``path``; keeps its exception for the test."""

    def __init__(self, path: Path, script: Callable[[World], None], **world_kwargs):
        super().__init__(daemon=True, name="bridge-sim")
        self.path, self.script, self.world_kwargs = path, script, world_kwargs
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with World(str(self.path), timeout_s=20, **self.world_kwargs) as world:
                self.script(world)
        except BaseException as exc:  # re-raised in the test's thread
            self.error = exc


def finish(world: World) -> None:
    """The end of a simulator script: keep stepping until the trainer closes."""
    while world.step() != "closed":
        pass


@contextmanager
def trainer_and_world(folder: Path, script: Callable[[World], None], **world_kwargs) -> Iterator[BridgeEnv]:
    """A BridgeEnv whose simulator is ``script`` in a thread; on exit the trainer closes, the
    simulator thread must end, and its exception (a failed assert in the script) is raised."""
    sim = SimThread(folder / "editor", script, **world_kwargs)
    sim.start()
    try:
        env = BridgeEnv(attach=True, directory=folder, timeout_s=20)
    except BaseException:
        sim.join(30)
        if sim.error is not None:
            raise sim.error
        raise
    try:
        yield env
    except BaseException:
        env.close()
        sim.join(30)
        if sim.error is not None:  # the simulator's failure is the cause; the trainer only saw it close
            raise sim.error
        raise
    env.close()
    sim.join(30)
    assert not sim.is_alive(), "the simulator thread did not stop after the trainer closed"
    if sim.error is not None:
        raise sim.error
