"""Ray cluster: start an embedded one or join one, discover the fleet, create the pools.

Embedded (the default), Ray starts with the fleet's logical resources: its CPUs
and a custom ``tangram_gpu`` resource with one unit per declared GPU, so a
machine without GPUs still runs GPU pools. Joined (an address), the nodes,
cores, GPUs (real ``GPU`` or logical ``tangram_gpu``), GPU types and labels are
discovered into a :class:`~tangram.runtime.controller.Fleet`.

Node labels read by discovery: ``tangram.node`` (the node id), ``tangram.gpu_type``,
``tangram.gpu_memory_gb`` and ``tangram.nvlink`` (NVLink domain of its GPUs).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tangram.model.instance import CpuNode, Gpu
from tangram.runtime.controller import Fleet
from tangram.runtime.ray.agent import NodeAgent
from tangram.runtime.ray.gates import ApiGate
from tangram.runtime.ray.gpu import GpuWorker
from tangram.runtime.sandbox import Limits

log = logging.getLogger(__name__)

GPU_RESOURCE = "tangram_gpu"
NODE_LABEL, GPU_TYPE_LABEL, GPU_MEMORY_LABEL, NVLINK_LABEL = (
    "tangram.node", "tangram.gpu_type", "tangram.gpu_memory_gb", "tangram.nvlink")


def start_local(fleet: Fleet | None = None, num_cpus: int | None = None, **init: Any) -> None:
    """Start an embedded Ray instance with the fleet's logical GPUs (no-op if Ray is up)."""
    if ray.is_initialized():
        return
    gpus = len(fleet.gpus) if fleet is not None else 0
    ray.init(num_cpus=num_cpus or max(2, os.cpu_count() or 2), resources={GPU_RESOURCE: gpus} if gpus else None,
             include_dashboard=False, log_to_driver=False, **init)


def join(address: str, **init: Any) -> None:
    """Connect to an existing Ray cluster."""
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False, **init)


@dataclass(frozen=True)
class Discovery:
    """The fleet found in a Ray cluster, and where its machines are."""

    fleet: Fleet
    ray_nodes: dict[str, str] = field(default_factory=dict)  # machine id -> Ray NodeID


def discover(default_gpu_memory_gb: float = 80.0, nodes: list[dict[str, Any]] | None = None) -> Discovery:
    """Nodes, cores, GPUs and GPU types of the cluster (``ray.nodes()`` when ``nodes`` is None)."""
    cpu_nodes, gpus, where = [], [], {}
    for n in sorted(nodes if nodes is not None else ray.nodes(), key=lambda n: n["NodeID"]):
        if not n.get("Alive"):
            continue
        res, labels = n.get("Resources", {}), n.get("Labels", {}) or {}
        node_id = labels.get(NODE_LABEL) or f"node-{n['NodeID'][:8]}"
        where[node_id] = n["NodeID"]
        cores = int(res.get("CPU", 0))
        if cores:
            cpu_nodes.append(CpuNode(id=node_id, cores=cores, memory_gb=round(res.get("memory", 0) / 2**30, 3)))
        count = int(res.get("GPU", 0) or res.get(GPU_RESOURCE, 0))
        kind = labels.get(GPU_TYPE_LABEL) or next(
            (k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")), "GPU")
        memory = float(labels.get(GPU_MEMORY_LABEL, default_gpu_memory_gb))
        gpus += [Gpu(id=f"{node_id}/gpu{k}", type=kind, memory_gb=memory, machine=node_id,
                     nvlink_domain=labels.get(NVLINK_LABEL)) for k in range(count)]
    return Discovery(Fleet(nodes=tuple(cpu_nodes), gpus=tuple(gpus)), where)


@dataclass
class Pools:
    """Actor handles by fleet id: node agents, GPU workers, API gates."""

    agents: dict[str, Any] = field(default_factory=dict)
    gpus: dict[str, Any] = field(default_factory=dict)
    gates: dict[str, Any] = field(default_factory=dict)

    def shutdown(self) -> None:
        for handle in (*self.agents.values(), *self.gpus.values(), *self.gates.values()):
            ray.kill(handle)


def create_pools(fleet: Fleet, ray_nodes: Mapping[str, str] | None = None, limits: Limits | None = None,
                 root: str | None = None, isolation: str = "auto", max_restarts: int = 0) -> Pools:
    """One agent per node, one worker per GPU, one gate per quota, as long-lived actors.

    Agents and workers are pinned to their machine's Ray node where ``ray_nodes``
    knows it; GPU workers take one unit of ``GPU`` (real) or ``tangram_gpu``
    (logical), whichever the cluster has.
    """
    ray_nodes = ray_nodes or {}

    def on(machine: str) -> dict[str, Any]:
        node = ray_nodes.get(machine)
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)} if node else {}

    pools = Pools()
    agent_cls, gpu_cls, gate_cls = ray.remote(NodeAgent), ray.remote(GpuWorker), ray.remote(ApiGate)
    for n in fleet.nodes:
        pools.agents[n.id] = agent_cls.options(
            num_cpus=0, max_concurrency=n.cores + 16, max_restarts=max_restarts, **on(n.machine_id),
        ).remote(n.id, n.cores, None, root, limits, isolation)
    have = ray.cluster_resources()
    demand = ({"num_gpus": 1} if have.get("GPU") else {"resources": {GPU_RESOURCE: 1}} if have.get(GPU_RESOURCE)
              else {})
    if fleet.gpus and not demand:
        log.warning("cluster: no GPU or %s resource; GPU workers run unpinned", GPU_RESOURCE)
    for g in fleet.gpus:
        pools.gpus[g.id] = gpu_cls.options(num_cpus=0, max_concurrency=4, max_restarts=max_restarts,
                                           **demand, **on(g.machine)).remote(g.id, g.memory_gb)
    for q in fleet.quotas:
        pools.gates[q.id] = gate_cls.options(num_cpus=0, max_concurrency=q.concurrency + 64,
                                             max_restarts=max_restarts).remote(q)
    ray.get([h.ping.remote() for h in pools.agents.values()])  # agents are up before the first launch
    return pools
