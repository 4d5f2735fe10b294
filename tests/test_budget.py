"""The cost model that decides how many tokens are worth drafting."""

import pytest

from specframe.drafting.budget import PROBE_EVERY, PROBE_LENGTH, AcceptanceEstimate, VerifyCost


def cost(base, slope):
    verify = VerifyCost(smoothing=1.0)
    verify.observe(1, base)
    verify.observe(5, base + 4 * slope)
    return verify


def test_verify_cost_learns_base_and_slope():
    verify = cost(0.060, 0.030)
    assert verify.seconds(1) == pytest.approx(0.060)
    assert verify.seconds(17) == pytest.approx(0.060 + 16 * 0.030)
    assert VerifyCost().seconds(3) == pytest.approx(2.0)    # before any pass: half a pass per extra token


def estimate(p, weight=100.0):
    return AcceptanceEstimate(accepted=p * weight, stops=(1 - p) * weight)


def test_nearly_free_verification_drafts_everything_likely():
    assert estimate(0.95).length(cost(0.060, 0.001), 16) == 16


def test_expensive_verification_needs_high_acceptance():
    verify = cost(0.063, 0.030)          # this CPU: an extra verified token costs half a pass
    assert estimate(0.3).length(verify, 16) == 0
    assert 0 < estimate(0.8).length(verify, 16) < 16
    assert 12 <= estimate(0.99).length(verify, 16) < 16   # the last tokens are not worth their cost


def test_a_costly_drafter_drafts_less():
    verify = cost(0.063, 0.010)
    cheap, costly = estimate(0.8), estimate(0.8)
    costly.seconds_per_token = 0.040
    assert costly.length(verify, 16) < cheap.length(verify, 16)


def test_held_back_drafters_are_probed_less_and_less_often():
    held = estimate(0.1)
    verify = cost(0.063, 0.030)
    lengths = [held.length(verify, 16) for _ in range(PROBE_EVERY + 2 * PROBE_EVERY)]
    probes = [i for i, n in enumerate(lengths) if n]
    assert probes == [PROBE_EVERY - 1, 3 * PROBE_EVERY - 1] and lengths[probes[0]] == PROBE_LENGTH
    held.accepted, held.stops = 95.0, 5.0      # the text turned repetitive: a real draft resets the interval
    assert held.length(verify, 16) > 0 and held.probe_every == PROBE_EVERY


def test_estimates_follow_recent_drafts():
    e = AcceptanceEstimate()
    for _ in range(30):
        e.update(n_drafted=8, n_accepted=8, seconds=0.001)
    assert e.per_token > 0.95
    for _ in range(60):
        e.update(n_drafted=8, n_accepted=0, seconds=0.001)
    assert e.per_token < 0.1
