"""The live runtime on Ray: node agents, GPU workers, API gates and the executor."""

from tangram.runtime.ray.agent import CoreAllocator, NodeAgent
from tangram.runtime.ray.cluster import Discovery, Pools, create_pools, discover, join, start_local
from tangram.runtime.ray.executor import RayExecutor, outcome
from tangram.runtime.ray.gates import ApiGate, QuotaGate, register_call, resolve_call
from tangram.runtime.ray.gpu import GpuWorker, ModelSpec

__all__ = [
    "ApiGate", "CoreAllocator", "Discovery", "GpuWorker", "ModelSpec", "NodeAgent", "Pools", "QuotaGate",
    "RayExecutor", "create_pools", "discover", "join", "outcome", "register_call", "resolve_call", "start_local",
]
