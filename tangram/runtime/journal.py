"""The append-only runtime journal: one JSON object per line.

Every event has a ``type`` and a time ``t`` (seconds, the controller's clock).
Types written by the controller:

``accepted``      action (full model dump), payload, tool, prev — before acknowledging
``dispatched``    action, assignment (ids, seconds), loads (GPUs that load the model first), load_s
``completed``     action, status, duration_s, load_s, signals
``cancelled``     action
``load``/``evict`` gpu, model
``sandbox_open``/``sandbox_close`` trajectory, node, memory_gb
``solve``         solver, status, runtime_s, pending, window, dispatched, attempts

:func:`unfinished` replays a journal into the actions accepted but never
finished, so a restarted service resumes with nothing lost.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tangram.model.instance import Action


class Journal:
    """Append events to a JSONL file and/or keep them in memory.

    Parameters
    ----------
    path
        File appended to (created with its parents); None writes no file.
    keep
        Also keep the events in :attr:`events` (the simulator reads them back).
    durable
        ``fsync`` after every event (the live service; slower).
    """

    def __init__(self, path: str | Path | None = None, keep: bool = False, durable: bool = False) -> None:
        self.path = Path(path) if path is not None else None
        self.events: list[dict[str, Any]] | None = [] if keep else None
        self.durable = durable
        self._file = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")

    def append(self, type: str, t: float, **fields: Any) -> None:
        """Record one event; it is on disk (flushed) when this returns."""
        event = {"type": type, "t": t, **fields}
        if self.events is not None:
            self.events.append(event)
        if self._file is not None:
            self._file.write(json.dumps(event, separators=(",", ":"), default=_jsonable) + "\n")
            self._file.flush()
            if self.durable:
                os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @staticmethod
    def read(path: str | Path) -> Iterator[dict[str, Any]]:
        """The events of a journal file, in order; a torn last line is skipped."""
        with Path(path).open(encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    return  # the process died mid-write: everything before is intact


def _jsonable(x: Any) -> Any:
    if hasattr(x, "model_dump"):
        return x.model_dump(mode="json")
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    return str(x)


def unfinished(events: Iterable[dict[str, Any]]) -> list[tuple[Action, Any, str | None]]:
    """(action, payload, tool) of every accepted action not completed nor cancelled, in order."""
    open_: dict[str, tuple[Action, Any, str | None]] = {}
    for e in events:
        if e["type"] == "accepted":
            a = Action.model_validate(e["action"])
            open_[a.id] = (a, e.get("payload"), e.get("tool"))
        elif e["type"] in ("completed", "cancelled"):
            open_.pop(e["action"], None)
    return list(open_.values())
