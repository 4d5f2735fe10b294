"""Prometheus metrics under vLLM's names (``specframe:`` where vLLM says ``vllm:``), speculative ones per drafter.

Counters grow when a request ends, from its statistics; gauges follow the scheduler. Each server has a registry of
its own, so that several can live in one process (tests, Ray replicas).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specframe.results import GenerationResult

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
# vLLM's finished_reason labels: the model finished, the budget ended it, or it was cut short
FINISHED_REASONS = {"eog": "stop", "stop": "stop", "max_tokens": "length", "limit": "length", "context_full": "length",
                    "interrupted": "abort", "cancelled": "abort"}


class Metrics:
    def __init__(self, model_name: str):
        self.registry = CollectorRegistry()
        self.model_name = model_name
        model, drafter = ["model_name"], ["model_name", "drafter"]

        def make(metric_class, name: str, help_text: str, labels=model, **extra):
            return metric_class(f"specframe:{name}", help_text, labels, registry=self.registry, **extra)

        self.running = make(Gauge, "num_requests_running", "Requests decoding in a slot")
        self.waiting = make(Gauge, "num_requests_waiting", "Requests waiting for a slot")
        self.prompt_tokens = make(Counter, "prompt_tokens", "Prompt tokens of finished requests")
        self.cached_tokens = make(Counter, "prefix_cache_hits",
                                  "Prompt tokens found in a slot's memory and not evaluated again")
        self.generation_tokens = make(Counter, "generation_tokens", "Generated tokens")
        self.success = make(Counter, "request_success", "Finished requests", model + ["finished_reason"])
        self.ttft = make(Histogram, "time_to_first_token_seconds", "Seconds from arrival to the first text",
                         buckets=LATENCY_BUCKETS)
        self.e2e = make(Histogram, "e2e_request_latency_seconds", "Seconds from arrival to the end",
                        buckets=LATENCY_BUCKETS)
        self.drafts = make(Counter, "spec_decode_num_drafts", "Drafts verified", drafter)
        self.draft_tokens = make(Counter, "spec_decode_num_draft_tokens", "Draft tokens verified", drafter)
        self.accepted_tokens = make(Counter, "spec_decode_num_accepted_tokens", "Draft tokens accepted", drafter)
        self.accepted_per_position = make(Counter, "spec_decode_num_accepted_tokens_per_pos",
                                          "Draft tokens accepted, by their position in the draft",
                                          drafter + ["position"])

    def queue(self, running: int, waiting: int) -> None:
        self.running.labels(self.model_name).set(running)
        self.waiting.labels(self.model_name).set(waiting)

    def finished(self, result: GenerationResult, first_text_seconds: float | None, seconds: float) -> None:
        s, name = result.stats, self.model_name
        self.prompt_tokens.labels(name).inc(s.n_prompt_tokens)
        self.cached_tokens.labels(name).inc(s.n_cached_tokens)
        self.generation_tokens.labels(name).inc(s.n_generated)
        self.success.labels(name, FINISHED_REASONS[result.stop_reason]).inc()
        if first_text_seconds is not None:
            self.ttft.labels(name).observe(first_text_seconds)
        self.e2e.labels(name).observe(seconds)
        for drafter, d in s.drafters.items():
            self.drafts.labels(name, drafter).inc(d["wins"])
            self.draft_tokens.labels(name, drafter).inc(d["drafted_tokens"])
            self.accepted_tokens.labels(name, drafter).inc(d["accepted_tokens"])
            for position, n in enumerate(d["accepted_by_position"]):
                self.accepted_per_position.labels(name, drafter, str(position)).inc(n)

    def render(self) -> bytes:
        return generate_latest(self.registry)
