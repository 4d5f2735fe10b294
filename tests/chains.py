"""Drafter tables the engine, server and chat tests share: drafters that copy from the history, with ngram-mod set
to draft on the synthetic models' short repeats."""

COPYING_DRAFTERS = """
[[drafter]]
type = "prompt-lookup"
[[drafter]]
type = "ngram-mod"
n_match = 3
n_min = 2
n_max = 8
"""
