"""Ray Serve: two replicas of the synthetic model's server behind Ray's HTTP proxy, on a local Ray instance that
the test starts and stops (skipped when ray is not installed: pip install 'specframe[ray]')."""

import pathlib
import random
import socket
import threading
import time

import httpx
import openai
import pytest

from specframe.engine import Engine

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

PROMPTS = ["the quick brown fox jumps over the lazy dog and the quick brown fox",
           "one two three four one two three four one two",
           "alpha beta gamma delta alpha beta gamma",
           "hello world, hello world, hello"]


def port_no_process_is_handed() -> int:
    """A free port between Ray's worker ports (10002-19999) and the kernel's ephemeral range: a port the kernel
    hands out (bind to 0) may be taken by one of the processes Ray starts before its proxy binds it."""
    first_ephemeral = int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in random.sample(range(20000, first_ephemeral), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port between 20000 and the ephemeral range")


def test_two_replicas_answer_the_openai_api_through_rays_proxy(write_config, target_path, monkeypatch):
    from specframe.serve.ray import application

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")          # no token written into the user's home

    config = write_config(f"""
        [target]
        model = "{target_path}"
        n_ctx = 512
        threads = 1
        [speculative]
        adaptive = false
        [generation]
        max_tokens = 32
        [server]
        slots = 2
        [[drafter]]
        type = "prompt-lookup"
        """)
    with Engine.from_config(config) as engine:
        plain = [engine.generate(p, speculative=False, temperature=0.0).text for p in PROMPTS]
    port = port_no_process_is_handed()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(application(config, replicas=2, ray_actor_options={"num_cpus": 0.5}), name="specframe",
                  route_prefix="/")
        replicas = serve.status().applications["specframe"].deployments["specframe"].replica_states
        assert replicas == {"RUNNING": 2}
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while (health := httpx.get(url + "/health")).status_code != 200:   # each replica's model is loaded
            assert time.monotonic() < deadline, health.text
            time.sleep(0.1)
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)
        assert [m.id for m in client.models.list().data] == ["target"]
        answers: dict[int, str] = {}

        def ask(i: int) -> None:           # twice as many requests at once as one replica has slots
            messages = [{"role": "user", "content": PROMPTS[i]}]
            answers[i] = client.chat.completions.create(model="target", messages=messages,
                                                        temperature=0).choices[0].message.content

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [answers.get(i) for i in range(len(PROMPTS))] == plain
        stream = client.chat.completions.create(model="target", messages=[{"role": "user", "content": PROMPTS[0]}],
                                                temperature=0, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream) == plain[0]
    finally:
        serve.shutdown()
        ray.shutdown()
