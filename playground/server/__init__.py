"""The HTTP layer: FastAPI routers over the provider registry, never the engine itself."""

from playground.server.app import create_app

__all__ = ["create_app"]
