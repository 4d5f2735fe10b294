"""``specframe new-drafter NAME``: a pip-installable drafter plugin package to start from.

It writes ``specframe-NAME/`` with a working drafter (an ``IncrementalDrafter`` with a ``Params`` dataclass), its
tests (the drafter's own behaviour, ``specframe.testing``'s protocol checks, and the engine's output unchanged on a
synthetic model), a ``pyproject.toml`` that registers it through the ``specframe`` entry point, and a README. The
folder is written whole or not at all.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import tempfile
from string import Template

from specframe.errors import SpecframeError

_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
MAX_NAME_LENGTH = 40


class ScaffoldError(SpecframeError):
    """The package cannot be written as asked."""


def write_plugin_package(name: str, directory: str | os.PathLike = ".") -> pathlib.Path:
    """Write the plugin package ``specframe-NAME`` into ``directory``; return its folder."""
    _check_name(name)
    parent = pathlib.Path(directory)
    if not parent.is_dir():
        raise ScaffoldError(f"{parent}: no such folder to write the package into")
    target = parent / f"specframe-{name}"
    if os.path.lexists(target):
        raise ScaffoldError(f"{target} already exists: choose another name or folder")
    module = "specframe_" + name.replace("-", "_")
    camel = "".join(part.capitalize() for part in name.split("-"))
    base = camel.removesuffix("Drafter") or camel
    fields = {"name": name, "module": module, "cls": base + "Drafter", "params": base + "Params"}
    staging = pathlib.Path(tempfile.mkdtemp(prefix=f".specframe-{name}-", dir=parent))
    try:
        for path, template in FILES.items():
            file = staging / Template(path).substitute(fields)
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(Template(template).substitute(fields))
        staging.chmod(0o777 & ~_umask())
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _check_name(name: str) -> None:
    if not _NAME.match(name) or len(name) > MAX_NAME_LENGTH:
        raise ScaffoldError(f"drafter name {name!r}: expected lowercase letters and digits, words joined by single "
                            f"hyphens, starting with a letter, at most {MAX_NAME_LENGTH} characters "
                            "(e.g. 'my-drafter')")
    from specframe.plugins import load_plugins

    taken = load_plugins().drafter_types().get(name)
    if taken is not None:
        raise ScaffoldError(f"drafter type {name!r} is already registered by plugin {taken.plugin} (package "
                            f"{taken.package}): choose another name")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


PYPROJECT = '''\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "specframe-$name"
version = "0.1.0"
description = "A specframe drafter: $name"
readme = "README.md"
requires-python = ">=3.10"
dependencies = ["specframe", "numpy"]

[project.optional-dependencies]
test = ["pytest>=8"]

# specframe finds the drafters of installed packages through this entry-point group.
[project.entry-points.specframe]
$name = "$module"

[tool.setuptools]
packages = ["$module"]

[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["."]
'''

MODULE = '''\
"""$name: drafts what followed the latest earlier occurrence of the last ``n`` tokens.

A starting point: replace ``index`` and ``propose`` with your own idea. ``IncrementalDrafter`` hands ``index``
only the tokens that are new since the last call, so each call costs the same however long the history grows.
"""

from dataclasses import dataclass

from specframe import NO_DRAFT, Draft, IncrementalDrafter, hookimpl, param


@dataclass(frozen=True)
class $params:
    """The drafter's config keys: ``[[drafter]] type = "$name"`` then any of these."""

    n: int = param(3, min=1, max=64, help="how many of the last tokens to match")
    max_draft: int = param(16, min=1, max=1024, help="longest draft")


class $cls(IncrementalDrafter):
    """Drafts what followed the latest earlier occurrence of the last n tokens."""

    name = "$name"
    Params = $params

    def __init__(self, params: $params, env):
        super().__init__(params, env)
        self.latest: dict[tuple[int, ...], int] = {}   # n-gram -> where it started last

    def restart(self) -> None:
        """A new request: what was indexed belongs to the last one."""
        self.latest.clear()

    def indexable(self, length: int) -> int:
        """Every n-gram but the last one, which is what ``propose`` looks up."""
        return length - 1

    def index(self, tokens: list[int], start: int, stop: int) -> None:
        """Take in the n-grams that end at positions start .. stop - 1."""
        n = self.params.n
        for at in range(max(0, start - n + 1), stop - n + 1):
            self.latest[tuple(tokens[at:at + n])] = at

    def propose(self, tokens: list[int], n_max: int) -> Draft:
        n = self.params.n
        at = self.latest.get(tuple(tokens[-n:])) if len(tokens) > n else None
        if at is None:
            return NO_DRAFT
        follow = at + n
        return Draft.of(tokens[follow:follow + min(self.params.max_draft, n_max)])


@hookimpl
def register_drafters(register):
    register($cls)
'''

TESTS = '''\
"""$name: its drafts where the right draft is known, the protocol checks, and the engine's output unchanged."""

import numpy as np
import pytest
from specframe.testing import assert_drafter_ok, fake_env, write_synthetic_model

from $module import $cls, $params


def drafted(history, n_max=16, **params):
    drafter = $cls($params(**params), fake_env())
    drafter.begin(np.array(history[:1], dtype=np.int32), None)
    return drafter.draft(np.array(history, dtype=np.int32), n_max).tokens.tolist()


def test_drafts_what_followed_the_last_tokens_before():
    assert drafted([1, 2, 3, 4, 5, 1, 2, 3], n=3) == [4, 5, 1, 2, 3]
    assert drafted([1, 2, 3, 4, 5, 1, 2, 3], n=3, n_max=2) == [4, 5]
    assert drafted([1, 2, 7, 1, 2, 8, 1, 2], n=2) == [8, 1, 2]      # the latest occurrence
    assert drafted([1, 2, 3, 4], n=2) == []                         # never seen before


def test_passes_the_protocol_checks():
    assert_drafter_ok($cls)
    assert_drafter_ok($cls, $params(n=1, max_draft=4))


@pytest.fixture
def engine(tmp_path):
    from specframe.engine import Engine

    model = write_synthetic_model(tmp_path / "model.gguf", seed=0)   # a tiny random model: no download
    config = tmp_path / "config.toml"
    config.write_text(f'[target]\\nmodel = "{model}"\\nn_ctx = 512\\n[speculative]\\nadaptive = false\\n')
    with Engine.from_config(config) as engine:
        yield engine


def test_speculation_leaves_the_output_unchanged(engine):
    drafter = $cls($params(), engine.drafters.env)
    prompt = "ab ab ab ab ab ab"
    plain = engine.generate(prompt, raw=True, speculative=False, max_tokens=100)
    spec = engine.generate(prompt, raw=True, chain=engine.chain_of({"$name": drafter}), max_tokens=100)
    assert spec.tokens == plain.tokens
    stats = spec.stats.drafters["$name"]
    assert stats["accepted_tokens"] > 0 and "disabled" not in stats
'''

README = '''\
# specframe-$name

A drafter plugin for specframe: `$name` drafts what followed the latest earlier occurrence of the last `n`
tokens.

    pip install -e '.[test]'
    specframe plugins              # lists "$name (plugin $name, package specframe-$name)"
    pytest                         # its behaviour, specframe.testing's protocol checks, the engine on a tiny model

Use it in a config:

```toml
[[drafter]]
type = "$name"
n = 3
max_draft = 16
```

Compare it with the built-in drafters on your target (plain decoding, each drafter alone, the chain and the oracle):
add its `[[drafter]]` table next to theirs and run `specframe bench --config config.toml --repeat 3`.

Publish: `python -m build` then `twine upload dist/*`; users `pip install specframe-$name` and it is found
through the `specframe` entry point in `pyproject.toml`.
'''

FILES = {
    "pyproject.toml": PYPROJECT,
    "README.md": README,
    "$module/__init__.py": MODULE,
    "tests/test_$module.py": TESTS,
}
