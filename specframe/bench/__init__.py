"""Benchmarking: workloads, the oracle drafter, and runs of plain decoding against speculative strategies."""
