"""Scale-out on Ray Serve (``pip install 'specframe[ray]'``): replicas of specframe's server behind Ray's proxy.

Each replica runs what ``specframe serve`` runs, the FastAPI app with its engine thread and its slots (the app's
lifespan starts and stops them, under Ray as under uvicorn). Ray routes at most ``slots`` requests to a replica at
a time (``max_ongoing_requests``) and queues the rest itself, so a replica's own queue stays empty. Ray's HTTP
proxy serves the same OpenAI API:

    from ray import serve
    from specframe.serve.ray import application

    serve.run(application("config.toml", replicas=2), route_prefix="/")
"""

from __future__ import annotations

import os

from ray import serve
from ray.serve import Application

from specframe.config import load_config
from specframe.serve.server import build_app


@serve.ingress()
class SpecframeReplica:
    """One replica: the app of ``specframe serve`` for the config, built on the replica (which reads the config
    there and starts the engine thread with the app)."""

    def __init__(self, config_path: str):
        self.config_path = config_path

    def __serve_build_asgi_app__(self):
        return build_app(load_config(self.config_path))


def application(config_path: str | os.PathLike, replicas: int = 1, **deployment_options) -> Application:
    """A Ray Serve application of ``replicas`` specframe servers for the config (checked here, before any replica
    starts); ``deployment_options`` go to ``serve.deployment`` (ray_actor_options, ...)."""
    path = os.path.abspath(config_path)
    config = load_config(path)
    options = {"name": "specframe", "num_replicas": replicas, "max_ongoing_requests": config.server.slots,
               **deployment_options}
    return serve.deployment(**options)(SpecframeReplica).bind(path)
