"""Data-parallel learners placed on Ray actors (``learner_placement: ray``): one actor per learner, each with one
CPU and ``learner_gpus`` GPUs, running the same entry point as a local learner process
(learner_group.run_learner); learner 0's actor gives the rendezvous (its node's address and a free port).

The supervisor (this process) watches the actors' calls: a learner whose actor died (killed, its node lost) or
whose run failed ends the group as with local processes; one that hangs is the one whose clock is oldest, or that
no longer answers at all. Stops reach the actors as a call setting their flag. The run directory is learner 0's
node's: on a cluster, give ``--run-dir`` a path every node shares, or read the run on that node.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

from relayrl.training.learner import HookContext
from relayrl.training.learner_group import GRACE_S, POLL_S, LearnerFault, Plan, Supervisor, _Watch, outcome, stop_code

log = logging.getLogger("relayrl")


class Flag:
    """The stop flag of a learner in an actor (the local learners' is in shared memory)."""

    value = 0


class RayLearner:
    """One learner in a Ray actor (max_concurrency 2: the supervisor's calls answer while ``run`` runs)."""

    def __init__(self, size: int):
        self.heartbeat, self.flag = [0.0] * size, Flag()

    def info(self) -> dict[str, Any]:
        """The actor's pid, and a rendezvous on its node (learner 0's is the group's)."""
        import ray

        ip = ray.util.get_node_ip_address()
        with socket.socket() as sock:
            sock.bind((ip, 0))
            port = sock.getsockname()[1]
        return {"pid": os.getpid(), "init_method": f"tcp://{ip}:{port}"}

    def run(self, plan: Plan, rank: int) -> tuple[str, Any]:
        from relayrl.training.learner_group import _log_to_stderr

        _log_to_stderr(rank)
        return outcome(rank, self.heartbeat, self.flag, plan, lambda: None)

    def age(self, rank: int) -> float:
        """Seconds since the learner's last round began (-1: it has not begun one)."""
        beat = self.heartbeat[rank]
        return time.monotonic() - beat if beat > 0 else -1.0

    def stop(self, code: int) -> None:
        self.flag.value = code


class RaySupervisor(Supervisor):
    """``Supervisor`` whose learners are Ray actors (the module docstring)."""

    def run(self) -> dict[str, Any]:
        owned = _init_ray(self.config.ray_address)
        try:
            return super().run()
        finally:
            if owned:
                import ray

                ray.shutdown()

    def _run_group(self, resume: bool) -> dict[str, Any]:
        import ray

        config, n = self.config, self.config.learners
        actor = ray.remote(max_concurrency=2, max_restarts=0)(RayLearner)
        actors = [actor.options(num_cpus=1, num_gpus=config.learner_gpus, name=None).remote(n) for _ in range(n)]
        try:
            infos = ray.get([a.info.remote() for a in actors], timeout=config.learner_timeout_s)
            plan = Plan(config.model_dump(), str(self.run_dir), infos[0]["init_method"], resume,
                        None if self.previous is None else str(self.previous), self.quiet, self.tensorboard, n)
            calls = {a.run.remote(plan, rank): rank for rank, a in enumerate(actors)}
            log.info("%d learners started on Ray (%s), meeting at %s", n, ", ".join(
                f"learner {rank} pid {info['pid']}" for rank, info in enumerate(infos)), plan.init_method)
            return self._watch_actors(actors, calls, [info["pid"] for info in infos])
        except ray.exceptions.GetTimeoutError:
            raise LearnerFault(f"Ray did not start {n} learner actors (1 CPU and {config.learner_gpus:g} GPUs each) "
                               f"within {config.learner_timeout_s:g} s: the cluster lacks the resources",
                               restartable=False) from None
        finally:
            for a in actors:
                ray.kill(a)

    def _watch_actors(self, actors: list[Any], calls: dict[Any, int], pids: list[int]) -> dict[str, Any]:
        import ray

        watch = _Watch([], None)
        results: dict[int, tuple[str, Any]] = {}
        failed_at: float | None = None
        flagged = False
        n = len(actors)
        while True:
            if not self._hooks_ran and (self.run_dir / "config.yaml").is_file():
                self._hooks_ran = True
                for _, fn, _ in self.hooks:
                    fn(HookContext())
            if self.stop_event is not None and self.stop_event.is_set() and not flagged:
                for a in actors:
                    a.stop.remote(stop_code(self.stop_event))
                flagged = True
            pending = [ref for ref, rank in calls.items() if rank not in results]
            ready, _ = ray.wait(pending, num_returns=len(pending), timeout=POLL_S) if pending else ([], [])
            for ref in ready:
                try:
                    results[calls[ref]] = ray.get(ref)
                except ray.exceptions.RayActorError as error:
                    results[calls[ref]] = ("died", str(error).splitlines()[0] if str(error) else "")
            if len(results) == n and all(kind == "done" for kind, _ in results.values()):
                return results[0][1]
            if results.get(0, ("",))[0] == "done" and all(kind == "done" for kind, _ in results.values()):
                failed_at = failed_at or time.monotonic()
                if time.monotonic() - failed_at > self.config.learner_timeout_s:
                    return results[0][1]
                continue
            if any(kind != "done" for kind, _ in results.values()):
                failed_at = failed_at or time.monotonic()
                if len(results) == n or time.monotonic() - failed_at > GRACE_S:
                    watch.reports = {rank: result for rank, result in results.items() if result[0] != "done"}
                    raise self._actor_fault(watch, actors, pids)

    def _actor_fault(self, watch: _Watch, actors: list[Any], pids: list[int]) -> LearnerFault:
        import ray

        n = len(actors)

        def name(rank: int) -> str:
            return f"learner {rank} of {n} (pid {pids[rank]})"

        error = self._reported_error(watch, name)
        if error is not None:
            return error
        for rank, (kind, payload) in sorted(watch.reports.items()):
            if kind == "died":
                return LearnerFault(f"{name(rank)} died: its Ray actor ended ({payload})", restartable=True)
        silent = [rank for rank in range(n) if rank not in watch.reports]
        ages: dict[int, float] = {}
        for rank in silent or list(range(n)):
            try:
                ages[rank] = ray.get(actors[rank].age.remote(rank), timeout=5)
            except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError):
                ages[rank] = float("inf")  # (no answer at all: stopped)
        rank = max(ages, key=lambda r: ages[r])
        since = "it does not answer" if ages[rank] == float("inf") else (
            f"its last round began {ages[rank]:.0f} s ago" if ages[rank] >= 0 else "it never joined the group")
        return self._stalled(name(rank), since)


def _init_ray(address: str | None) -> bool:
    """Ray for the learners: the cluster at ``address``, or a local one this run owns (True)."""
    from relayrl.runtime.backends.ray import start_ray

    return start_ray(address, os.cpu_count() or 1, "learner_placement ray")


