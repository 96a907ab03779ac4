"""Discrete-event simulation of a fleet under a policy, on a virtual clock."""

from tangram.runtime.sim.clock import VirtualClock
from tangram.runtime.sim.fifo import SharedFifoPolicy
from tangram.runtime.sim.loop import SimResult, simulate, tangram_policy
from tangram.runtime.sim.pools import CapacityError, SimulatedPools
from tangram.runtime.sim.workload import ActionSpec, Step, TrajectoryScript, Workload, action_id

__all__ = [
    "ActionSpec", "CapacityError", "SharedFifoPolicy", "SimResult", "SimulatedPools", "Step", "TrajectoryScript",
    "VirtualClock", "Workload", "action_id", "simulate", "tangram_policy",
]
