"""``specframe serve``: the engine thread and the FastAPI app, on uvicorn.

Ctrl-C or SIGTERM ends the requests in flight at once (each gets its text so far and a finish reason), then the
engine thread saves what drafters persist and frees the models, and the process exits with the signal's code.
"""

from __future__ import annotations

import logging
import pathlib

import uvicorn
from fastapi import FastAPI

from specframe.config import Config
from specframe.errors import SpecframeError
from specframe.serve.app import create_app
from specframe.serve.metrics import Metrics
from specframe.serve.scheduler import Scheduler

log = logging.getLogger("specframe.serve")

GRACE_SECONDS = 10   # after the requests were ended, the longest wait for their connections to close


def model_name(config: Config) -> str:
    """The model's id in the API: [server] model_name, else the target's catalog name or file name."""
    return config.server.model_name or pathlib.Path(config.target.model).name.removesuffix(".gguf")


def build_app(config: Config, on_failure=lambda: None) -> FastAPI:
    """The app for ``config``: its engine thread starts with the app and stops with it (also under Ray Serve)."""
    settings = config.server
    name = model_name(config)
    scheduler = Scheduler(config, settings.slots, settings.queue, Metrics(name), on_failure)
    app = create_app(scheduler, name, settings.api_key)
    app.state.scheduler, app.state.model_name = scheduler, name
    return app


class Server(uvicorn.Server):
    """uvicorn serving specframe: a shutdown signal ends the requests in flight instead of waiting for them."""

    def __init__(self, config: Config, **uvicorn_options):
        """``uvicorn_options`` go to uvicorn.Config (limit_max_requests, ...)."""
        self.settings = config.server
        self.app = build_app(config, on_failure=self.stop)
        self.address: tuple[str, int] | None = None    # where it listens, once it does
        super().__init__(uvicorn.Config(self.app, host=self.settings.host, port=self.settings.port,
                                        log_config=None, access_log=False, timeout_graceful_shutdown=GRACE_SECONDS,
                                        **uvicorn_options))

    @property
    def scheduler(self) -> Scheduler:
        return self.app.state.scheduler

    def stop(self) -> None:
        """Stop serving (from any thread), ending the requests in flight."""
        self.scheduler.shutdown()
        self.should_exit = True

    def handle_exit(self, sig, frame) -> None:
        self.scheduler.shutdown()
        super().handle_exit(sig, frame)

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        # Said once connections are accepted: a bound socket refuses them until uvicorn listens on it.
        host, port = self.address or (self.config.host, self.config.port)
        log.info("listening on http://%s:%d (%d slots; OpenAI API under /v1)", host, port, self.settings.slots)

    def serve_forever(self) -> None:
        """Listen until stopped; raise the reason when the engine failed (or could not save at the end)."""
        socket = self.config.bind_socket()
        self.address = socket.getsockname()[:2]
        try:
            self.run(sockets=[socket])
        finally:
            if self.scheduler.failure:
                raise SpecframeError(self.scheduler.failure)


def serve(config: Config) -> None:
    """Serve ``config`` until stopped."""
    Server(config).serve_forever()
