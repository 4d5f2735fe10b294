"""The pass-cost table: measured robustly, impossible tables refused, stored with its age and load, healed."""

import json
import time

import pytest

from specframe.drafting import pass_cost
from specframe.drafting.pass_cost import PassCost, PassCostError, PassCostStore, check_table

# Passes measured on a 2-core AMD EPYC (AVX-512), Qwen2.5-Coder-1.5B Q4_K_M, logits at every position (ms by size).
EPYC = {1: 29.6, 2: 57.2, 3: 77.5, 4: 97.8, 5: 121.1, 6: 138.4, 7: 161.4, 8: 225.2, 9: 251.5, 10: 262.4, 11: 281.4,
        12: 274.6, 13: 320.9, 14: 307.5, 15: 321.3, 16: 280.5, 17: 305.8}


def seconds(table: dict[int, float]) -> dict[int, float]:
    return {n: ms / 1000 for n, ms in table.items()}


def test_interpolates_and_extrapolates_what_it_has_not_measured():
    cost = PassCost({1: 0.060, 5: 0.180})
    assert cost.seconds(3) == pytest.approx(0.120)
    assert cost.seconds(9) == pytest.approx(0.300)
    assert PassCost().seconds(3) == pytest.approx(2.0)    # nothing measured: half a pass per extra token


def test_calibration_warms_up_interleaves_and_ignores_a_disturbed_sample():
    calls = []

    def run_pass(n):
        calls.append(n)
        slowed = n == 8 and calls.count(8) == 2     # the second sample of size 8: another process ran
        return EPYC[n] / 1000 * (5.0 if slowed else 1.0)

    cost = PassCost()
    cost.calibrate(run_pass, range(1, 18))
    assert calls[0] == 17                                   # an untimed warm-up at the largest size first
    untimed, timed = calls[1::2], calls[2::2]               # each pass right after an untimed single-token one
    assert set(untimed) == {1} and len(untimed) == len(timed)
    assert timed[:17] == list(range(1, 18)) and timed[17:34] == list(range(17, 0, -1))     # interleaved
    assert len(timed) == 34 + 1                             # a third round for the disturbed size only
    assert cost.measured == pytest.approx(seconds(EPYC))    # agreeing samples decide; the slowed one is ignored


class GraphedGpu:
    """llama.cpp's CUDA backend as the H200 showed it (Qwen2.5-Coder-1.5B, ms): a pass right after one of another
    size runs directly, the second of a size in a row captures a graph, the third on replays it."""

    REPLAYED_SINGLE = 1.7

    def __init__(self):
        self.last, self.in_a_row = 0, 0

    @staticmethod
    def direct(n: int) -> float:
        return 4.7 if n == 1 else 6.3 + 0.1 * n

    def run_pass(self, n: int) -> float:
        self.in_a_row = self.in_a_row + 1 if n == self.last else 1
        self.last = n
        if self.in_a_row >= 3:
            return (self.REPLAYED_SINGLE if n == 1 else 0.5 * self.direct(n)) / 1000
        return (self.direct(n) + (1.0 if self.in_a_row == 2 else 0.0)) / 1000


def test_a_gpu_is_timed_as_decoding_runs_it_and_its_table_kept():
    """Plain decoding's single passes replay their graph; verification passes change size every step and run
    directly. Timed so, a pass of 2 tokens costs 3.8 single ones: impossible on a CPU, the truth on this GPU."""
    gpu = GraphedGpu()
    cost = PassCost()
    cost.calibrate(gpu.run_pass, range(1, 18), gpu=True)
    assert cost.gpu and cost.measured[1] == pytest.approx(GraphedGpu.REPLAYED_SINGLE / 1000)
    assert all(cost.measured[n] == pytest.approx(GraphedGpu.direct(n) / 1000) for n in range(2, 18))
    with pytest.raises(PassCostError, match="more than 2 single-token passes"):
        check_table(cost.measured)                          # a CPU's bound
    check_table(cost.measured, gpu=True)
    loaded = stored(cost.measured, gpu=True)
    assert loaded.gpu and loaded.measured == cost.measured
    loaded.spot_check(gpu.run_pass, [17])
    assert loaded.confirmed and not loaded.stale
    for n in [5, 1, 1, 17, 1, 9, 1, 1, 1, 1, 3, 1, 12, 1, 1] * 4 + [-6, 1] * 6:   # drafts now and then, then
        loaded.observe(abs(n), gpu.run_pass(abs(n)), comparable=n > 0)          # passes over two sequences
    assert not loaded.stale, loaded.stale_reason           # the singles after another size run directly, as expected
    captured = stored({**cost.measured, 1: (GraphedGpu.direct(1) + 1.0) / 1000}, gpu=True)
    captured.spot_check(gpu.run_pass, [17])                   # a single timed as it captured its graph: 3.4x dear
    assert captured.stale and not captured.confirmed


class ReusedGraphCpu:
    """llama.cpp on a CPU with the tiny test model (ms): a pass of the last one's size reuses its graph, half of a
    single-token pass's cost; the first single-token pass is slowed by another process."""

    def __init__(self):
        self.last, self.singles = 0, 0

    def run_pass(self, n: int) -> float:
        reused, self.last = n == self.last, n
        self.singles += n == 1
        return ((0.106 + 0.018 * (n - 1)) * (1.4 if n == 1 and self.singles == 1 else 1.0) - 0.05 * reused) / 1000


def test_a_cpu_is_timed_as_decoding_runs_it_and_its_table_kept():
    """Timed in whatever order calibration's rounds run them, single-token passes came out at the cost of a reused
    graph or of a new one, and a stored table looked stale to every later process (CI: a spot check found singles at
    1.9 times the table's and measured again)."""
    cpu = ReusedGraphCpu()
    cost = PassCost()
    cost.calibrate(cpu.run_pass, range(1, 18))
    assert cost.measured[1] == pytest.approx(0.056 / 1000)                  # reused, as plain decoding runs it
    assert all(cost.measured[n] == pytest.approx((0.106 + 0.018 * (n - 1)) / 1000) for n in range(2, 18))
    loaded = stored(cost.measured)
    loaded.spot_check(cpu.run_pass, [17])
    assert loaded.confirmed and not loaded.stale, loaded.stale_reason
    for n in [5, 1, 1, 17, 1, 9, 1, 1, 1, 1, 3, 1, 12, 1, 1] * 4:            # drafts now and then
        loaded.observe(n, cpu.run_pass(n))
    assert not loaded.stale, loaded.stale_reason    # the singles after another size build their graph, as expected


def test_impossible_tables_are_refused():
    check_table(seconds(EPYC))
    with pytest.raises(PassCostError, match="less than one of a single token"):
        check_table({1: 3.0, 2: 0.057, 16: 0.280})          # a warm-up pass stored as the single-token cost
    with pytest.raises(PassCostError, match="more than 2 single-token passes"):
        check_table({1: 0.08, 2: 4.4})                      # measured while another process used the CPU
    with pytest.raises(PassCostError):
        check_table({2: 0.05})                              # nothing to compare with
    with pytest.raises(PassCostError, match="not a positive duration"):
        check_table({1: float("nan")})


def test_a_calibration_measured_impossible_twice_is_bounded_and_not_stored(tmp_path, caplog):
    cost = PassCost()
    cost.calibrate(lambda n: 0.001 if n == 1 else 0.5, [1, 2, 3])     # the machine is too busy to tell
    assert cost.seconds(2) <= 1.5 * 2 * cost.seconds(1)
    assert not cost.storable
    store = PassCostStore(tmp_path, "key")
    store.save(cost)
    assert not store.path.exists()
    assert "impossible" in caplog.text


def deepened(depth: int, per_position: float = 11e-6):
    """run_pass of the EPYC table run ``depth`` positions deep, each token of a pass ``per_position`` seconds dearer
    per position (the 1.5B on a Zen 3 EPYC: 20 to 30 microseconds beside a single pass of 80 ms; here as much
    beside this table's 30 ms)."""
    return lambda n: EPYC[n] / 1000 + per_position * n * depth


def sweep(depth: int, per_position: float = 11e-6, burst_at: int | None = None):
    """``deeper`` for a table taken ``depth`` positions deep: 256 positions, timed as ``deepened`` would be, with
    every pass at offset ``burst_at`` slowed by half (another process ran then)."""
    def run_at(n: int, offset: int) -> float:
        return deepened(depth + offset, per_position)(n) * (1.5 if offset == burst_at else 1.0)

    return 256, run_at


def test_calibration_times_what_each_position_of_depth_adds_and_prices_every_depth_by_it():
    cost = PassCost()
    cost.calibrate(deepened(300), range(1, 18), depth=300, deeper=sweep(300))
    assert cost.depth == 300 and cost.per_position == pytest.approx(11e-6)
    assert cost.seconds(16) == pytest.approx(EPYC[16] / 1000 + 11e-6 * 16 * 300)     # where it was measured
    cost.at_depth(2000)
    for n in (1, 5, 16):
        assert cost.seconds(n) == pytest.approx(deepened(2000)(n))
    assert cost.seconds_from(1, 17) == pytest.approx([deepened(2000)(n) for n in range(1, 18)])
    cost.at_depth(300)
    assert cost.seconds_from(1, 17) == pytest.approx([deepened(300)(n) for n in range(1, 18)])
    assert cost.seconds_at(16, 0) == pytest.approx(EPYC[16] / 1000)
    no_room = PassCost()
    no_room.calibrate(deepened(300), range(1, 18), depth=300)      # the context left no room to time it deeper
    assert no_room.per_position == 0.0 and no_room.seconds_at(16, 2000) == no_room.seconds(16)


@pytest.mark.parametrize("burst_at", [256, 128, 0])
def test_a_burst_of_noise_at_one_depth_does_not_decide_what_depth_costs(burst_at):
    """Two depths, one of them slowed, made a position cost 62 microseconds one calibration and 7 the next on a noisy
    day; the median slope over five depths is not moved by one."""
    cost = PassCost()
    cost.calibrate(deepened(300), range(1, 18), depth=300, deeper=sweep(300, burst_at=burst_at))
    assert cost.per_position == pytest.approx(11e-6, rel=0.35)


def test_a_table_taken_at_one_depth_is_not_found_stale_by_passes_at_another():
    """Without what depth adds, a table taken at a short prompt finds the passes of a long conversation off its
    level (3000 positions on, a single pass costs 2.1 times its entry, a 16-token one 2.8), and is measured again
    there; that table, stored, prices the next short request's drafts too dear for the week it lives."""
    def passes_at(cost, depth, run_pass):
        cost.at_depth(depth)
        for n in (1, 1, 1, 16, 1, 16, 1, 16, 12, 16, 8, 16):
            cost.observe(n, run_pass(n))

    aware = PassCost()
    aware.calibrate(deepened(40), range(1, 18), depth=40, deeper=sweep(40))
    aware._trusted_since = None                 # judged at once, not after REMEASURE_AFTER_SECONDS
    passes_at(aware, 3000, deepened(3000))
    assert not aware.stale
    blind = PassCost()
    blind.calibrate(deepened(40), range(1, 18), depth=40)
    blind._trusted_since = None
    passes_at(blind, 3000, deepened(3000))
    assert blind.stale


def test_stored_tables_round_trip_and_record_when_and_under_what_load(tmp_path, monkeypatch):
    monkeypatch.setattr(pass_cost, "other_load", lambda *_: 0.0)   # the file is tested, not this machine's load
    cost = PassCost()
    cost.calibrate(deepened(100), range(1, 18), depth=100, deeper=sweep(100))
    store = PassCostStore(tmp_path, "key")
    store.save(cost)
    data = json.loads(store.path.read_text())
    assert data["version"] == 4 and data["gpu"] is False and "other_load" in data
    assert abs(data["measured_at"] - time.time()) < 60
    loaded = store.load()
    assert loaded.measured == cost.measured
    assert (loaded.depth, loaded.per_position) == (100, cost.per_position) and loaded.per_position > 0
    assert not list(tmp_path.glob(".*partial"))             # written through a temporary file, renamed


@pytest.mark.parametrize("change, reason", [
    (lambda d: d.update(measured_at=time.time() - pass_cost.MAX_AGE_SECONDS - 1), "old"),
    (lambda d: d.update(other_load=1.5), "under load"),
    (lambda d: d["seconds"].update({"1": 1e-9}), "impossible"),
    (lambda d: d.update(version=2), "old format"),          # timed a GPU's passes unlike its decoding
    (lambda d: d.update(version=3), "old format"),          # priced every depth alike
    (lambda d: d.update(depth=-1), "malformed"),
    (lambda d: d.update(per_position=float("nan")), "malformed"),
    (lambda d: d.update(gpu="no"), "malformed"),
    (lambda d: d.update(seconds="fast"), "malformed"),
])
def test_a_stored_table_that_cannot_be_trusted_is_deleted(tmp_path, change, reason):
    store = PassCostStore(tmp_path, "key")
    store.save(PassCost(seconds(EPYC), measured_at=time.time(), other_load=0.0))
    data = json.loads(store.path.read_text())
    change(data)
    store.path.write_text(json.dumps(data))
    assert store.load() is None and not store.path.exists(), reason
    store.path.write_text("{not json")
    assert store.load() is None and not store.path.exists()


def test_a_table_taken_under_load_is_used_but_not_stored_and_the_wrong_one_goes(tmp_path):
    store = PassCostStore(tmp_path, "key")
    store.save(PassCost({n: 1.5 * n * 0.0296 for n in EPYC}, measured_at=time.time(), other_load=0.0))   # too dear
    store.save(PassCost(seconds(EPYC), measured_at=time.time(), other_load=1.2))
    assert not store.path.exists()       # measured because the stored one proved wrong: it must not stay


def test_passes_that_disagree_with_the_table_make_it_stale_and_one_slow_outlier_does_not():
    cost = PassCost(seconds(EPYC))
    cost.observe(1, 0.350)                                  # one pass slowed by another process
    for _ in range(pass_cost.DRIFT_WINDOW):
        cost.observe(1, 0.030)
    assert not cost.stale
    for _ in range(pass_cost.DRIFT_WINDOW):                 # passes of 2 are really twice as dear, five in a row
        cost.observe(2, 0.120)
    assert cost.stale and "2 token" in cost.stale_reason
    assert cost.measured[2] == pytest.approx(0.0572)        # observations never rewrite the table themselves


def half_priced_batches(real: dict[int, float]) -> PassCost:
    """A table too cheap by half for every pass over several tokens (as it would be taken under another load)."""
    return PassCost({n: real[n] if n == 1 else max(real[n] / 2, real[1]) for n in real})


def test_a_table_too_cheap_is_found_within_a_few_drafts_of_different_lengths():
    """Each draft has another length, and no size is seen twice, yet the passes' ratios to the table give it away."""
    real = seconds(EPYC)
    cost = half_priced_batches(real)
    for n in (16, 1, 1, 9):                                # a single-token pass compared second in a row
        cost.observe(n, real[n])
        assert not cost.stale
    cost.observe(12, real[12])
    assert cost.stale and "the last 3 passes over several tokens" in cost.stale_reason


def test_a_table_too_cheap_is_found_though_single_passes_come_between_the_drafts():
    """Drafts of 11 tokens at twice the table, with steps that drafted nothing in between: three drafted passes give
    it away, where the median of the last five would not."""
    real = seconds(EPYC)
    cost = half_priced_batches(real)
    for n in (1, 11, 1, 1, 11, 1):
        cost.observe(n, real[n])
        assert not cost.stale
    cost.observe(11, real[11])
    assert cost.stale and "the last 3 passes over several tokens" in cost.stale_reason


def test_a_table_far_too_cheap_is_found_by_the_second_draft():
    """A table that prices every pass like a single token's (as a poisoned run went on this EPYC: passes of 17 at 15
    times the table at the first two steps, before any single-token pass). Each such pass costs many single passes'
    time, so two of them suffice; one could be noise."""
    real = seconds(EPYC)
    cost = PassCost({n: real[1] for n in real})
    cost.observe(17, real[17])
    assert not cost.stale
    cost.observe(16, real[16])
    assert cost.stale and "the last 2 passes over several tokens" in cost.stale_reason


def stored(table: dict[int, float], gpu: bool = False) -> PassCost:
    """``table`` as the engine loads it from a file: not confirmed by any pass of this process."""
    return PassCost.from_json(PassCost(table, measured_at=time.time(), other_load=0.0, gpu=gpu).to_json())


def test_a_stored_table_far_too_cheap_is_found_by_two_short_drafts():
    """Until a pass over several tokens has run at its pace, a stored table lets drafts of at most
    UNCONFIRMED_DRAFT tokens be verified: here two passes of 5 tokens (4.3 single passes each on this EPYC) find a
    table that prices every pass like a single token's, where two longest drafts cost 28 single passes."""
    real = seconds(EPYC)
    cost = stored({n: real[1] for n in real})
    assert not cost.confirmed and cost.draft_limit(16) == pass_cost.UNCONFIRMED_DRAFT == 4
    for _ in range(2):
        cost.observe(1 + cost.draft_limit(16), real[5])
    assert cost.stale and not cost.confirmed


def test_a_stored_table_is_confirmed_by_a_pass_over_several_tokens_at_its_pace():
    real = seconds(EPYC)
    cost = stored(real)
    cost.observe(1, 1.1 * real[1])
    assert not cost.confirmed                            # a single-token pass says nothing of the table's shape
    cost.observe(5, 2.5 * real[5])
    assert not cost.confirmed and not cost.stale         # one slow pass: neither confirmed nor stale
    cost.observe(5, 1.2 * real[5])                       # loop passes run a little slower than measured ones
    assert cost.confirmed and cost.draft_limit(16) == 16
    measured = PassCost()
    measured.calibrate(lambda n: EPYC[n] / 1000, range(1, 18))
    assert measured.confirmed and measured.draft_limit(16) == 16


@pytest.mark.parametrize("table, confirmed", [
    (lambda real: real, True),                                        # right
    (lambda real: {n: real[1] for n in real}, False),                 # far too cheap
    (lambda real: {n: 1.5 * n * real[1] for n in real}, False),       # far too dear
])
def test_a_spot_check_confirms_a_right_table_and_finds_a_wrong_one_stale(table, confirmed):
    real = seconds(EPYC)
    timed = []
    cost = stored(table(real))
    cost.spot_check(lambda n: timed.append(n) or 1.1 * real[n], [17])
    assert cost.confirmed == confirmed and cost.stale != confirmed
    assert timed == [17] + [1, 1, 1, 17] * 3                          # a warm-up, then three rounds as decoding
    timed.clear()                                                     # runs them (each timed pass the last)
    stored(table(real), gpu=True).spot_check(lambda n: timed.append(n) or 1.1 * real[n], [17])
    assert timed == [17] + [1, 1, 1, 1, 17] * 3                       # a GPU's: a single-token pass third in a row


@pytest.mark.parametrize("pace", [0.3, 3.0])
def test_a_spot_check_finds_a_table_off_in_level_stale(pace):
    """A table with the right shape at a third, or three times, of what passes take: choices between drafts stand,
    but a draft model's time is weighed against the target's, and a recheck of a table the loop found far off must
    not keep it (the loop's own test of the level needs five passes, more than a spot check of one size gives)."""
    real = seconds(EPYC)
    cost = stored({n: pace * s for n, s in real.items()})
    cost.spot_check(lambda n: real[n], [17])
    assert cost.stale and "a spot check's passes took" in cost.stale_reason


def test_a_spot_check_of_passes_under_a_millisecond_times_enough_of_them():
    """A tiny model's single-token pass takes 0.06 ms on a CPU, and the first passes of a process run slower: three
    rounds fell among them, the singles at 1.3 times the table against batches at its cost, and a right table looked
    stale (CI). Timed for a tenth of a second, the right table is confirmed and a far too cheap one still found."""
    real = {n: (0.04 + 0.02 * n) / 1000 for n in range(1, 18)}

    def new_process():
        passes: list[int] = []

        def run_pass(n: int) -> float:
            passes.append(n)
            return real[n] * (1.3 if n == 1 and len(passes) < 16 else 1.0)

        return run_pass, passes

    for table, confirmed in ((real, True), (half_priced_batches(real).measured, False)):
        run_pass, passes = new_process()
        cost = stored(table)
        cost.spot_check(run_pass, [17])
        assert cost.confirmed == confirmed and cost.stale != confirmed, cost.stale_reason
        assert len(passes) == 1 + 4 * pass_cost.MAX_SPOT_CHECK_ROUNDS      # 0.04 s of passes in as many rounds


def test_one_pass_much_faster_than_the_table_proves_it_wrong():
    """Noise only adds time: a table that says passes of 16 cost a third more than one did is too dear (the
    one-and-a-half k poison on a CPU where k tokens cost nearly k single passes), one a tenth more is not."""
    cost = PassCost(seconds(EPYC))
    table = cost.seconds(16)
    cost.observe(16, 2 * table)
    cost.observe(16, 0.9 * table)
    assert not cost.stale
    cost.observe(16, 0.75 * table)
    assert cost.stale and "16 token" in cost.stale_reason


@pytest.mark.parametrize("pace", [0.7, 1.6])
def test_a_machine_whose_pace_drifts_alike_for_every_size_is_not_measured_again(pace):
    """A noisy CPU runs every size slower, or faster, for a while (seen here: single passes at 96 ms against the
    table's 59): no choice changes, and measuring again would stall the request for seconds."""
    real = seconds(EPYC)
    cost = PassCost(real)
    for _ in range(3):
        for n in (1, 1, 16, 1, 9, 4, 1, 12, 1, 1):
            cost.observe(n, pace * real[n])
    assert not cost.stale, cost.stale_reason


@pytest.mark.parametrize("pace", [0.7, 1.3])
def test_prices_follow_the_pace_the_loop_finds_while_the_table_keeps_its_own(pace):
    """A machine running every size alike slower (or faster) than the table: drafters' calls are timed at that
    pace, so the passes they are weighed against are priced at it too; the table and its tests keep their level."""
    real = seconds(EPYC)
    cost = PassCost(real)
    for n in (1, 1, 16):                  # the first follows another size: not compared
        cost.observe(n, pace * real[n])
    assert cost.pace == 1.0 and cost.seconds(4) == real[4]        # too few passes to tell
    for n in (1, 9, 4, 1, 12, 1):
        cost.observe(n, pace * real[n])
    assert not cost.stale and cost.pace == pytest.approx(pace)
    assert cost.seconds(16) == pytest.approx(pace * real[16])
    assert cost.seconds_from(1, 4) == pytest.approx([pace * real[n] for n in range(1, 5)])
    assert cost.measured == real and cost.seconds_at(16, cost.position) == real[16]


def loop_finds(cost: PassCost, batch_shape: float, pace: float = 1.0) -> None:
    """The engine's passes as the loop times them on a machine at ``pace``: single-token ones as the table says,
    bigger ones at ``batch_shape`` times it."""
    real = seconds(EPYC)
    for n in (1, 1, 1, 16, 9, 4, 12, 8):
        cost.observe(n, pace * (1.0 if n == 1 else batch_shape) * real[n])


@pytest.mark.parametrize("pace", [0.7, 1.0, 1.6])
def test_a_wrong_shape_is_found_whatever_the_pace(pace):
    """Batches dearer (or cheaper) against single passes than the table says are found at any pace."""
    real = seconds(EPYC)
    for shape, reason in ((2.0, "times what the table says"), (0.6, "single-token passes take")):
        cost = PassCost(real)
        loop_finds(cost, shape, pace)
        assert cost.stale and reason in cost.stale_reason, (shape, cost.stale_reason)


def test_a_pace_far_from_the_table_is_measured_again():
    """Passes at half the table's time, or at two and a half times it, whatever their sizes: a table poisoned by
    a constant, or a CPU another process keeps busy."""
    real = seconds(EPYC)
    for pace in (0.45, 2.5):
        cost = PassCost(real)
        for _ in range(pass_cost.DRIFT_WINDOW + 1):        # the first follows another size: not compared
            assert not cost.stale
            cost.observe(1, pace * real[1])
        assert cost.stale and "times what the table says" in cost.stale_reason


def test_soon_after_a_measurement_a_faster_size_is_taken_as_observed_not_measured_again():
    """A GPU replays the graph it captured when passes of one size follow each other: the loop can be faster than
    any measurement, and measuring again would find the same. The entry takes the observed time instead."""
    cost = PassCost()
    cost.calibrate(lambda n: 0.004 + 0.0002 * n, range(1, 18))
    cost.observe(1, 0.0019)
    cost.observe(1, 0.0019)                                 # compared second in a row, as the table has it
    assert not cost.stale and cost.seconds(1) == pytest.approx(0.0019)


@pytest.mark.parametrize("size, observed, kept", [(1, 0.0001, 0.005 / 3), (4, 0.0001, 0.0034)])
def test_a_faster_size_taken_as_observed_keeps_the_table_possible(size, observed, kept):
    """On a tiny model a loop pass can take a fraction of the measured one (seen: a single pass at 0.05 ms against a
    2-token pass at 0.18 ms). The entry moves only as far as a possible table allows."""
    cost = PassCost()
    cost.calibrate(lambda n: 0.003 + 0.001 * n, range(1, 18))
    cost.observe(size, observed)
    cost.observe(size, observed)                            # a single-token pass is compared second in a row
    check_table(cost.measured)
    assert not cost.stale and cost.seconds(size) == pytest.approx(kept)


def test_a_table_measured_here_is_not_measured_again_soon_after(monkeypatch):
    """A measurement stalls every request (a server's slots all wait): slow passes soon after one do not call for
    another, later ones do."""
    clock = [1000.0]
    monkeypatch.setattr(pass_cost.time, "monotonic", lambda: clock[0])
    cost = PassCost()
    cost.calibrate(lambda n: 0.030 + 0.010 * n, range(1, 18))
    for _ in range(2 * pass_cost.DRIFT_WINDOW):
        cost.observe(4, 0.210)                                # three times the table, just after measuring
    assert not cost.stale
    clock[0] += pass_cost.REMEASURE_AFTER_SECONDS
    for _ in range(pass_cost.DRIFT_WINDOW):
        cost.observe(4, 0.210)
    assert cost.stale and "times what the table says" in cost.stale_reason


def test_a_table_the_loop_finds_stale_is_kept_when_a_spot_check_finds_it_right(monkeypatch):
    """Seen on the idle EPYC once in a dozen requests: five loop passes at 1.36 times the table, singles at 0.9,
    and the request stalled 19 s measuring the same table again. A spot check of the sizes the loop found off,
    timed as calibration times them, keeps it, and the loop does not judge it again for a while."""
    clock = [1000.0]
    monkeypatch.setattr(pass_cost.time, "monotonic", lambda: clock[0])
    real = seconds(EPYC)
    cost = PassCost(real, measured_at=time.time(), other_load=0.0)
    loop_finds(cost, 1.6)
    assert cost.stale
    timed: list[int] = []
    cost.recheck(lambda n: timed.append(n) or 1.05 * real[n], 17, 17)
    assert not cost.stale and cost.measured == real, cost.stale_reason
    assert set(timed) == {1, 9, 16}           # the two largest sizes the loop compared (16, 9, 4: stale from the 4)
    loop_finds(cost, 1.6)
    assert not cost.stale
    clock[0] += pass_cost.REMEASURE_AFTER_SECONDS
    loop_finds(cost, 1.6)
    assert cost.stale


def test_a_table_the_loop_finds_stale_and_a_spot_check_confirms_stays_stale():
    """A stored table that prices batches at twice their cost: the loop finds them cheap, and so does the spot
    check; the table is left stale, to be measured again."""
    real = seconds(EPYC)
    cost = PassCost({n: s if n == 1 else min(2 * s, 1.5 * n * real[1]) for n, s in real.items()},
                    measured_at=time.time(), other_load=0.0)
    loop_finds(cost, 0.5)
    assert cost.stale
    cost.recheck(lambda n: real[n], 17, 17)
    assert cost.stale and "a spot check found" in cost.stale_reason, cost.stale_reason


def test_a_recheck_times_only_sizes_the_context_has_room_for():
    """Near the end of the context a pass over a size the loop ran earlier no longer fits: the pass runner would
    time fewer tokens than the size says (and a pass that fast would look like a wrong table)."""
    real = seconds(EPYC)
    for room, fallback, checked in ((12, 3, {1, 4, 9}), (3, 3, {1, 3})):  # the loop ran 16, 9, 4 (stale from the 4)
        cost = PassCost(real, measured_at=time.time(), other_load=0.0)
        loop_finds(cost, 1.6)
        timed: list[int] = []
        cost.recheck(lambda n, timed=timed: timed.append(n) or real[n], fallback, room)
        assert set(timed) == checked and not cost.stale, (room, timed, cost.stale_reason)


def test_saving_a_table_deletes_tables_too_old_to_be_used(tmp_path):
    import os

    stale, fresh = tmp_path / "old-model.json", tmp_path / "other-threads.json"
    stale.write_text("{}")
    fresh.write_text("{}")
    old = time.time() - pass_cost.MAX_AGE_SECONDS - 60
    os.utime(stale, (old, old))
    PassCostStore(tmp_path, "key").save(PassCost(seconds(EPYC), measured_at=time.time(), other_load=0.0))
    assert not stale.exists() and fresh.exists() and (tmp_path / "key.json").exists()


def test_long_drafts_have_their_pass_sizes_measured_sparsely_and_short_ones_every_size():
    """ngram-mod drafts up to 64 tokens: timing all 65 sizes took ten minutes on a slow CPU. Short passes, where the
    kernels' steps make costs jagged, are all measured; longer ones every eighth, the rest interpolated."""
    from specframe.calibration import Calibration

    assert Calibration.sizes(16, 1, 4096) == list(range(1, 18))
    assert Calibration.sizes(64, 1, 4096) == [*range(1, 18), 24, 32, 40, 48, 56, 64, 65]
    assert Calibration.sizes(16, 3, 4096) == [*range(1, 18), 34, 51]
    assert Calibration.sizes(64, 1, 30) == [*range(1, 18), 24, 30]      # the longest pass that fits is measured
    cost = PassCost({n: 0.03 + 0.01 * n for n in Calibration.sizes(64, 1, 4096)})
    assert cost.seconds(44) == pytest.approx(0.03 + 0.01 * 44)


def test_other_processes_load_is_unknown_over_too_short_a_time():
    """/proc counts CPU time in ticks: over a millisecond, one tick of another process would read as ten cores."""
    assert pass_cost.other_load((100.0, 1.0), (100.01, 1.0), 0.001) is None
    assert pass_cost.other_load((100.0, 1.0), (100.5, 1.2), 1.0) == pytest.approx(0.3)
