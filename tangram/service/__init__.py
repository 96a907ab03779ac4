"""The Tangram service: HTTP API, epoch-loop runner, journal recovery and metrics.

Submodules import Ray and FastAPI; import them explicitly (``tangram.service.server``,
``tangram.service.app``, ``tangram.service.runner``).
"""

from tangram.service.config import ServiceConfig, default_config

__all__ = ["ServiceConfig", "default_config"]
