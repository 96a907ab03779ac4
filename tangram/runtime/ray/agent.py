"""CPU node agent: one long-lived actor per node holding that node's sandboxes.

The scheduler grants a core COUNT; the agent maps it to concrete free core ids
(:class:`CoreAllocator`), pins the action to them and returns them when the
action ends. Logical cores beyond the machine's map onto its cores round-robin,
so a declared fleet larger than the machine still runs (oversubscribed).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from tangram.runtime.sandbox import Command, Limits, Sandboxes


class CoreAllocator:
    """Free core slots of one node; ``take`` blocks until enough are free."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("cores: a node has at least one core")
        self._free = list(range(slots))
        self._size = slots
        self._cond = threading.Condition()

    def take(self, n: int, timeout_s: float | None = None) -> tuple[int, ...]:
        """``n`` free slots (lowest first); raises TimeoutError when none come in time."""
        if not 1 <= n <= self._size:
            raise ValueError(f"cores: asked {n}, node has {self._size}")
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._free) >= n, timeout_s):
                raise TimeoutError(f"cores: {n} not free within {timeout_s} s")
            self._free.sort()
            taken, self._free = tuple(self._free[:n]), self._free[n:]
            return taken

    def give(self, slots: Sequence[int]) -> None:
        with self._cond:
            self._free.extend(slots)
            self._cond.notify_all()

    @property
    def free(self) -> int:
        return len(self._free)


class NodeAgent:
    """Runs the CPU actions of one node (a threaded Ray actor in the live runtime).

    Parameters
    ----------
    node_id
        The fleet's node id.
    cores
        Schedulable cores of the node (the fleet's ``CpuNode.cores``).
    physical
        Machine core ids to pin to; this process's affinity when None.
    root, limits, isolation
        Passed to :class:`~tangram.runtime.sandbox.Sandboxes`.
    core_wait_s
        How long an action waits for its cores (the plan and reality may briefly
        disagree around completions) before failing.
    """

    def __init__(self, node_id: str, cores: int, physical: Sequence[int] | None = None, root: str | None = None,
                 limits: Limits | None = None, isolation: str = "auto", core_wait_s: float = 30.0) -> None:
        self.node_id = node_id
        self.physical = tuple(sorted(physical if physical is not None else os.sched_getaffinity(0)))
        self.allocator = CoreAllocator(cores)
        self.sandboxes = Sandboxes(root, limits=limits, isolation=isolation)
        self.core_wait_s = core_wait_s

    def pin(self, slots: Sequence[int]) -> tuple[int, ...]:
        """Machine core ids for granted slots (round-robin over the machine's cores)."""
        return tuple(sorted({self.physical[s % len(self.physical)] for s in slots}))

    def run(self, action_id: str, sandbox_id: str, command: dict[str, Any], cores: int,
            queued_at: float | None = None) -> dict[str, Any]:
        """Run one action with ``cores`` cores of this node; the result as a dict."""
        queued_at = time.time() if queued_at is None else queued_at
        cmd = Command.model_validate(command)
        slots = self.allocator.take(cores, self.core_wait_s)
        try:
            result = self.sandboxes.run(sandbox_id, cmd, self.pin(slots), queued_at, key=action_id)
        finally:
            self.allocator.give(slots)
        return {"node": self.node_id, "slots": list(slots), **result.model_dump()}

    def cancel(self, action_id: str) -> bool:
        return self.sandboxes.kill(action_id)

    def open(self, sandbox_id: str) -> str:
        return str(self.sandboxes.open(sandbox_id))

    def close(self, sandbox_id: str) -> bool:
        return self.sandboxes.close(sandbox_id)

    def info(self) -> dict[str, Any]:
        import ray  # only inside an actor

        return {"node": self.node_id, "ray_node": ray.get_runtime_context().get_node_id(), "free_cores": self.allocator.free, "physical": list(self.physical),
                "sandboxes": self.sandboxes.ids(), "isolation": self.sandboxes.isolation, "pid": os.getpid()}

    def ping(self) -> str:
        return self.node_id
