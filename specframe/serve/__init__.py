"""``specframe serve``: an OpenAI-compatible server with slots and continuous batching.

app.py (the HTTP front end) -> scheduler.py (the engine thread: slots, steps) -> specframe.engine; protocol.py
(request and response shapes), metrics.py (Prometheus), server.py (uvicorn, signals), ray.py (Ray Serve).
"""
