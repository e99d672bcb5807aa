"""moesim's simulator: specs, catalog, accounting, and (from the engine) step-time predictions.

``import sim`` never imports torch.
"""

from sim.errors import CatalogError, ConfigError, MoesimError, PlanError
from sim.specs import ClusterSpec, FabricSpec, GPUSpec, ModelSpec, ParallelPlan

__all__ = [
    "MoesimError",
    "ConfigError",
    "CatalogError",
    "PlanError",
    "ModelSpec",
    "GPUSpec",
    "FabricSpec",
    "ClusterSpec",
    "ParallelPlan",
]
