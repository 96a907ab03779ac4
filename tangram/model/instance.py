"""The problem data of one scheduling epoch (or one offline instance).

Everything is keyed by readable ids, times are in seconds and memory in GiB.
Models are frozen and reject unknown fields; cross-references are checked once,
in :meth:`Instance._check_references`, with messages that name the rule and the
offending id. Solvers never see this form: they see :mod:`tangram.model.compiled`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = 1

Id = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:@/+-]+$")]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
GiB = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Frozen(BaseModel):
    """Base of every data model: immutable, strict about unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


# --------------------------------------------------------------------------- resources


class CpuNode(Frozen):
    """A machine's CPU side: cores granted per action, memory reserved by sandboxes."""

    id: Id
    cores: int = Field(ge=1, description="Schedulable cores.")
    memory_gb: GiB = Field(default=0.0, description="Memory for actions and sandboxes, GiB.")
    machine: Id | None = Field(default=None, description="Topology machine; defaults to the node id.")

    @property
    def machine_id(self) -> str:
        return self.machine or self.id


class Gpu(Frozen):
    """One GPU. Runs at most one action at a time; hosts reward models in its memory."""

    id: Id
    type: Id = Field(description="GPU type, e.g. H100, A100, L40.")
    memory_gb: GiB = Field(gt=0, description="GPU memory, GiB.")
    machine: Id = Field(description="Topology machine the GPU is installed in.")
    nvlink_domain: Id | None = Field(
        default=None, description="NVLink domain; defaults to one domain per machine."
    )
    speed: float = Field(default=1.0, gt=0, description="Throughput relative to the work unit.")

    @property
    def domain_id(self) -> str:
        return self.nvlink_domain or f"{self.machine}/nvlink"


class ApiQuota(Frozen):
    """An external service: at most `concurrency` calls in flight and at most
    `calls_per_window` call starts in any window of `window_s` seconds."""

    id: Id
    concurrency: int = Field(ge=1, description="Calls in flight at once.")
    calls_per_window: int | None = Field(default=None, ge=1, description="Rate cap, calls.")
    window_s: PositiveSeconds = Field(default=1.0, description="Rate window, seconds.")


class Renewable(Frozen):
    """A capacity-only resource (e.g. a PSPLIB renewable resource)."""

    id: Id
    capacity: int = Field(ge=0, description="Units available at every instant.")


class Link(Frozen):
    """An edge of the topology graph between two machines, switches or domains."""

    a: Id
    b: Id
    type: Literal["nvlink", "pcie", "ethernet", "infiniband", "loopback"] = "ethernet"
    bandwidth_gbps: float = Field(gt=0, description="Gigabits per second.")
    latency_s: Seconds = Field(default=0.0, description="One-way latency, seconds.")


# --------------------------------------------------------------------------- reward models


class Parallelism(Frozen):
    """One allowed degree of a reward model: `gpus` GPUs run it `speedup` times faster."""

    gpus: Literal[1, 2, 4, 8]
    speedup: float = Field(gt=0, description="Throughput relative to one GPU.")


class RewardModel(Frozen):
    """A reward / judge model hosted on GPUs."""

    id: Id
    memory_gb: GiB = Field(gt=0, description="Memory taken on every GPU that hosts it, GiB.")
    load_s: Seconds = Field(description="Time to restore it from host memory onto a GPU, s.")
    parallelism: tuple[Parallelism, ...] = Field(
        default=(Parallelism(gpus=1, speedup=1.0),), min_length=1
    )
    gpu_types: tuple[Id, ...] = Field(default=(), description="Allowed GPU types; empty: any.")


# --------------------------------------------------------------------------- actions


class Mode(Frozen):
    """A resource request plus the duration it yields."""

    duration_s: Seconds = Field(description="Execution time in this mode, seconds.")
    cores: int = Field(default=0, ge=0, description="Cores on one CPU node.")
    memory_gb: GiB = Field(default=0.0, description="Memory on that node while running, GiB.")
    gpus: int = Field(default=0, ge=0, le=8, description="GPUs, gang-started in one domain.")
    gpu_type: Id | None = Field(default=None, description="Required GPU type; None: any.")
    quota: Id | None = Field(default=None, description="API quota consumed (one call).")
    renewable: dict[Id, int] = Field(default_factory=dict, description="Units per resource.")

    @model_validator(mode="after")
    def _requests_something(self) -> Mode:
        if any(v < 0 for v in self.renewable.values()):
            raise ValueError("renewable: demands must be >= 0")
        return self


class Elastic(Frozen):
    """Amdahl speedup model: d(c) = base_s * ((1 - p) + p / c) for c in `cores`."""

    base_s: Seconds = Field(description="Duration on one core, seconds.")
    parallel_fraction: float = Field(ge=0, le=1, description="Amdahl's p.")
    cores: tuple[int, ...] = Field(default=(1, 2, 4, 8), min_length=1)
    memory_gb: GiB = Field(default=0.0, description="Memory while running, GiB.")

    @model_validator(mode="after")
    def _positive_cores(self) -> Elastic:
        if any(c < 1 for c in self.cores) or len(set(self.cores)) != len(self.cores):
            raise ValueError("cores: must be distinct integers >= 1")
        return self

    def duration(self, cores: int) -> float:
        p = self.parallel_fraction
        return self.base_s * ((1.0 - p) + p / cores)


class Lag(Frozen):
    """Precedence: this action starts at least `lag_s` after `action` ends."""

    action: Id
    lag_s: Seconds = 0.0


class Action(Frozen):
    """One unit of external work: a code execution, a reward scoring or an API call.

    Its modes come from exactly one of: explicit ``modes``; an ``elastic`` speedup
    model (CPU); ``work_s`` on the GPUs of ``model`` (one mode per parallel degree).
    """

    id: Id
    kind: Literal["cpu", "gpu", "api", "generic"]
    trajectory: Id | None = None
    task: Id = Field(default="default", description="Tenant: an RL job or a task type.")
    release_s: Seconds = Field(default=0.0, description="Arrival time, seconds.")
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    deadline_s: Seconds | None = Field(default=None, description="Latest completion, seconds.")
    modes: tuple[Mode, ...] = ()
    elastic: Elastic | None = None
    model: Id | None = Field(default=None, description="Reward model (GPU actions).")
    work_s: Seconds | None = Field(default=None, description="Seconds on one speed-1 GPU.")
    quota: Id | None = Field(default=None, description="Quota of an API action's modes.")
    sandbox: Id | None = Field(default=None, description="Sandbox it must run in (affinity).")
    input_mb: float = Field(default=0.0, ge=0, description="Data moved from its sandbox, MB.")
    after: tuple[Lag, ...] = ()

    @model_validator(mode="after")
    def _one_mode_source(self) -> Action:
        sources = [bool(self.modes), self.elastic is not None, self.work_s is not None]
        if sum(sources) != 1:
            raise ValueError("modes: give exactly one of modes, elastic, work_s")
        if self.work_s is not None and self.model is None:
            raise ValueError("model: required with work_s")
        if self.kind == "gpu" and self.model is None:
            raise ValueError("model: a gpu action names the reward model it needs")
        if self.elastic is not None and self.kind != "cpu":
            raise ValueError("elastic: only cpu actions have an elastic speedup model")
        return self


class Running(Frozen):
    """An action already executing: fixed occupancy until its estimated end."""

    action: Id
    task: Id = "default"
    end_s: Seconds = Field(description="Estimated end, seconds.")
    node: Id | None = None
    cores: int = Field(default=0, ge=0)
    memory_gb: GiB = 0.0
    gpus: tuple[Id, ...] = ()
    model: Id | None = None
    quota: Id | None = None
    renewable: dict[Id, int] = Field(default_factory=dict)


class Sandbox(Frozen):
    """A trajectory's persistent working environment; its memory stays reserved."""

    id: Id
    node: Id
    memory_gb: GiB = 0.0


# --------------------------------------------------------------------------- objective


class Objective(Frozen):
    """Weights of the objective terms, all in seconds (or resource-seconds)."""

    weighted_act: float = Field(default=1.0, ge=0, description="Σ w·(end − release).")
    makespan: float = Field(default=0.0, ge=0, description="Latest end.")
    model_load: float = Field(default=0.0, ge=0, description="Σ load time of models loaded.")
    resource_seconds: float = Field(default=0.0, ge=0, description="Σ duration·held units.")
    fairness: float = Field(default=0.0, ge=0, description="Largest per-task mean slowdown.")
    gpu_core_equivalent: float = Field(
        default=8.0, gt=0, description="Cores one GPU counts as in resource_seconds."
    )

    @model_validator(mode="after")
    def _some_term(self) -> Objective:
        if not any((self.weighted_act, self.makespan, self.model_load,
                    self.resource_seconds, self.fairness)):
            raise ValueError("objective: at least one term needs a positive weight")
        return self


class Constraints(Frozen):
    """Switches for the optional constraint families (capacity always holds)."""

    memory: bool = Field(default=True, description="Node memory incl. sandboxes.")
    model_residency: bool = Field(default=True, description="GPU memory and load times.")
    nvlink_gang: bool = Field(default=True, description="Multi-GPU modes in one NVLink domain.")
    quota_rate: bool = Field(default=True, description="Calls per window.")
    affinity: bool = Field(default=True, description="CPU actions on their sandbox's node.")
    precedence: bool = True
    deadlines: bool = True


# --------------------------------------------------------------------------- instance


class Instance(Frozen):
    """Pending actions, the resources they may use and what already occupies them."""

    schema_version: Literal[1] = SCHEMA_VERSION
    name: str = "instance"
    now_s: Seconds = Field(default=0.0, description="Epoch start; nothing starts earlier.")
    nodes: tuple[CpuNode, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    quotas: tuple[ApiQuota, ...] = ()
    renewables: tuple[Renewable, ...] = ()
    links: tuple[Link, ...] = ()
    models: tuple[RewardModel, ...] = ()
    resident: dict[Id, tuple[Id, ...]] = Field(
        default_factory=dict, description="GPU id -> models resident at now_s."
    )
    sandboxes: tuple[Sandbox, ...] = ()
    actions: tuple[Action, ...] = ()
    running: tuple[Running, ...] = ()
    objective: Objective = Objective()
    constraints: Constraints = Constraints()
    metadata: dict[str, str | float | int | bool] = Field(
        default_factory=dict, description="Free-form provenance; e.g. best known objective."
    )

    @model_validator(mode="after")
    def _check_references(self) -> Instance:
        errors = list(_reference_errors(self))
        if errors:
            raise ValueError("; ".join(errors[:5]) + (f" (+{len(errors) - 5} more)" if len(errors) > 5 else ""))
        return self

    # Lookups used by compile, the checker and the runtime. Cheap dict builds.
    def index(self) -> InstanceIndex:
        return InstanceIndex(self)


class InstanceIndex:
    """Id -> object maps for one instance."""

    def __init__(self, inst: Instance) -> None:
        self.nodes = {n.id: n for n in inst.nodes}
        self.gpus = {g.id: g for g in inst.gpus}
        self.quotas = {q.id: q for q in inst.quotas}
        self.renewables = {r.id: r for r in inst.renewables}
        self.models = {m.id: m for m in inst.models}
        self.sandboxes = {s.id: s for s in inst.sandboxes}
        self.actions = {a.id: a for a in inst.actions}
        self.fastest_gpu: float | None = None  # filled on first use by the checker


def _duplicates(ids: list[str]) -> set[str]:
    seen: set[str] = set()
    return {i for i in ids if i in seen or seen.add(i)}  # type: ignore[func-returns-value]


def _reference_errors(inst: Instance):  # noqa: C901 - one flat list of rules reads best
    for field, items in (("nodes", inst.nodes), ("gpus", inst.gpus), ("quotas", inst.quotas),
                         ("renewables", inst.renewables), ("models", inst.models),
                         ("sandboxes", inst.sandboxes), ("actions", inst.actions)):
        for dup in sorted(_duplicates([x.id for x in items])):
            yield f"{field}: duplicate id {dup!r}"
    ix = inst.index()
    for dup in sorted(_duplicates([r.action for r in inst.running])):
        yield f"running: duplicate action {dup!r}"
    pending_running = set(ix.actions) & {r.action for r in inst.running}
    for a in sorted(pending_running):
        yield f"running: action {a!r} is both pending and running"

    for gpu, models in inst.resident.items():
        if gpu not in ix.gpus:
            yield f"resident: unknown gpu {gpu!r}"
            continue
        for m in models:
            if m not in ix.models:
                yield f"resident[{gpu}]: unknown model {m!r}"
        mem = sum(ix.models[m].memory_gb for m in models if m in ix.models)
        if inst.constraints.model_residency and mem > ix.gpus[gpu].memory_gb + 1e-9:
            yield f"resident[{gpu}]: models need {mem:g} GiB > gpu memory {ix.gpus[gpu].memory_gb:g}"
    for s in inst.sandboxes:
        if s.node not in ix.nodes:
            yield f"sandboxes[{s.id}].node: unknown node {s.node!r}"
    for m in inst.models:
        if not any(g.memory_gb >= m.memory_gb and (not m.gpu_types or g.type in m.gpu_types)
                   for g in inst.gpus):
            yield f"models[{m.id}]: no gpu of an allowed type has {m.memory_gb:g} GiB"

    for a in inst.actions:
        where = f"actions[{a.id}]"
        if a.deadline_s is not None and a.deadline_s < a.release_s:
            yield f"{where}.deadline_s: deadline {a.deadline_s:g} is before release {a.release_s:g}"
        if a.sandbox is not None and a.sandbox not in ix.sandboxes:
            yield f"{where}.sandbox: unknown sandbox {a.sandbox!r}"
        if a.model is not None and a.model not in ix.models:
            yield f"{where}.model: unknown model {a.model!r}"
        if a.quota is not None and a.quota not in ix.quotas:
            yield f"{where}.quota: unknown quota {a.quota!r}"
        if a.kind == "api" and not a.quota and not any(m.quota for m in a.modes):
            yield f"{where}.quota: an api action names the quota it consumes"
        for lag in a.after:
            if lag.action not in ix.actions and lag.action not in {r.action for r in inst.running}:
                yield f"{where}.after: unknown action {lag.action!r}"
        for k, m in enumerate(a.modes):
            if m.quota is not None and m.quota not in ix.quotas:
                yield f"{where}.modes[{k}].quota: unknown quota {m.quota!r}"
            for r in m.renewable:
                if r not in ix.renewables:
                    yield f"{where}.modes[{k}].renewable: unknown resource {r!r}"
            if m.gpus and a.kind != "gpu":
                yield f"{where}.modes[{k}].gpus: only gpu actions request gpus"
            if m.cores and a.kind not in ("cpu", "generic"):
                yield f"{where}.modes[{k}].cores: only cpu actions request cores"
            if a.kind == "gpu" and m.gpus == 0:
                yield f"{where}.modes[{k}].gpus: a gpu mode requests at least one gpu"
            if a.kind == "cpu" and m.cores == 0:
                yield f"{where}.modes[{k}].cores: a cpu mode requests at least one core"
        yield from _capacity_errors(inst, ix, a)
    yield from _cycle_errors(inst)

    for r in inst.running:
        where = f"running[{r.action}]"
        if r.node is not None and r.node not in ix.nodes:
            yield f"{where}.node: unknown node {r.node!r}"
        for g in r.gpus:
            if g not in ix.gpus:
                yield f"{where}.gpus: unknown gpu {g!r}"
        if r.model is not None and r.model not in ix.models:
            yield f"{where}.model: unknown model {r.model!r}"
        if r.quota is not None and r.quota not in ix.quotas:
            yield f"{where}.quota: unknown quota {r.quota!r}"
        for res in r.renewable:
            if res not in ix.renewables:
                yield f"{where}.renewable: unknown resource {res!r}"


def _capacity_errors(inst: Instance, ix: InstanceIndex, a: Action):
    """Some mode of the action must fit the resources that exist at all."""
    where = f"actions[{a.id}]"
    if a.elastic is not None:
        modes = [Mode(duration_s=0, cores=c, memory_gb=a.elastic.memory_gb) for c in a.elastic.cores]
    elif a.work_s is not None:
        model = ix.models.get(a.model or "")
        modes = [Mode(duration_s=0, gpus=p.gpus) for p in model.parallelism] if model else []
    else:
        modes = list(a.modes)
    nodes = list(inst.nodes)
    if a.sandbox in ix.sandboxes and inst.constraints.affinity:
        nodes = [ix.nodes[ix.sandboxes[a.sandbox].node]] if ix.sandboxes[a.sandbox].node in ix.nodes else []
    reasons = []
    for m in modes:
        if m.cores and not any(n.cores >= m.cores and (not inst.constraints.memory or not n.memory_gb
                                                       or n.memory_gb >= m.memory_gb) for n in nodes):
            reasons.append(f"{m.cores} cores / {m.memory_gb:g} GiB fit no eligible node")
        elif m.gpus:
            model = ix.models.get(a.model or "")
            need = model.memory_gb if model else 0.0
            ok = [g for g in inst.gpus if g.memory_gb >= need and (not m.gpu_type or g.type == m.gpu_type)
                  and (model is None or not model.gpu_types or g.type in model.gpu_types)]
            if len(ok) < m.gpus:
                reasons.append(f"{m.gpus} gpus of an allowed type with {need:g} GiB do not exist")
            else:
                return
        elif any(u > ix.renewables[r].capacity for r, u in m.renewable.items() if r in ix.renewables):
            reasons.append("renewable demand exceeds capacity")
        else:
            return
    if reasons:
        yield f"{where}.modes: infeasible capacity, no mode fits ({reasons[0]})"


def _cycle_errors(inst: Instance):
    """Precedence among pending actions must be acyclic (iterative DFS)."""
    succ: dict[str, list[str]] = {a.id: [] for a in inst.actions}
    for a in inst.actions:
        for lag in a.after:
            if lag.action in succ:
                succ[lag.action].append(a.id)
    state: dict[str, int] = {}
    for root in succ:
        if root in state:
            continue
        stack = [(root, iter(succ[root]))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                yield f"actions[{nxt}].after: precedence cycle through {node!r}"
                return
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(succ[nxt])))
