"""The cost model that decides how many tokens are worth drafting."""

import pytest

from specframe.drafting.budget import PROBE_EVERY, PROBE_LENGTH, AcceptanceEstimate, VerifyCost


def cost(base, slope):
    verify = VerifyCost(smoothing=1.0)
    verify.observe(1, base)
    verify.observe(5, base + 4 * slope)
    return verify


def test_verify_cost_interpolates_and_extrapolates_what_it_has_not_measured():
    verify = cost(0.060, 0.030)
    assert verify.seconds(1) == pytest.approx(0.060)
    assert verify.seconds(3) == pytest.approx(0.060 + 2 * 0.030)
    assert verify.seconds(17) == pytest.approx(0.060 + 16 * 0.030)
    assert VerifyCost().seconds(3) == pytest.approx(2.0)    # before any pass: half a pass per extra token


# Passes measured on a 2-core AVX-512 CPU, Qwen2.5-Coder-1.5B Q4_K_M, logits at every position (ms by size).
IRREGULAR = {1: 29, 2: 51, 3: 65, 4: 78, 5: 100, 6: 116, 7: 134, 8: 137, 9: 150, 10: 164, 11: 175, 12: 173,
             13: 177, 14: 194, 15: 207, 16: 160, 17: 189}


def test_calibration_measures_every_size_once_and_lengths_follow_the_real_curve():
    calls = []

    def run_pass(n):
        calls.append(n)
        return IRREGULAR[n] / 1000

    verify = VerifyCost()
    verify.calibrate(run_pass, range(1, 18))
    verify.calibrate(run_pass, range(1, 18))                 # already measured: nothing runs again
    assert sorted(calls) == [1] + sorted(2 * list(range(1, 18)))   # fastest of 3 for one token, of 2 for more
    # With confident drafts, 15 tokens (a pass of 16) beat 14 (a pass of 15): the table, not a line, decides.
    assert estimate(0.95).length(verify, 16) == 15
    assert estimate(0.5).length(verify, 16) == 0              # one token costs 1.8 passes: not worth it


def test_measured_costs_survive_a_save_and_a_corrupt_file_is_ignored(tmp_path):
    verify = VerifyCost()
    verify.calibrate(lambda n: IRREGULAR[n] / 1000, range(1, 5))
    verify.save(tmp_path / "cost.json")
    assert VerifyCost.load(tmp_path / "cost.json").measured == verify.measured
    (tmp_path / "bad.json").write_text("{not json")
    assert VerifyCost.load(tmp_path / "bad.json").measured == {}
    assert VerifyCost.load(tmp_path / "missing.json").measured == {}


def estimate(p, weight=100.0):
    """A drafter with acceptance p after many drafts, the last ones fully accepted (no cap in the way)."""
    return AcceptanceEstimate(accepted=p * weight, stops=(1 - p) * weight, cap=64)


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
    lengths = []
    for _ in range(PROBE_EVERY + 2 * PROBE_EVERY):
        lengths.append(held.length(verify, 16))
        if lengths[-1]:
            held.update(n_asked=lengths[-1], n_drafted=lengths[-1], n_accepted=0, seconds=1e-5)
    probes = [i for i, n in enumerate(lengths) if n]
    assert probes == [PROBE_EVERY - 1, 3 * PROBE_EVERY - 1] and lengths[probes[0]] == PROBE_LENGTH
    held.accepted, held.stops = 95.0, 5.0      # the text turned repetitive: a real draft resets the interval
    assert held.length(verify, 16) > 0 and held.probe_every == PROBE_EVERY


def test_a_probe_waits_for_a_draft():
    """ngram-simple has a draft only where a 12-gram repeats: a probe at a step without one is not spent."""
    held = estimate(0.1)
    verify = cost(0.063, 0.030)
    lengths = [held.length(verify, 16) for _ in range(PROBE_EVERY - 1)]
    for _ in range(5):                      # nothing to draft: asked again at the next step
        lengths.append(held.length(verify, 16))
        held.update_empty(seconds=1e-5)
    assert lengths == [0] * (PROBE_EVERY - 1) + [PROBE_LENGTH] * 5
    assert held.length(verify, 16) == PROBE_LENGTH
    held.update(n_asked=PROBE_LENGTH, n_drafted=PROBE_LENGTH, n_accepted=0, seconds=1e-5)
    assert held.length(verify, 16) == 0 and held.probe_every == 2 * PROBE_EVERY


def test_estimates_follow_recent_drafts():
    e = AcceptanceEstimate()
    for _ in range(30):
        e.update(n_asked=8, n_drafted=8, n_accepted=8, seconds=0.001)
    assert e.per_token > 0.95
    for _ in range(60):
        e.update(n_asked=8, n_drafted=8, n_accepted=0, seconds=0.001)
    assert e.per_token < 0.1


def test_a_drafter_too_slow_to_ever_pay_is_not_even_probed():
    verify = cost(0.030, 0.010)
    slow = estimate(0.9)
    slow.seconds_per_token = 0.035        # each drafted token costs more than a whole target pass
    assert all(slow.length(verify, 16) == 0 for _ in range(10 * PROBE_EVERY))
    cheap = estimate(0.1)                 # rarely right but nearly free: still probed now and then
    assert any(cheap.length(verify, 16) for _ in range(2 * PROBE_EVERY))


def test_a_drafter_whose_empty_calls_cost_more_than_a_pass_stops_being_asked():
    """A held-back draft model probed in open prose: it catches up on the history, then p_min stops it at once.
    Each probe would cost a longer catch-up; after the first, none is made."""
    verify = cost(0.030, 0.025)      # a second token costs most of a pass: the prior acceptance is held back
    e = AcceptanceEstimate()
    asked = [e.length(verify, 16) for _ in range(PROBE_EVERY)]
    assert asked == [0] * (PROBE_EVERY - 1) + [PROBE_LENGTH]
    e.update_empty(seconds=0.070)
    assert e.per_token == AcceptanceEstimate().per_token     # drafting nothing says nothing of acceptance
    assert all(e.length(verify, 16) == 0 for _ in range(10 * PROBE_EVERY))
    cheap = AcceptanceEstimate()                             # an n-gram drafter finding no match costs ~nothing
    for _ in range(PROBE_EVERY):
        cheap.length(verify, 16)
        cheap.update_empty(seconds=20e-6)
    assert any(cheap.length(verify, 16) for _ in range(2 * PROBE_EVERY))


def test_drafts_that_stop_short_of_the_request_lower_the_estimate_like_rejections():
    """A draft model stopping at p_min after 5 of 16 asked tokens, all accepted, is not a 16-token drafter."""
    short, full = AcceptanceEstimate(), AcceptanceEstimate()
    for _ in range(40):
        short.update(n_asked=16, n_drafted=5, n_accepted=5, seconds=0.05)
        full.update(n_asked=16, n_drafted=16, n_accepted=16, seconds=0.16)
    assert short.per_token < 0.9 < 0.99 < full.per_token


def test_the_first_draft_sets_the_drafting_cost():
    """An average that started from zero would judge a slow draft model cheap for its first dozen drafts."""
    e = AcceptanceEstimate()
    e.update(n_asked=4, n_drafted=4, n_accepted=4, seconds=0.080)
    assert e.seconds_per_token == pytest.approx(0.020)
    e.update(n_asked=4, n_drafted=4, n_accepted=4, seconds=0.040)
    assert e.seconds_per_token == pytest.approx(0.018)


def test_a_slow_outlier_pass_moves_the_table_only_a_little():
    verify = VerifyCost()
    verify.observe(1, 0.030)
    verify.observe(1, 0.350)                    # another process took the CPU
    assert verify.seconds(1) < 0.040
    for _ in range(20):                          # a lasting change is followed
        verify.observe(1, 0.060)
    assert verify.seconds(1) == pytest.approx(0.060, rel=0.05)


def test_the_cap_grows_after_full_drafts_and_falls_after_a_rejection():
    e = AcceptanceEstimate()
    verify = cost(0.030, 0.001)                 # cheap verification: only the cap limits the length
    assert e.length(verify, 32) == 8
    e.update(n_asked=8, n_drafted=8, n_accepted=8, seconds=0.0)
    assert e.length(verify, 32) == 16
    e.update(n_asked=16, n_drafted=16, n_accepted=16, seconds=0.0)
    assert e.length(verify, 32) == 32 and e.length(verify, 16) == 16
    e.update(n_asked=16, n_drafted=16, n_accepted=2, seconds=0.0)
    assert e.cap == 3 and e.length(verify, 16) <= 3
    e.update(n_asked=3, n_drafted=1, n_accepted=1, seconds=0.0)   # short but right: the cap stays
    assert e.cap == 3
