"""The topology graph: machines, GPUs, NVLink domains and switches.

Built once per instance with networkx. Solvers use only the derived facts:
which GPUs may be gang-started together (aligned blocks inside one NVLink
domain) and how long moving data between two machines takes.
"""

from __future__ import annotations

import networkx as nx

from tangram.model.instance import Instance

NVLINK_GBPS = 900.0 * 8  # edges GPU <-> domain when the instance does not say otherwise


class Topology:
    """Derived topology facts for one instance."""

    def __init__(self, instance: Instance) -> None:
        self.graph = build_graph(instance)
        self._instance = instance
        self._paths: dict[str, dict[str, tuple[float, float]]] = {}

    @classmethod
    def of(cls, instance: Instance) -> Topology:
        """The topology of an instance, shared by instances built on the very same
        resource tuples (the runtime snapshots one fleet every epoch)."""
        key = (id(instance.nodes), id(instance.gpus), id(instance.links))
        hit = _SHARED.get(key)
        if hit is not None and hit[0] is instance.nodes and hit[1] is instance.gpus and hit[2] is instance.links:
            return hit[3]
        topology = cls(instance)
        _SHARED[key] = (instance.nodes, instance.gpus, instance.links, topology)
        if len(_SHARED) > 16:
            _SHARED.pop(next(iter(_SHARED)))
        return topology

    def domains(self) -> dict[str, list[str]]:
        """NVLink domain id -> GPU ids in instance order."""
        out: dict[str, list[str]] = {}
        for g in self._instance.gpus:
            out.setdefault(g.domain_id, []).append(g.id)
        return out

    def gpu_blocks(self, size: int, same_domain: bool = True) -> list[tuple[str, ...]]:
        """Aligned groups of `size` GPUs of one type (buddy allocation).

        Within a domain, GPUs are split into consecutive aligned blocks of
        `size`, as multi-GPU replicas are placed in practice; a trailing
        partial block is dropped. Without the NVLink rule, blocks are formed over
        all GPUs of a type, in instance order.
        """
        groups: dict[tuple[str, str], list[str]] = {}
        for g in self._instance.gpus:
            key = (g.domain_id if same_domain else "*", g.type)
            groups.setdefault(key, []).append(g.id)
        blocks = []
        for ids in groups.values():
            blocks += [tuple(ids[i:i + size]) for i in range(0, len(ids) - size + 1, size)]
        return blocks

    def transfer_s(self, machine_a: str, machine_b: str, megabytes: float) -> float:
        """Seconds to move `megabytes` between two machines: path latency plus
        size over the bottleneck bandwidth of the lowest-latency path. Zero on the
        same machine, for no data, or where the instance declares no path."""
        if megabytes <= 0 or machine_a == machine_b:
            return 0.0
        path = self.paths_from(machine_b).get(machine_a)
        if path is None:
            return 0.0
        latency, bandwidth_gbps = path
        return latency + megabytes * 8e-3 / bandwidth_gbps

    def paths_from(self, source: str) -> dict[str, tuple[float, float]]:
        """Target -> (latency s, bottleneck Gbit/s) of the lowest-latency paths from
        `source`; one Dijkstra per source, cached (sources are the few GPU machines)."""
        cached = self._paths.get(source)
        if cached is None:
            cached = self._paths[source] = {}
            if source in self.graph:
                _, paths = nx.single_source_dijkstra(self.graph, source, weight="latency_s")
                for target, nodes in paths.items():
                    edges = [self.graph.edges[u, v] for u, v in zip(nodes, nodes[1:], strict=False)]
                    cached[target] = (sum(e["latency_s"] for e in edges),
                                      min((e["bandwidth_gbps"] for e in edges), default=float("inf")))
        return cached


_SHARED: dict[tuple[int, int, int], tuple] = {}


def build_graph(instance: Instance) -> nx.Graph:
    """Machines, GPUs and NVLink domains as nodes; declared links plus the implied
    GPU-domain and domain-machine edges."""
    g = nx.Graph()
    for n in instance.nodes:
        g.add_node(n.machine_id, kind="machine")
    for gpu in instance.gpus:
        g.add_node(gpu.machine, kind="machine")
        g.add_node(gpu.domain_id, kind="nvlink_domain")
        g.add_node(gpu.id, kind="gpu", type=gpu.type)
        g.add_edge(gpu.id, gpu.domain_id, type="nvlink", bandwidth_gbps=NVLINK_GBPS, latency_s=0.0)
        g.add_edge(gpu.domain_id, gpu.machine, type="pcie", bandwidth_gbps=512.0, latency_s=0.0)
    for link in instance.links:
        for end in (link.a, link.b):
            if end not in g:
                g.add_node(end, kind="switch")
        g.add_edge(link.a, link.b, type=link.type, bandwidth_gbps=link.bandwidth_gbps,
                   latency_s=link.latency_s)
    return g
