"""What runs write survives: n-gram cache files shared by processes, saturating counts, failed saves, output paths
checked before the work, a dynamic cache that stays bounded in a long-lived engine, and ngram-mod's pool saved and
read again (suffix's global index: tests/test_suffix.py)."""

import dataclasses
import logging
import multiprocessing
import os
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

from specframe.cli import main
from specframe.config import load_config
from specframe.drafters.ngram_mod import NgramModDrafter, NgramModParams
from specframe.engine import Engine
from specframe.errors import ConfigError
from specframe.files import atomic_output
from specframe.ngram_counts import COUNT_MAX, NgramCache
from specframe.testing import fake_env

PROMPTS = ["one two three one two three one two", "alpha beta gamma alpha beta gamma alpha"]


def run(*args):
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def dynamic_config(write_config, target_path):
    """A config whose ngram-cache learns into ``dynamic.ngc`` beside it."""

    def make(extra: str = "", name: str = "config.toml"):
        return write_config(f"""
            [target]
            model = "{target_path}"
            n_ctx = 256
            threads = 1
            [generation]
            max_tokens = 16
            [speculative]
            adaptive = false
            [[drafter]]
            type = "ngram-cache"
            dynamic = "dynamic.ngc"
            save_dynamic = true
            """ + textwrap.dedent(extra), name=name)

    return make


def learned(engine: Engine, prompt: str, **options) -> NgramCache:
    """The n-grams one request on ``engine`` teaches its ngram-cache drafter (what it saw of the history)."""
    engine.generate(prompt, raw=True, **options)
    seen = NgramCache()
    seen.merge(engine.chain().entries[0].drafter.context)
    return seen


def test_two_engines_saving_the_same_dynamic_cache_both_count(dynamic_config):
    path = dynamic_config()
    first, second = Engine.from_config(path), Engine.from_config(path)   # both read the file before either saves
    one, other = learned(first, PROMPTS[0]), learned(second, PROMPTS[1])
    first.close()
    second.close()
    saved = NgramCache.load(path.parent / "dynamic.ngc")
    assert set(one.table) - set(other.table) and set(other.table) - set(one.table)
    one.merge(other)
    assert saved.table == one.table
    assert [p.name for p in path.parent.iterdir() if "dynamic" in p.name] == ["dynamic.ngc", "dynamic.ngc.lock"]


def _add_repeatedly(path: str, token: int, times: int) -> None:
    cache = NgramCache()
    cache.update([token, token + 1])
    for _ in range(times):
        cache.add_to_file(path)


def test_processes_adding_to_one_file_at_once_lose_nothing_and_leave_no_temporary_files(tmp_path):
    path = str(tmp_path / "shared.ngc")
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_add_repeatedly, args=(path, 10 * i, 25)) for i in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    saved = NgramCache.load(path)
    assert {key: part for key, part in saved.table.items()} == {(10 * i,): {10 * i + 1: 25} for i in range(3)}
    assert sorted(os.listdir(tmp_path)) == ["shared.ngc", "shared.ngc.lock"]


def test_a_file_a_library_writes_replaces_the_old_one_whole_or_not_at_all(tmp_path):
    """atomic_output: the writer is given a temporary path; the old file stays until the block ends, a writer that
    raises leaves it untouched, and a killed writer's temporary file is removed by the next write once stale."""
    target = tmp_path / "model.gguf"
    target.write_bytes(b"old")
    orphan = tmp_path / ".model.gguf.999999.partial"      # a writer killed long ago
    orphan.write_bytes(b"half")
    os.utime(orphan, (0, 0))
    with pytest.raises(RuntimeError), atomic_output(target) as temporary:
        temporary.write_bytes(b"half of the new")
        raise RuntimeError("the writer failed")
    assert target.read_bytes() == b"old" and not temporary.exists() and orphan.exists()
    with atomic_output(target) as temporary:
        temporary.write_bytes(b"new")
        assert target.read_bytes() == b"old"
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf"]


def test_counts_saturate_at_the_int32_limit_in_memory_merges_and_files(tmp_path):
    near = NgramCache()
    near.table[(1, 2)] = {3: COUNT_MAX - 1}
    near.update([1, 2, 3, 1, 2, 3])
    assert near.get((1, 2)) == {3: COUNT_MAX}
    near.save(tmp_path / "a.ngc")
    near.save(tmp_path / "b.ngc")
    result = run("ngram", "merge", str(tmp_path / "a.ngc"), str(tmp_path / "b.ngc"), "-o", str(tmp_path / "c.ngc"))
    assert result.exit_code == 0, result.output
    assert NgramCache.load(tmp_path / "c.ngc").get((1, 2)) == {3: COUNT_MAX}


def test_a_dynamic_cache_in_a_missing_folder_is_refused_when_the_config_loads(dynamic_config, tmp_path):
    path = dynamic_config().read_text().replace('"dynamic.ngc"', '"no/such/folder/dynamic.ngc"')
    (tmp_path / "missing.toml").write_text(path)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "missing.toml")
    assert "drafter[0] (type 'ngram-cache').dynamic: 'no/such/folder/dynamic.ngc': folder " in str(info.value)
    assert "does not exist" in str(info.value)


def test_a_failed_save_ends_the_run_with_an_error_after_the_text(dynamic_config, monkeypatch):
    def disk_full(self, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(NgramCache, "save", disk_full)
    result = run("run", "--config", str(dynamic_config()), "-p", PROMPTS[0], "--raw")
    assert result.exit_code == 1
    assert result.stdout.strip() and "stop: max_tokens" in result.stderr
    assert result.stderr.count("No space left on device") == 1           # reported once, as the error
    assert result.stderr.strip().splitlines()[-1].startswith(
        "Error: drafter 'ngram-cache' (plugin specframe.drafters.ngram_cache) could not save what it learned")


MISSING_FOLDER = "folder /nonexistent does not exist"


@pytest.mark.parametrize("command,problem", [
    (["ngram", "build", "CORPUS", "--model", "MODEL", "-o", "/nonexistent/x.ngc"], MISSING_FOLDER),
    (["ngram", "merge", "CORPUS", "-o", "/nonexistent/x.ngc"], MISSING_FOLDER),
    (["bench", "--config", "CONFIG", "-n", "2", "--json", "/nonexistent/x.json"], MISSING_FOLDER),
    (["bench", "--config", "CONFIG", "-n", "2", "--plot", "/nonexistent/x.png"], MISSING_FOLDER),
    (["ngram", "build", "CORPUS", "--model", "MODEL", "-o", "FOLDER"], "is a directory, not a file"),
])
def test_output_paths_are_checked_before_the_work(command, problem, tmp_path, target_path, dynamic_config,
                                                  monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("x = 1\n" * 100)
    places = {"CORPUS": str(corpus), "MODEL": str(target_path), "CONFIG": str(dynamic_config()),
              "FOLDER": str(tmp_path)}
    worked = []
    monkeypatch.setattr("specframe.llama.model.Model.__init__", lambda *a, **k: worked.append(a) or 1 / 0)
    monkeypatch.setattr(NgramCache, "load", lambda *a, **k: worked.append(a) or 1 / 0)
    result = run(*[places.get(part, part) for part in command])
    assert result.exit_code == 2 and not worked
    assert result.stderr.strip().splitlines()[-1].startswith("Error: Invalid value for")
    assert problem in result.stderr


def test_the_dynamic_cache_stays_under_its_cap_in_a_long_lived_engine(dynamic_config):
    path = dynamic_config("max_ngrams = 1024\n")
    uncapped = NgramCache()
    with Engine.from_config(path) as engine:
        drafter = engine.chain().entries[0].drafter
        sizes = []
        for i in range(12):
            uncapped.merge(learned(engine, f"request {i}: " + " ".join(str(i * j) for j in range(40)),
                                   max_tokens=48))
            sizes.append(len(drafter.dynamic))
        assert len(uncapped) > 2 * 1024 and max(sizes) <= 1024 and len(drafter.learned) <= 1024
    assert len(NgramCache.load(path.parent / "dynamic.ngc")) <= 1024
    help_text = {parameter["name"]: parameter["help"] for parameter in
                 engine.config.drafters[0].drafter_type.describe()["parameters"]}["max_ngrams"]
    assert "past it, the least observed are dropped" in help_text


def test_examples_write_their_caches_where_git_ignores_them():
    import pathlib
    import subprocess

    root = pathlib.Path(__file__).resolve().parent.parent
    written = ["examples/dynamic.ngc", "examples/corpus.ngc", "examples/suffix.state", "examples/ngram-mod.state",
               "examples/suffix.state.corrupt"]
    ignored = subprocess.run(["git", "check-ignore", *written], cwd=root, capture_output=True, text=True)
    assert ignored.stdout.split() == written


def test_ngram_mods_pool_survives_a_restart_and_one_for_other_settings_is_set_aside(tmp_path, caplog):
    env = fake_env(1000, config_dir=tmp_path)
    params = NgramModParams(n_match=3, n_min=1, n_max=8, pool_size=1024, state="pool.state", save_state=True)
    first = NgramModDrafter(params, env)
    history = np.random.default_rng(0).integers(0, 30, 400).astype(np.int32)
    first.begin(history[:100])
    for length in range(100, 400, 7):
        first.draft(history[:length], 8)
    first.save()
    again = NgramModDrafter(dataclasses.replace(params, save_state=False), env)
    assert np.array_equal(again.pool, first.pool) and again.used == first.used > 0
    again.begin(history[:2])
    assert again.draft(history[:60], 8).tokens.tolist() == first.draft(history[:60], 8).tokens.tolist() != []
    with caplog.at_level(logging.WARNING):
        other = NgramModDrafter(dataclasses.replace(params, pool_size=2048), env)
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1 and "written for n_match 3 and pool_size 1024" in lines[0] and "set aside" in lines[0]
    assert other.used == 0 and (tmp_path / "pool.state.corrupt").exists() and not (tmp_path / "pool.state").exists()


def test_a_restarted_engine_drafts_from_ngram_mods_saved_pool(write_config, target_path):
    path = write_config(f"""
        [target]
        model = "{target_path}"
        n_ctx = 512
        [generation]
        max_tokens = 64
        [speculative]
        adaptive = false
        [[drafter]]
        type = "ngram-mod"
        n_match = 4
        n_min = 2
        pool_size = 4096
        state = "pool.state"
        save_state = true
        """)
    with Engine.from_config(path) as engine:
        before = engine.generate(PROMPTS[0], raw=True)
    with Engine.from_config(path) as engine:
        after = engine.generate(PROMPTS[0], raw=True)
    assert after.tokens == before.tokens
    assert after.stats.n_accepted > before.stats.n_accepted
