"""suffix (SuffixDecoding) on hand-built histories whose right draft is known, its bounds, its state file, and a
session through the engine where a repeated answer is drafted from the global index of earlier responses."""

import logging
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specframe.drafters.suffix import STATE_MAGIC, SuffixDrafter, SuffixParams
from specframe.engine import Engine
from specframe.errors import ConfigError
from specframe.suffix_index import DraftRule, SuffixIndex
from specframe.testing import assert_drafter_ok, fake_env
from specframe.testing.lossless import compare

PROMPT = "the quick brown fox jumps over the lazy dog and the quick brown fox"


def h(*tokens):
    return np.array(tokens, dtype=np.int32)


def suffix(env=None, **params):
    return SuffixDrafter(SuffixParams(**params), env)


def answer(drafter, prompt, response):
    """One request: ``prompt`` then ``response``, seen whole by one draft call; it joins the global index when
    the next request begins."""
    drafter.begin(h(*prompt))
    drafter.draft(h(*prompt, *response), 8)


def drafted(drafter, prompt, generated=(), n_max=16):
    """The draft of a new request whose history is ``prompt`` then ``generated``."""
    drafter.begin(h(*prompt))
    return drafter.draft(h(*prompt, *generated), n_max).tokens.tolist()


def test_passes_the_drafter_checks():
    assert_drafter_ok(SuffixDrafter, learns_across_requests=True)
    assert_drafter_ok(SuffixDrafter, SuffixParams(max_depth=5, max_responses=2, max_tokens=1024,
                                                  max_spec_factor=3.0, min_token_prob=0.0),
                      learns_across_requests=True)


def test_continues_a_repeated_earlier_response_as_far_as_the_match_allows():
    d = suffix()
    earlier = list(range(10, 40))
    answer(d, [1, 2, 3], earlier)
    # A new prompt (nothing of it in the earlier response), then the start of the same answer.
    assert drafted(d, [5, 6], earlier[:4]) == earlier[4:8]              # a 4-token match drafts 4 tokens
    assert drafted(d, [5, 6], earlier[:12]) == earlier[12:24]
    assert drafted(d, [5, 6], earlier[:20]) == earlier[20:36]           # 20 matched: up to n_max = 16
    assert drafted(d, [5, 6], earlier[:20], n_max=5) == earlier[20:25]
    assert drafted(d, [5, 6], earlier[:26]) == earlier[26:]             # up to the response's end


def test_the_match_length_rule_bounds_the_draft():
    earlier = list(range(10, 40))
    for (factor, offset), length in {(1.0, 0.0): 3, (2.0, 0.0): 6, (1.0, 2.0): 5, (0.5, 0.0): 1,
                                     (0.0, 0.0): 0}.items():
        d = suffix(max_spec_factor=factor, max_spec_offset=offset)
        answer(d, [1], earlier)
        assert drafted(d, [2], earlier[:3]) == earlier[3:3 + length], (factor, offset)


def test_drafts_the_most_frequent_continuation_and_stops_below_min_token_prob():
    d = suffix(max_spec_factor=4.0)
    for response in ([20, 21, 22, 23, 24], [20, 21, 22, 23, 24], [20, 21, 22, 30, 31]):
        answer(d, [1], response)
    assert drafted(d, [2], [20, 21]) == [22, 23, 24]                    # 23 followed twice, 30 once
    d = suffix(max_spec_factor=4.0, min_token_prob=0.7)
    for response in ([20, 21, 22, 23, 24], [20, 21, 22, 23, 24], [20, 21, 22, 30, 31]):
        answer(d, [1], response)
    assert drafted(d, [2], [20, 21]) == [22]                            # 23 is only 2/3 likely
    # three continuations seen once each: the most recent one on a tie, while 1/3 is likely enough
    for min_token_prob, expected in ((0.3, [22, 42]), (0.5, [22])):
        d = suffix(max_spec_factor=4.0, min_token_prob=min_token_prob)
        for last in (40, 41, 42):
            answer(d, [1], [20, 21, 22, last])
        assert drafted(d, [2], [20, 21]) == expected


def test_the_request_own_tokens_are_drafted_from_and_win_a_tie():
    d = suffix()
    answer(d, [1], [20, 21, 22, 23, 25, 26])
    # the request's prompt holds 20 21 22 24 7: three tokens as likely as the earlier response's 23 25 26
    assert drafted(d, [20, 21, 22, 24, 7], [20, 21, 22]) == [24, 7, 20]
    assert drafted(d, [20, 21, 22, 24], [7, 20, 21, 22]) == [24, 7, 20]
    d = suffix(max_responses=0)                                         # no global index: the request alone
    answer(d, [1], [20, 21, 22, 23])
    assert drafted(d, [5], [20, 21]) == []
    assert drafted(d, [20, 21, 22, 24, 9], [20, 21, 22]) == [24, 9, 20]


def test_the_global_index_keeps_the_most_recent_responses_within_its_bounds():
    # Each probe's context is its prompt: a request that generates nothing adds no response.
    d = suffix(max_responses=2)
    for first in (100, 200, 300):
        answer(d, [1], list(range(first, first + 10)))
    assert drafted(d, [2, 100, 101, 102]) == []                         # the oldest was dropped
    assert drafted(d, [2, 200, 201, 202]) == [203, 204, 205]
    assert [r[0] for r in d.earlier.responses()] == [200, 300] and d.earlier.n_tokens == 20

    d = suffix(max_tokens=1024)
    long_answers = [list(range(1000 * i, 1000 * i + 600)) for i in (1, 2, 3)]
    for response in long_answers:
        answer(d, [1], response)
    assert drafted(d, [2, *long_answers[1][:3]]) == []                 # two of 600 tokens would pass 1024
    assert drafted(d, [2, *long_answers[2][:3]]) == long_answers[2][3:6]
    assert [len(d.earlier.spans), d.earlier.n_tokens] == [1, 600]
    answer(d, [1], list(range(5000, 7000)))                              # longer than the bound: its tail
    assert drafted(d, [2, 5900, 5901]) == []                          # its first 976 tokens were cut
    assert drafted(d, [2, 6990, 6991]) == [6992, 6993]
    assert [len(d.earlier.spans), d.earlier.n_tokens] == [1, 1024]


def test_a_long_lived_global_index_stays_bounded_in_memory():
    d = suffix(max_tokens=4096)
    rng = np.random.default_rng(0)
    for _ in range(200):
        answer(d, [1], rng.integers(0, 500, 300).tolist())
        index = d.earlier.index
        assert d.earlier.n_tokens <= 4096
        assert index.tokens.nbytes + index.prev.nbytes + index.heads.nbytes <= 100 * 4096   # forgotten tokens go
    assert drafted(d, [2, *d.earlier.responses()[0][:20].tolist()]) != []


def test_a_servers_slots_share_the_global_index():
    first, second = SuffixDrafter.for_slots(SuffixParams(), None, 2)
    assert first.earlier is second.earlier and first.request is not second.request
    answer(first, [1], list(range(100, 120)))
    assert drafted(second, [3, 100, 101, 102, 103]) == []                # the first slot's answer is not over
    first.begin(h(2))                                                    # its next request: the answer joins
    assert drafted(second, [3, 100, 101, 102, 103]) == [104, 105, 106, 107]


def test_only_new_tokens_are_indexed():
    d = suffix()
    taken: list[int] = []
    extend = d.request.extend
    d.request.extend = lambda tokens: (taken.append(len(tokens)), extend(tokens))[1]
    rng = np.random.default_rng(1)
    history = rng.integers(0, 50, 400).astype(np.int32)
    d.begin(history[:100])
    for length in (100, 101, 105, 105, 121, 400):
        d.draft(history[:length], 8)
        assert d.request.indexed == length
    assert taken == [100, 1, 4, 0, 16, 279]


def test_the_last_draft_accepted_tokens_join_the_response():
    d = suffix(max_spec_factor=8.0)
    d.begin(h(1, 2))
    assert d.draft(h(1, 2, 20, 21, 22, 23, 20, 21, 22), 8).tokens.tolist() == [23, 20, 21, 22]
    d.accept(1)                                                          # 23 stood, then the request ended
    d.begin(h(3))
    assert [r.tolist() for r in d.earlier.responses()] == [[20, 21, 22, 23, 20, 21, 22, 23]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=40), min_size=1, max_size=6),
       st.lists(st.integers(0, 5), min_size=1, max_size=40), st.integers(1, 16),
       st.sampled_from([(1.0, 0.0, 0.1), (2.0, 1.0, 0.0), (0.5, 0.0, 0.4)]), st.integers(1, 40))
def test_a_draft_is_what_followed_a_match_of_the_context(responses, history, n_max, rule, max_depth):
    factor, offset, min_token_prob = rule
    d = suffix(max_depth=max_depth, max_spec_factor=factor, max_spec_offset=offset, min_token_prob=min_token_prob)
    for response in responses:
        answer(d, [9], response)
    d.begin(h(*history[:1]))
    draft = d.draft(h(*history), n_max).tokens.tolist()
    if not draft:
        return
    assert len(draft) <= n_max
    # (tokens, where a match may end): earlier responses, and the history but for its own end
    sources = [(response, len(response)) for response in responses] + [(history, len(history) - 1)]
    matched = [m for m in range(1, min(max_depth, len(history)) + 1) for source, ends in sources
               for end in range(m - 1, ends)
               if source[end - m + 1:end + 1] == history[-m:] and source[end + 1:end + 1 + len(draft)] == draft]
    assert matched, (responses, history, draft)
    assert len(draft) <= max(int(m * factor + offset + 1e-6) for m in matched)


def test_lookups_find_matches_in_an_index_that_grew_and_forgot():
    index = SuffixIndex(max_depth=64)
    rng = np.random.default_rng(2)
    text = rng.integers(0, 1000, 5000).astype(np.int32)
    for start in range(0, 5000, 37):                                     # through several larger head tables
        index.extend(text[start:start + 37])
    assert index.heads.shape[1] >= 4096                                  # from 1024 buckets first
    lookup = SuffixIndex(max_depth=64)
    lookup.extend(text[1200:1240])
    context = lookup.context()                                          # its last 40 tokens
    found = index.best_draft(context, 16, DraftRule())
    assert found is not None and found.tokens == text[1240:1256].tolist() and found.match_length == 40
    index.forget_before(index.start + 1000)
    assert index.best_draft(context, 16, DraftRule()).tokens == text[1240:1256].tolist()
    index.forget_before(index.start + 1300)
    forgotten = index.best_draft(context, 16, DraftRule())
    assert forgotten is None or forgotten.match_length < 4              # a chance short match at most


# --- the state file ---------------------------------------------------------------------------------------------


def test_the_global_index_survives_a_restart_and_drafts_alike(tmp_path):
    env = fake_env(1000, config_dir=tmp_path)
    rng = np.random.default_rng(3)
    first = suffix(env, state="suffix.state", save_state=True, max_tokens=2048, max_responses=8)
    responses = [rng.integers(0, 40, 300).tolist() for _ in range(12)]
    for response in responses:
        answer(first, [1], response)
    first.save()
    assert (tmp_path / "suffix.state").stat().st_size <= 24 + 8 + 4 * (8 + 2048)    # bounded like the index
    again = suffix(env, state="suffix.state", max_tokens=2048, max_responses=8)
    assert [r.tolist() for r in again.earlier.responses()] == [r.tolist() for r in first.earlier.responses()]
    for response in responses[-6:]:
        for start in (0, 100, 250):
            context = response[start:start + 8]
            assert drafted(again, [999, *context]) == drafted(first, [999, *context])
    assert drafted(again, [999, *responses[-1][:10]]) == responses[-1][10:20]
    # A second save writes nothing new unless a response joined.
    before = (tmp_path / "suffix.state").stat().st_mtime_ns
    suffix(env, state="suffix.state", save_state=True).save()
    assert (tmp_path / "suffix.state").stat().st_mtime_ns == before


@pytest.mark.parametrize("damage", ["garbage", "version", "truncated", "checksum", "vocabulary"])
def test_a_state_file_that_cannot_be_used_is_set_aside_with_one_line(tmp_path, caplog, damage):
    env = fake_env(1000, config_dir=tmp_path)
    path = tmp_path / "suffix.state"
    writer = suffix(env, state="suffix.state", save_state=True)
    answer(writer, [1], list(range(100, 120)))
    writer.save()
    data = bytearray(path.read_bytes())
    if damage == "garbage":
        data = bytearray(b"not a state file at all")
    elif damage == "version":
        data[8:12] = struct.pack("<I", 99)
    elif damage == "truncated":
        data = data[:-5]
    elif damage == "checksum":
        data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    if damage == "vocabulary":
        env = fake_env(2000, config_dir=tmp_path)
    with caplog.at_level(logging.WARNING):
        d = suffix(env, state="suffix.state", save_state=True)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and str(path) in lines[0] and "set aside" in lines[0], lines
    reason = {"garbage": "bad magic number", "version": "format version 99", "truncated": "truncated",
              "checksum": "checksum", "vocabulary": "vocabulary of 1000 tokens"}[damage]
    assert reason in lines[0]
    assert not path.exists() and (tmp_path / "suffix.state.corrupt").exists()
    assert d.earlier.n_tokens == 0
    assert drafted(d, [5, 100, 101, 102, 103], [100, 101]) == [102, 103]   # it drafts from the request
    answer(d, [1], list(range(300, 310)))
    d.save()
    assert path.read_bytes()[:8] == STATE_MAGIC                           # and saves anew


def test_state_settings_are_checked_when_the_config_loads(write_config, target_path, tmp_path):
    def config(extra):
        return write_config(f'[target]\nmodel = "{target_path}"\n[[drafter]]\ntype = "suffix"\n{extra}\n')

    for extra, message in (("save_state = true", "save_state: needs a file to write into"),
                           ('state = "missing/x.state"\nsave_state = true', "state: 'missing/x.state': folder"),
                           ("min_token_prob = 1.5", "min_token_prob: expected a number in [0.0, 1.0]"),
                           ("max_responses = -1", "max_responses: expected an integer in [0, ")):
        with pytest.raises(ConfigError) as info:
            Engine.from_config(config(extra)).close()
        assert message in str(info.value), str(info.value)


# --- through the engine -----------------------------------------------------------------------------------------


@pytest.fixture
def suffix_engine(write_config, target_path):
    engines = []

    def make(extra: str = "", name: str = "config.toml") -> Engine:
        path = write_config(f"""
            [target]
            model = "{target_path}"
            n_ctx = 1024
            [generation]
            max_tokens = 120
            [speculative]
            adaptive = false
            [[drafter]]
            type = "suffix"
            {extra}
            """, name=name)
        engines.append(Engine.from_config(path))
        return engines[-1]

    yield make
    for engine in engines:
        engine.close()


def suffix_accepted(result) -> int:
    return result.stats.drafters["suffix"]["accepted_tokens"]


def test_a_repeated_answer_is_drafted_from_the_global_index_losslessly(suffix_engine):
    engine = suffix_engine()
    plain = engine.generate(PROMPT, speculative=False, raw=True, track_margins=True)
    first = engine.generate(PROMPT, raw=True)
    second = engine.generate(PROMPT, raw=True)
    for run in (first, second):
        assert compare(plain, run).identical
    without_global = suffix_engine("max_responses = 0", name="alone.toml")
    alone = [without_global.generate(PROMPT, raw=True) for _ in range(2)]
    assert suffix_accepted(alone[1]) == suffix_accepted(alone[0])      # the request's own tokens only
    assert suffix_accepted(second) > suffix_accepted(first)              # the first answer, from the global index
    assert second.stats.n_target_passes < first.stats.n_target_passes


def test_a_restarted_engine_drafts_from_the_answers_saved_before(suffix_engine, tmp_path):
    extra = 'state = "suffix.state"\nsave_state = true'
    first = suffix_engine(extra)
    before = first.generate(PROMPT, raw=True)
    first.close()
    assert (tmp_path / "suffix.state").exists()
    after = suffix_engine(extra).generate(PROMPT, raw=True)
    assert after.tokens == before.tokens
    assert suffix_accepted(after) > suffix_accepted(before)
