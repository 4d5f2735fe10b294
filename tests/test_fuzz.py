"""Property tests with hypothesis: whatever the input, the outcome is a result or one line of our own error type.

- configs built field by field (right and wrong types, values at and past the bounds, unknown keys, tables and
  arrays where scalars belong, unicode) and valid configs with bytes mutated, against the loader and, when they
  load and fit in this machine, `specframe run` on the synthetic model;
- n-gram cache files (valid ones with bytes mutated, and well-formed ones with hostile contents and a correct
  checksum) against `ngram stats`, `ngram merge` and the ngram-cache drafter;
- stored pass-cost tables (well-formed ones with hostile values, and valid ones with bytes mutated) against the
  store and an adaptive engine: a table is loaded only when it can be true, and decoding goes on either way;
- drafters returning arbitrary objects, against greedy decoding: the output stays the target's own.

Bounded so that every CI run can afford it (about half a minute); `SPECFRAME_FUZZ_SCALE=10` runs ten times as many
cases. `pytest --hypothesis-show-statistics tests/test_fuzz.py` shows each test's cases and outcomes by kind.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import struct
import time
import typing
import zlib

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from specframe.cli import main
from specframe.config import _SECTIONS, load_config
from specframe.drafters.ngram_cache import NgramCacheDrafter, NgramCacheParams
from specframe.drafting import Draft, Drafter
from specframe.drafting.pass_cost import FORMAT_VERSION, PassCost, PassCostError, PassCostStore, check_table
from specframe.errors import ConfigError
from specframe.ngram_counts import MAGIC, NGRAM_MAX, VERSION, NgramCache, NgramCacheError
from specframe.plugins import load_plugins

SCALE = int(os.environ.get("SPECFRAME_FUZZ_SCALE", "1"))


def fuzz(examples: int):
    return settings(max_examples=examples * SCALE, deadline=None, derandomize=True, database=None,
                    phases=[Phase.explicit, Phase.generate, Phase.shrink],
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large, HealthCheck.filter_too_much])


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_result_or_one_line(result) -> str:
    """A command ends well, or with one line of our own (exit 1) or a usage error (exit 2); never a traceback."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output)
    if result.exit_code == 0:
        return "ok"
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("Error: ") and (len(lines) == 1 or result.exit_code == 2), result.stderr
    return f"exit {result.exit_code}: {lines[-1][len('Error: '):][:60]}"


# --- TOML -------------------------------------------------------------------------------------------------------

def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(map(toml_value, value)) + "]"
    return "{" + ", ".join(f"{toml_value(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"


def to_toml(document: dict) -> str:
    """Scalars at the top, then [section] tables, then [[drafter]] tables."""
    lines = [f"{toml_value(k)} = {toml_value(v)}" for k, v in document.items()
             if not isinstance(v, dict) and k != "drafter"]
    for name, table in document.items():
        if isinstance(table, dict):
            lines += [f"[{toml_value(name)}]"] + [f"{toml_value(k)} = {toml_value(v)}" for k, v in table.items()]
    for table in document.get("drafter", []):
        lines += ["[[drafter]]"] + [f"{toml_value(k)} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
scalars = (st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=True, allow_infinity=True)
           | text)
anything = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=5)


def near(bound) -> st.SearchStrategy:
    return st.sampled_from([bound - 1, bound, bound + 1]) if isinstance(bound, int) else st.just(bound)


def field_value(field, annotation, model: str) -> st.SearchStrategy:
    """Mostly what the field takes, at and around its bounds; sometimes anything at all."""
    meta = field.metadata
    if meta.get("model"):
        good = st.just(model)
    elif meta.get("choices"):
        good = st.sampled_from(list(meta["choices"]))
    elif annotation is bool:
        good = st.booleans()
    elif annotation in (int, float):
        low, high = meta.get("min"), meta.get("max")
        low = -10 if low is None else low
        numbers = st.integers if annotation is int else st.floats
        inside = numbers(low, low + 64 if high is None else min(high, low + 64))
        bounds = [near(b) for b in (low, high) if b is not None]
        good = st.one_of(inside, *bounds) if bounds else inside
    elif typing.get_origin(annotation) is list or annotation is list:
        good = st.lists(text, max_size=2)
    elif typing.get_origin(annotation) is dict or annotation is dict:
        good = st.dictionaries(text, text, max_size=2)
    else:
        good = text
    return st.one_of(*[good] * 9, anything)


def rarely(strategy: st.SearchStrategy, empty) -> st.SearchStrategy:
    """``strategy`` one time in ten, else ``empty``: a config with one mistake tells more than one with many."""
    return st.one_of(*[st.just(empty)] * 9, strategy)


def table_of(cls, model: str, extra: dict | None = None) -> st.SearchStrategy:
    hints = typing.get_type_hints(cls)
    fields = {f.name: field_value(f, hints[f.name], model) for f in dataclasses.fields(cls)}
    known = st.fixed_dictionaries({}, optional=fields)
    unknown = rarely(st.dictionaries(st.text(min_size=1, max_size=8), anything, min_size=1, max_size=1), {})
    return st.builds(lambda k, u, e: {**e, **k, **u}, known, unknown, st.just(extra or {}))


def config_documents(model: str) -> st.SearchStrategy:
    types = load_plugins().drafter_types()

    def drafter(type_name):
        return table_of(types[type_name].cls.Params, model, {"type": type_name})

    drafters = st.lists(st.one_of(*[st.sampled_from(sorted(types)).flatmap(drafter)] * 9,
                                  st.dictionaries(st.sampled_from(["type", "name"]), anything, max_size=2)),
                        max_size=3)
    sections = {name: table_of(cls, model, {"model": model, "threads": 1} if name == "target" else None)
                for name, cls in _SECTIONS.items()}
    return st.builds(lambda s, d, junk: {**junk, **s, "drafter": d},
                     st.fixed_dictionaries({"target": sections["target"]},
                                           optional={k: v for k, v in sections.items() if k != "target"}),
                     drafters, rarely(st.dictionaries(st.text(min_size=1, max_size=6), anything, min_size=1,
                                                      max_size=1), {}))


def fits_this_machine(config) -> bool:
    """Configs run only where the memory and CPU they ask for are small: the loader's bounds allow more."""
    t = config.target
    if t.n_ctx > 8192 or t.threads != 1:   # the synthetic model's memory is tiny up to there
        return False
    for d in config.drafters:
        if getattr(d.params, "pool_size", 0) > 1 << 22 or getattr(d.params, "n_ctx", 0) > 4096:
            return False
        if getattr(d.params, "max_ngrams", 0) > 1 << 20:
            return False
    return True


def load_and_run(path, outcomes: list) -> None:
    try:
        config = load_config(path)
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith(str(path)), message
        problem = message[len(str(path)) + 2:].split(": ", 1)[-1]
        event(f"ConfigError: {' '.join(problem.split()[:2])}")
        return
    event("loaded")
    if not fits_this_machine(config) or len(outcomes) >= 12 * SCALE:   # a few runs per test: each loads models
        return
    outcome = assert_result_or_one_line(cli("run", "--config", path, "-p", "the quick brown fox", "--raw", "-n", "6"))
    outcomes.append(outcome)
    event(f"run: {outcome}")


@pytest.fixture
def runs():
    """The outcomes of the runs one test made (conftest gives each test a cache of its own)."""
    return []


@fuzz(800)
@given(document=st.data())
def test_structured_configs_load_or_fail_in_one_line(document, tmp_path_factory, target_path, runs):
    data = document.draw(config_documents(str(target_path)))
    folder = tmp_path_factory.mktemp("config")
    path = folder / "config.toml"
    path.write_text(to_toml(data), encoding="utf-8")
    load_and_run(path, runs)


BASE_CONFIG = """[target]
model = "{model}"
n_ctx = 512
threads = 1
[sampling]
temperature = 0.5
top_p = 0.9
[speculative]
n_max = 8
order = ["pl", "cache"]
[generation]
max_tokens = 32
stop = ["\\n\\n"]
[[drafter]]
type = "prompt-lookup"
name = "pl"
max_ngram = 3
[[drafter]]
type = "ngram-cache"
name = "cache"
dynamic = "dyn.ngc"
save_dynamic = true
"""


@fuzz(500)
@given(mutations=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(["flip", "insert", "delete"]),
                                    st.integers(0, 255)), min_size=1, max_size=4))
def test_byte_mutated_configs_load_or_fail_in_one_line(mutations, tmp_path_factory, target_path, runs):
    data = bytearray(BASE_CONFIG.format(model=target_path).encode())
    for position, operation, byte in mutations:
        position %= len(data) + (operation == "insert")
        if operation == "flip" and position < len(data):
            data[position] ^= byte or 1
        elif operation == "insert":
            data.insert(position, byte)
        elif position < len(data):
            del data[position]
    path = tmp_path_factory.mktemp("mutated") / "config.toml"
    path.write_bytes(bytes(data))
    load_and_run(path, runs)


# --- n-gram cache files -------------------------------------------------------------------------------------------

_HEADER = struct.Struct("<8sIIQQII")


def encode(keys, lengths, pairs, *, version=VERSION, ngram_max=NGRAM_MAX, n_keys=None, n_pairs=None) -> bytes:
    """A cache file with whatever contents, and a correct checksum (so the contents themselves are checked)."""
    body = (np.asarray(keys, dtype="<i4").tobytes() + np.asarray(lengths, dtype="<u4").tobytes()
            + np.asarray(pairs, dtype="<i4").tobytes())
    header = _HEADER.pack(MAGIC, version, ngram_max, len(keys) // NGRAM_MAX if n_keys is None else n_keys,
                          len(pairs) // 2 if n_pairs is None else n_pairs, zlib.crc32(body), 0)
    return header + body


int32 = st.integers(-2**31, 2**31 - 1)
hostile_files = st.builds(
    lambda data: encode(*data),
    st.tuples(st.lists(st.sampled_from([-1, 0, 1, 2, 7, 2**31 - 1, -5]), max_size=16).map(
                  lambda k: k[:len(k) // NGRAM_MAX * NGRAM_MAX]),
              st.lists(st.integers(0, 2**32 - 1) | st.integers(0, 3), max_size=4),
              st.lists(int32 | st.integers(0, 9), max_size=12).map(lambda p: p[:len(p) // 2 * 2])),
) | st.builds(lambda v, m, k, p: encode([1, 2, -1, -1], [1], [3, 4], version=v, ngram_max=m, n_keys=k, n_pairs=p),
              st.sampled_from([VERSION, 0, 2]), st.sampled_from([NGRAM_MAX, 0, 8]),
              st.sampled_from([1, 0, 2**40, 2**64 - 1]), st.sampled_from([1, 0, 2**63]))


def valid_file() -> bytes:
    """A small cache with a saturated count, as ``NgramCache.save`` writes it."""
    cache = NgramCache()
    cache.update([1, 2, 3, 1, 2, 4, 1, 2, 3, 5, 6])
    cache.table[(9, 9)] = {2**31 - 1: 2**31 - 1}
    keys, lengths, pairs = [], [], []
    for key, part in cache.table.items():
        keys += list(key) + [-1] * (NGRAM_MAX - len(key))
        lengths.append(len(part))
        pairs += [x for item in part.items() for x in item]
    return encode(keys, lengths, pairs)


def flipped(data: bytes, flips) -> bytes:
    mutated = bytearray(data)
    for position, mask in flips:
        mutated[position % len(mutated)] ^= mask or 1
    return bytes(mutated)


VALID_FILE = valid_file()
mutated_files = st.lists(st.tuples(st.integers(0, 10**5), st.integers(0, 255)), min_size=1, max_size=3).map(
    lambda flips: flipped(VALID_FILE, flips))


@fuzz(500)
@given(content=hostile_files | mutated_files | st.binary(max_size=64),
       history=st.lists(st.integers(0, 600), min_size=1, max_size=24))
def test_ngram_cache_files_are_read_or_refused_in_one_line(content, history, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ngc")
    path = folder / "in.ngc"
    path.write_bytes(content)
    stats = assert_result_or_one_line(cli("ngram", "stats", path, "--json"))
    merged = assert_result_or_one_line(cli("ngram", "merge", path, path, "-o", folder / "out.ngc"))
    assert stats == merged
    try:
        cache = NgramCache.load(path)
    except NgramCacheError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))
        event(f"refused: {str(exc)[len(str(path)) + 2:].split(' (')[0].split(':')[0]}")
        return
    event("read")
    doubled = NgramCache.load(folder / "out.ngc")
    assert set(doubled.table) == set(cache.table)
    assert all(doubled.get(k)[t] == min(2 * c, 2**31 - 1) for k, part in cache.table.items() for t, c in part.items())
    drafter = NgramCacheDrafter(NgramCacheParams(n_draft=4, static=str(path), dynamic=str(path),
                                                 save_dynamic=True), env=None)
    drafter.begin(np.asarray(history[:1], dtype=np.int32))
    draft = drafter.draft(np.asarray(history, dtype=np.int32), 4)
    assert isinstance(draft, Draft) and len(draft) <= 4
    drafter.save()
    NgramCache.load(path)


# --- drafters returning arbitrary objects ------------------------------------------------------------------------

class Arbitrary(Drafter):
    """Returns whatever the test hands it."""

    name = "arbitrary"
    returns: object = None

    def draft(self, history, n_max):
        return self.returns


arrays = st.one_of(
    st.lists(st.integers(-2**40, 2**40) | st.integers(0, 600), max_size=20).map(np.array),
    st.lists(st.floats(allow_nan=True), max_size=5).map(np.array),
    st.lists(st.integers(0, 600), max_size=4).map(lambda v: np.array([v, v])),
    st.lists(text, max_size=3).map(np.array),
)
def converts(value) -> bool:
    """Whether numpy makes an array of it (a ragged list is the chain's known gap, tested apart below)."""
    try:
        np.asarray(value)
    except ValueError:
        return False
    return True


returned = st.one_of(
    anything, st.none(), arrays,
    st.builds(Draft, arrays, st.none() | arrays | st.just(np.full((2, 3), np.nan))),
    st.builds(Draft, st.just(np.array([1, 2], dtype=np.int32)), anything.filter(converts)),
    st.builds(Draft, anything.filter(converts)),
)


durations = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-2**70, 2**70) | st.text(max_size=4) \
    | st.none() | st.lists(st.floats(), max_size=2)
hostile_tables = st.fixed_dictionaries({
    "version": st.sampled_from([FORMAT_VERSION, FORMAT_VERSION, 2, "3", None]),
    "gpu": st.sampled_from([False, False, True, 0, "yes", None]),
    "measured_at": st.sampled_from(["now", "now", "future", "old", "nan"]),
    "other_load": st.none() | st.floats(allow_nan=True, allow_infinity=True),
    "seconds": st.dictionaries(st.sampled_from(["1", "2", "4", "16", "17", "0", "-3", "x", "1e3", " 2"]), durations,
                               max_size=6)
    | st.dictionaries(st.integers(1, 17).map(str), st.floats(1e-4, 1.0), min_size=1, max_size=17),
})


def table_text(document: dict) -> bytes:
    stamp = {"now": time.time(), "future": time.time() + 1e6, "old": time.time() - 1e8, "nan": float("nan")}
    return json.dumps({**document, "measured_at": stamp[document["measured_at"]]}).encode()


VALID_TABLE = PassCost({n: 0.03 + 0.01 * n for n in range(1, 18)}, measured_at=time.time(), other_load=0.0).to_json()
mutated_tables = st.lists(st.tuples(st.integers(0, 10**4), st.integers(0, 255)), min_size=1, max_size=3).map(
    lambda flips: flipped(VALID_TABLE.encode(), flips))


@fuzz(500)
@given(content=hostile_tables.map(table_text) | mutated_tables | st.binary(max_size=64))
def test_stored_pass_cost_tables_are_loaded_only_when_they_can_be_true(content, tmp_path_factory):
    store = PassCostStore(tmp_path_factory.mktemp("pass-cost"), "key")
    store.path.write_bytes(content)
    cost = store.load()
    if cost is None:
        assert not store.path.exists()          # set aside for good: deleted
        try:
            PassCost.from_json(content.decode("utf-8"))
        except UnicodeDecodeError:
            event("refused: not UTF-8")
        except PassCostError as exc:
            assert "\n" not in str(exc)
            event(f"refused: {str(exc).split(' (')[0].split(':')[0][:40]}")
        return
    check_table(cost.measured, cost.gpu)
    assert all(0 < cost.seconds(n) < 3600 for n in range(1, 65))
    event("loaded")


@fuzz(40)
@given(content=hostile_tables.map(table_text) | mutated_tables)
def test_an_engine_handed_any_stored_table_decodes_the_same(content, adaptive_engine):
    path = adaptive_engine.pass_cost_store.path
    path.parent.mkdir(parents=True, exist_ok=True)   # the engine may not have stored a table of its own yet
    path.write_bytes(content)
    adaptive_engine.pass_cost.__init__()     # forget the table in hand (shared with the drafters): the next request
                                             # reads the store, as a new process would
    result = adaptive_engine.generate("the quick brown fox", raw=True, max_tokens=8, drafters=["prompt-lookup"])
    assert result.tokens == adaptive_engine.plain
    check_table(adaptive_engine.pass_cost.measured)


def engine_on_fox(target_path, folder, speculative: str):
    """An engine on the synthetic model with the plain greedy continuation of the fuzzed prompt as ``plain``."""
    from specframe.engine import Engine

    config = folder / "config.toml"
    config.write_text(f'[target]\nmodel = "{target_path}"\nn_ctx = 256\nthreads = 1\n[speculative]\n{speculative}')
    engine = Engine.from_config(config)
    engine.plain = engine.generate("the quick brown fox", raw=True, max_tokens=8, speculative=False).tokens
    return engine


@pytest.fixture(scope="module")
def adaptive_engine(target_path, tmp_path_factory):
    with engine_on_fox(target_path, tmp_path_factory.mktemp("adaptive"),
                       'n_max = 4\n[[drafter]]\ntype = "prompt-lookup"\n') as engine:
        yield engine


@pytest.fixture(scope="module")
def greedy_engine(target_path, tmp_path_factory):
    with engine_on_fox(target_path, tmp_path_factory.mktemp("arbitrary"), "adaptive = false\n") as engine:
        yield engine


@fuzz(400)
@given(first=returned, later=returned)
def test_drafters_returning_arbitrary_objects_never_change_the_output(first, later, greedy_engine):
    drafter = Arbitrary(None, None)
    drafter.returns = first
    chain = greedy_engine.chain_of({"arbitrary": drafter})
    generation = greedy_engine.stream("the quick brown fox", raw=True, max_tokens=8, chain=chain)
    for _ in generation:
        drafter.returns = later
    result = generation.result
    assert result.tokens == greedy_engine.plain
    disabled = result.stats.drafters["arbitrary"].get("disabled")
    event(f"set aside: {disabled.split(' ')[0]} {disabled.split(' ')[1]}" if disabled else "kept")


@pytest.mark.parametrize("ragged", [Draft([[1], 2]), Draft(np.array([1, 2], dtype=np.int32), [[], False])],
                         ids=["tokens", "probs"])
def test_a_drafter_returning_ragged_lists_is_set_aside(ragged, greedy_engine):
    drafter = Arbitrary(None, None)
    drafter.returns = ragged
    result = greedy_engine.generate("the quick brown fox", raw=True, max_tokens=8,
                                    chain=greedy_engine.chain_of({"arbitrary": drafter}))
    assert result.tokens == greedy_engine.plain and "disabled" in result.stats.drafters["arbitrary"]
