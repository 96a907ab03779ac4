"""Import PSPLIB single-mode RCPSP instances (the ``.sm`` files of j30, j60, j90, j120).

PSPLIB (Kolisch & Sprecher, 1996) describes a project of jobs with one mode each:
a duration in periods, a demand on each renewable resource and a list of
successors; the first and last jobs are a dummy source and sink of duration 0.
The mapping into an :class:`~tangram.model.instance.Instance`:

- one period is one second;
- each renewable resource ``R k`` becomes ``Renewable(id="Rk", capacity=...)``;
- each job ``n`` becomes ``Action(id="jn", kind="generic")`` with one mode (its
  duration and non-zero demands) and a lag-0 ``after`` entry per predecessor;
- the objective is the makespan alone.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from tangram.io.files import InputError, describe
from tangram.model.instance import Action, Instance, Lag, Mode, Objective, Renewable

PRECEDENCE = "PRECEDENCE RELATIONS:"
REQUESTS = "REQUESTS/DURATIONS:"
AVAILABILITIES = "RESOURCEAVAILABILITIES:"


def read_psplib(path: str | Path) -> Instance:
    """Read a PSPLIB ``.sm`` file as an instance named after the file.

    Raises
    ------
    OSError
        The file cannot be read.
    InputError
        (a ``ValueError``) Malformed content; the message names the file, the line and the rule.
    """
    path = Path(path)
    return parse_psplib(path.read_text(), source=path.name)


def parse_psplib(text: str, source: str = "<psplib>") -> Instance:
    """Parse the text of a PSPLIB ``.sm`` file; ``source`` names it in errors and metadata."""
    p = _Parser(text.splitlines(), source)
    num_jobs = p.header_int("jobs (incl. supersource/sink )")
    num_resources = p.header_int("- renewable")
    for other in ("- nonrenewable", "- doubly constrained"):
        if p.header_int(other, required=False):
            p.fail(p.find(other), f"{other.lstrip('- ')} resources are not part of the single-mode RCPSP")
    horizon = p.header_int("horizon", required=False)

    successors = p.precedence(num_jobs)
    requests = p.requests(num_jobs, num_resources)
    capacity = p.availabilities(num_resources)

    res_ids = [f"R{k + 1}" for k in range(num_resources)]
    metadata: dict[str, str | int] = {"source": source, "format": "psplib-sm", "jobs": num_jobs}
    if horizon is not None:
        metadata["horizon_s"] = horizon
    preds: dict[int, list[int]] = {j: [] for j in range(1, num_jobs + 1)}
    for j, succ in successors.items():
        for s in succ:
            preds[s].append(j)
    try:
        actions = [
            Action(
                id=f"j{j}",
                kind="generic",
                modes=(Mode(duration_s=d, renewable={r: u for r, u in zip(res_ids, demand, strict=True) if u}),),
                after=tuple(Lag(action=f"j{i}") for i in preds[j]),
            )
            for j, (d, demand) in requests.items()
        ]
        return Instance(
            name=Path(source).stem,
            renewables=tuple(Renewable(id=r, capacity=c) for r, c in zip(res_ids, capacity, strict=True)),
            actions=tuple(actions),
            objective=Objective(weighted_act=0.0, makespan=1.0),
            metadata=metadata,
        )
    except ValidationError as exc:  # e.g. a demand above capacity, a precedence cycle
        raise InputError(f"{source}: {describe(exc)}") from None


class _Parser:
    """Line-oriented reading with errors that say file, line (1-based) and rule."""

    def __init__(self, lines: list[str], source: str) -> None:
        self.lines = lines
        self.source = source

    def fail(self, index: int | None, rule: str) -> None:
        where = f"{self.source}:{index + 1}" if index is not None else self.source
        raise InputError(f"{where}: {rule}")

    def find(self, prefix: str) -> int | None:
        return next((i for i, line in enumerate(self.lines) if line.strip().startswith(prefix)), None)

    def header_int(self, key: str, required: bool = True) -> int | None:
        """The first integer after the colon of the header line that starts with ``key``."""
        i = self.find(key)
        if i is None:
            if required:
                self.fail(None, f"missing header line {key!r}")
            return None
        value = self.lines[i].split(":", 1)[-1].split()
        if not value or not value[0].isdigit():
            self.fail(i, f"{key!r}: expected a non-negative integer after ':'")
        return int(value[0])

    def rows(self, title: str) -> list[tuple[int, list[int]]]:
        """(line index, integers) of each data row of a section, up to its closing '****' line.

        Rows that do not start with a digit (column titles, '----' rules) are skipped.
        """
        start = self.find(title)
        if start is None:
            self.fail(None, f"missing section {title!r}")
        out = []
        for i in range(start + 1, len(self.lines)):
            line = self.lines[i].strip()
            if line.startswith("*"):
                break
            if not line or not line[0].isdigit():
                continue
            try:
                out.append((i, [int(x) for x in line.split()]))
            except ValueError:
                self.fail(i, f"{title} rows hold integers only, got {line!r}")
        return out

    def _check_jobs(self, title: str, rows: list[tuple[int, list[int]]], num_jobs: int) -> None:
        if len(rows) != num_jobs:
            self.fail(rows[-1][0] if rows else self.find(title),
                      f"{title} lists {len(rows)} jobs, the header says {num_jobs}")
        for expected, (i, row) in enumerate(rows, start=1):
            if row[0] != expected:
                self.fail(i, f"{title} job numbers run 1..{num_jobs} in order; expected {expected}, got {row[0]}")

    def precedence(self, num_jobs: int) -> dict[int, list[int]]:
        rows = self.rows(PRECEDENCE)
        self._check_jobs(PRECEDENCE, rows, num_jobs)
        out = {}
        for i, row in rows:
            if len(row) < 3:
                self.fail(i, f"{PRECEDENCE} a row is: job, #modes, #successors, successors...")
            job, modes, count, succ = row[0], row[1], row[2], row[3:]
            if modes != 1:
                self.fail(i, f"{PRECEDENCE} job {job} has {modes} modes; single-mode files have 1")
            if len(succ) != count:
                self.fail(i, f"{PRECEDENCE} job {job} announces {count} successors but lists {len(succ)}")
            bad = [s for s in succ if not 1 <= s <= num_jobs or s == job]
            if bad:
                self.fail(i, f"{PRECEDENCE} job {job} has successor {bad[0]} outside 1..{num_jobs} or itself")
            out[job] = succ
        return out

    def requests(self, num_jobs: int, num_resources: int) -> dict[int, tuple[int, list[int]]]:
        rows = self.rows(REQUESTS)
        self._check_jobs(REQUESTS, rows, num_jobs)
        out = {}
        for i, row in rows:
            if len(row) != 3 + num_resources:
                self.fail(i, f"{REQUESTS} a row is: job, mode, duration and {num_resources} demands; "
                             f"got {len(row)} numbers")
            if row[1] != 1:
                self.fail(i, f"{REQUESTS} job {row[0]} is in mode {row[1]}; single-mode files have mode 1")
            if any(x < 0 for x in row[2:]):
                self.fail(i, f"{REQUESTS} job {row[0]}: durations and demands must be >= 0")
            out[row[0]] = (row[2], row[3:])
        return out

    def availabilities(self, num_resources: int) -> list[int]:
        rows = self.rows(AVAILABILITIES)
        if len(rows) != 1 or len(rows[0][1]) != num_resources:
            self.fail(rows[0][0] if rows else self.find(AVAILABILITIES),
                      f"{AVAILABILITIES} expected one row of {num_resources} capacities")
        return rows[0][1]
