"""Scenarios: one RL step's rollout batch and its fleet, described in TOML, drawn from real traces.

A step is a batch of trajectories from several tasks. A trajectory alternates
LLM generation (think time) and actions and ends with a reward scoring:

* ``coding`` tasks open a sandbox (setup on CPU), then run code/test
  executions on elastic cores (Amdahl, parallel fraction drawn per action);
* ``search`` tasks make quota-limited API calls;
* every trajectory ends with a scoring by its task's reward/judge model on GPUs.

Sources (see docs/experiment.md): Terminal-Bench trial phases (setup_s,
agent_s, test_s of one sampled trial per trajectory), MBPP solution+test
execution times measured with real subprocesses (``mbpp_exec.csv``), Alibaba
GenAI model load latencies and request execution times, Azure LLM token counts,
Alibaba GPU node shapes. Every number not in a trace is a scenario parameter.
"""

from __future__ import annotations

import csv
import tomllib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field

from tangram.model.instance import ApiQuota, CpuNode, Frozen, Gpu, Link, Parallelism, RewardModel
from tangram.runtime.controller import Fleet
from tangram.runtime.sim.workload import ActionSpec, Step, TrajectoryScript, Workload
from tangram.workload import traces

Range = tuple[float, float]


@cache
def mbpp_exec_s() -> np.ndarray:
    """Measured wall time of each MBPP reference solution run with its tests, seconds (passing ones)."""
    with resources.files("tangram.data").joinpath("mbpp_exec.csv").open(newline="") as f:
        return np.array([float(r["exec_s"]) for r in csv.DictReader(f) if r["returncode"] == "0"])


# --------------------------------------------------------------------------- specification


class GpuMachines(Frozen):
    """``count`` identical GPU machines."""

    type: str = Field(description="GPU type, e.g. H100.")
    count: int = Field(default=1, ge=0, description="Machines.")
    gpus: int = Field(default=8, ge=1, le=16, description="GPUs per machine.")
    memory_gb: float = Field(default=80.0, gt=0, description="Memory per GPU, GiB.")
    speed: float = Field(default=1.0, gt=0, description="Throughput relative to the work unit.")
    nvlink_domains: int = Field(default=1, ge=1, description="NVLink domains per machine (GPUs split evenly).")


class GpuType(Frozen):
    """Memory and speed assumed for a GPU type named in the Alibaba node list."""

    memory_gb: float = Field(gt=0)
    speed: float = Field(default=1.0, gt=0)


class FleetSpec(Frozen):
    """CPU nodes, GPU machines and API quotas."""

    cpu_nodes: int = Field(default=8, ge=1)
    cores_per_node: int = Field(default=32, ge=1)
    node_memory_gb: float = Field(default=256.0, ge=0)
    alibaba_cpu_nodes: bool = Field(default=False, description="Draw CPU node shapes from the Alibaba node list.")
    gpu_machines: tuple[GpuMachines, ...] = ()
    alibaba_gpu_machines: int = Field(default=0, ge=0, description="Also draw this many GPU machines from "
                                                                    "the Alibaba node list (types in gpu_types).")
    gpu_types: dict[str, GpuType] = Field(default_factory=dict, description="Assumed memory/speed per Alibaba type.")
    quotas: tuple[ApiQuota, ...] = ()
    bandwidth_gbps: float = Field(default=100.0, gt=0, description="Machine-to-spine links, Gb/s.")


class ModelSpec(Frozen):
    """A reward/judge model and where its service and load times come from."""

    id: str
    memory_gb: float = Field(gt=0)
    parallelism: tuple[Parallelism, ...] = (Parallelism(gpus=1, speedup=1.0),)
    load: Literal["genai"] | float = Field(default="genai", description="'genai': a draw from the Alibaba "
                                                                       "base-model load latencies; or seconds.")
    service: Literal["azure-conv", "azure-code", "genai"] = "azure-conv"
    prefill_tokens_s: float = Field(default=8000.0, gt=0, description="Azure: context tokens/s on one GPU.")
    decode_tokens_s: float = Field(default=50.0, gt=0, description="Azure: generated tokens/s on one GPU.")
    genai_scale: float = Field(default=0.1, gt=0, description="GenAI: factor on the request execution time.")


class TaskSpec(Frozen):
    """One task type of the batch."""

    name: str
    kind: Literal["coding", "search"]
    share: float = Field(gt=0, description="Share of the batch's trajectories.")
    turns: tuple[int, int] = Field(default=(4, 12), description="Actions per trajectory, inclusive range.")
    think: Literal["terminal_bench"] | float = Field(
        default="terminal_bench", description="'terminal_bench': the trial's agent_s / turns; or mean seconds "
                                              "(log-normal, sigma 0.5).")
    exec: Literal["terminal_bench", "mbpp"] = Field(default="terminal_bench", description="Code execution times.")
    exec_fraction: Range = Field(default=(0.2, 1.0), description="terminal_bench: an intermediate run takes this "
                                                                 "share of the trial's test_s (the last, all).")
    setup: bool = Field(default=True, description="coding: first action is the sandbox setup (setup_s).")
    parallel_fraction: Range = Field(default=(0.5, 0.95), description="Amdahl p of code executions, uniform.")
    setup_parallel_fraction: float = Field(default=0.3, ge=0, le=1)
    cores: tuple[int, ...] = (1, 2, 4, 8)
    action_memory_gb: float = Field(default=0.5, ge=0)
    quota: str | None = Field(default=None, description="search: quota of the API calls.")
    api_s: float = Field(default=1.0, gt=0, description="search: median API call latency (log-normal, sigma 0.6).")
    reward_model: str | None = Field(default=None, description="Model that scores the trajectory.")


class Scenario(Frozen):
    """One RL step: the batch, its tasks, the reward models and the fleet."""

    name: str = "scenario"
    seed: int = Field(default=0, ge=0)
    batch: int = Field(default=128, ge=1, description="Trajectories per step.")
    arrival_s: float = Field(default=10.0, ge=0, description="Trajectories start uniformly over this window, s.")
    think_scale: float = Field(default=1.0, gt=0, description="Factor on every LLM generation time.")
    training_s: float = Field(default=60.0, ge=0, description="Fixed training time added to a step, s.")
    sandbox_memory_gb: float = Field(default=1.0, ge=0)
    gpu_core_equivalent: float = Field(default=8.0, gt=0, description="Cores one GPU counts as in fleet size.")
    fleet: FleetSpec = FleetSpec()
    models: tuple[ModelSpec, ...] = ()
    tasks: tuple[TaskSpec, ...] = Field(min_length=1)

    # ------------------------------------------------------------------ fleet

    def build_fleet(self, scale: float = 1.0) -> Fleet:
        """The fleet with CPU nodes and GPUs scaled by ``scale`` (rounded, at least one node).

        GPUs are kept machine by machine in declaration order; the last machine
        kept may be partial. Model load times are drawn with the scenario seed.
        """
        rng = np.random.default_rng(self.seed + 7919)
        f = self.fleet
        shapes = [n for n in traces.gpu_nodes() if n["gpus"] == 0]
        nodes = []
        for k in range(max(1, round(f.cpu_nodes * scale))):
            if f.alibaba_cpu_nodes:
                s = shapes[int(rng.integers(len(shapes)))]
                cores, mem = int(s["cores"]), float(s["memory_gb"])
            else:
                cores, mem = f.cores_per_node, f.node_memory_gb
            nodes.append(CpuNode(id=f"n{k}", cores=cores, memory_gb=mem, machine=f"cm{k}"))
        machines = [m for m in f.gpu_machines for _ in range(m.count)]
        if f.alibaba_gpu_machines:
            pool = [n for n in traces.gpu_nodes() if n["gpus"] and n["type"] in f.gpu_types]
            if not pool:
                raise ValueError("fleet.gpu_types: no Alibaba GPU node has a listed type")
            for k in rng.choice(len(pool), size=f.alibaba_gpu_machines, replace=True):
                n, t = pool[int(k)], f.gpu_types[str(pool[int(k)]["type"])]
                machines.append(GpuMachines(type=str(n["type"]), gpus=int(n["gpus"]), memory_gb=t.memory_gb,
                                            speed=t.speed))
        budget = round(sum(m.gpus for m in machines) * scale)
        gpus: list[Gpu] = []
        for k, m in enumerate(machines):
            take = min(m.gpus, budget - len(gpus))
            per_domain = max(1, m.gpus // m.nvlink_domains)
            gpus += [Gpu(id=f"g{k}.{j}", type=m.type, memory_gb=m.memory_gb, machine=f"gm{k}", speed=m.speed,
                         nvlink_domain=f"gm{k}/nv{j // per_domain}") for j in range(take)]
        used = sorted({g.machine for g in gpus} | {n.machine_id for n in nodes})
        links = tuple(Link(a=m, b="spine", bandwidth_gbps=f.bandwidth_gbps, latency_s=5e-5) for m in used)
        models = []
        for m in self.models:
            load = float(rng.choice(traces.genai_load_s("base_model"))) if m.load == "genai" else float(m.load)
            models.append(RewardModel(id=m.id, memory_gb=m.memory_gb, load_s=load, parallelism=m.parallelism))
        return Fleet(nodes=tuple(nodes), gpus=tuple(gpus), quotas=f.quotas, links=links, models=tuple(models))

    def fleet_units(self, fleet: Fleet) -> float:
        """Size of a fleet: cores + gpu_core_equivalent · GPUs."""
        return sum(n.cores for n in fleet.nodes) + self.gpu_core_equivalent * len(fleet.gpus)

    # ------------------------------------------------------------------ workload

    def workload(self, seed: int | None = None) -> Workload:
        """The step's trajectories, deterministic in ``seed`` (the scenario's seed by default)."""
        seed = self.seed if seed is None else seed
        rng = np.random.default_rng(seed)
        models = {m.id: m for m in self.models}
        counts = _apportion([t.share for t in self.tasks], self.batch)
        trajs = []
        for task, n in zip(self.tasks, counts, strict=True):
            if task.reward_model is not None and task.reward_model not in models:
                raise ValueError(f"tasks[{task.name}].reward_model: unknown model {task.reward_model!r}")
            for j in range(n):
                steps = _trajectory(task, models.get(task.reward_model or ""), self.think_scale, rng)
                trajs.append(TrajectoryScript(id=f"{task.name}-{j}", task=task.name,
                                              start_s=float(rng.uniform(0, self.arrival_s)), steps=steps,
                                              sandbox_memory_gb=self.sandbox_memory_gb if task.kind == "coding"
                                              else 0.0))
        trajs.sort(key=lambda t: (t.start_s, t.id))
        return Workload(tuple(trajs), name=f"{self.name}-s{seed}")


def _apportion(shares: list[float], total: int) -> list[int]:
    """Largest-remainder split of ``total`` in proportion to ``shares``."""
    raw = np.array(shares) / sum(shares) * total
    out = np.floor(raw).astype(int)
    for k in np.argsort(-(raw - out), kind="stable")[: total - out.sum()]:
        out[k] += 1
    return [int(x) for x in out]


def _lognormal(rng: np.random.Generator, median: float, sigma: float) -> float:
    return float(median * np.exp(sigma * rng.standard_normal()))


def _trajectory(task: TaskSpec, model: ModelSpec | None, think_scale: float,
                rng: np.random.Generator) -> tuple[Step, ...]:
    """One trajectory's steps: optional setup, ``turns`` think-then-act, the reward scoring."""
    tb = traces.terminal_bench()
    trial = int(rng.integers(len(tb["test_s"])))  # one real trial's phases, kept together
    turns = int(rng.integers(task.turns[0], task.turns[1] + 1))
    if task.think == "terminal_bench":
        think_mean = float(tb["agent_s"][trial]) / turns
    else:
        think_mean = float(task.think)
    steps: list[Step] = []

    def think() -> float:
        spread = rng.uniform(0.5, 1.5) if task.think == "terminal_bench" else np.exp(0.5 * rng.standard_normal())
        return float(think_mean * spread * think_scale)

    def cpu(true_s: float, estimate_s: float, p: float, tool: str) -> ActionSpec:
        return ActionSpec("cpu", true_s=max(true_s, 1e-3), estimate_s=max(estimate_s, 1e-3), tool=tool,
                          parallel_fraction=p, cores=task.cores, memory_gb=task.action_memory_gb)

    if task.kind == "coding":
        if task.setup:
            steps.append(Step(0.0, cpu(float(tb["setup_s"][trial]), float(np.median(tb["setup_s"])),
                                       task.setup_parallel_fraction, "setup")))
        for k in range(turns):
            p = float(rng.uniform(*task.parallel_fraction))
            if task.exec == "mbpp":
                runs = mbpp_exec_s()
                true, est = float(rng.choice(runs)), float(np.median(runs))
            else:
                frac = 1.0 if k == turns - 1 else float(rng.uniform(*task.exec_fraction))
                true = float(tb["test_s"][trial]) * frac
                est = float(np.median(tb["test_s"])) * (1.0 if k == turns - 1 else float(np.mean(task.exec_fraction)))
            steps.append(Step(think(), cpu(true, est, p, "test" if k == turns - 1 else "exec")))
    else:
        if task.quota is None:
            raise ValueError(f"tasks[{task.name}].quota: a search task names the quota of its calls")
        for _ in range(turns):
            steps.append(Step(think(), ActionSpec("api", true_s=_lognormal(rng, task.api_s, 0.6),
                                                  estimate_s=task.api_s, tool="search", quota=task.quota)))
    if model is not None:
        true, est = _scoring_s(model, rng)
        steps.append(Step(think(), ActionSpec("gpu", true_s=true, estimate_s=est, tool="score", model=model.id)))
    return tuple(steps)


def _scoring_s(m: ModelSpec, rng: np.random.Generator) -> tuple[float, float]:
    """(true, estimated) seconds of one scoring on one speed-1 GPU."""
    if m.service == "genai":
        runs = traces.genai_exec_s()
        return float(rng.choice(runs)) * m.genai_scale, float(np.median(runs)) * m.genai_scale
    tokens = traces.azure_tokens(m.service.removeprefix("azure-"))
    ctx, gen = tokens[int(rng.integers(len(tokens)))]
    med_ctx, med_gen = np.median(tokens, axis=0)
    return (float(ctx / m.prefill_tokens_s + gen / m.decode_tokens_s),
            float(med_ctx / m.prefill_tokens_s + med_gen / m.decode_tokens_s))


def load_scenario(path: str | Path) -> Scenario:
    """Read a scenario TOML file (top-level keys of :class:`Scenario`)."""
    return Scenario(**tomllib.loads(Path(path).read_text()))
