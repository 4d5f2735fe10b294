"""specframe new-drafter: the package it writes registers, passes the protocol checks and its own tests; bad names
and existing folders are refused in one line."""

import importlib.util
import subprocess
import sys

import pytest
from click.testing import CliRunner

from specframe.cli import main
from specframe.plugins import load_plugins
from specframe.testing import check_drafter

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def new_drafter(name, directory):
    return CliRunner().invoke(main, ["new-drafter", "--dir", str(directory), "--", name])


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plugins")
    result = new_drafter("tail-copy", folder)
    assert result.exit_code == 0, result.output
    return folder / "specframe-tail-copy"


def test_the_package_has_its_entry_point_module_tests_and_readme(package):
    assert sorted(p.relative_to(package).as_posix() for p in package.rglob("*") if p.is_file()) == [
        "README.md", "pyproject.toml", "specframe_tail_copy/__init__.py", "tests/test_specframe_tail_copy.py"]
    project = tomllib.loads((package / "pyproject.toml").read_text())
    assert project["project"]["name"] == "specframe-tail-copy"
    assert project["project"]["entry-points"]["specframe"] == {"tail-copy": "specframe_tail_copy"}
    assert "pytest" in (package / "README.md").read_text()


def test_the_drafter_registers_and_passes_the_protocol_checks(package, monkeypatch):
    monkeypatch.syspath_prepend(str(package))
    kind = load_plugins(["specframe_tail_copy"]).drafter_types()["tail-copy"]
    assert kind.plugin == "specframe_tail_copy" and kind.cls.__name__ == "TailCopyDrafter"
    assert [p["name"] for p in kind.describe()["parameters"]] == ["n", "max_draft"]
    report = check_drafter(kind.cls)
    assert report.ok, report


def test_the_drafter_drafts_what_followed_the_last_tokens(package):
    spec = importlib.util.spec_from_file_location("generated", package / "specframe_tail_copy" / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import numpy as np

    drafter = module.TailCopyDrafter(module.TailCopyParams(n=2), None)
    history = np.array([5, 6, 7, 8, 5, 6], dtype=np.int32)
    assert drafter.draft(history, 3).tokens.tolist() == [7, 8, 5]


def test_the_generated_tests_pass(package):
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=package,
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


@pytest.mark.parametrize("name,expected", [
    ("Tail", "drafter name 'Tail': expected lowercase letters and digits"),
    ("tail_copy", "drafter name 'tail_copy': expected"),
    ("tail--copy", "drafter name 'tail--copy': expected"),
    ("-tail", "drafter name '-tail': expected"),
    ("ngram-simple", "drafter type 'ngram-simple' is already registered by plugin specframe.drafters.ngram_simple"),
])
def test_a_bad_name_is_refused_in_one_line(tmp_path, name, expected):
    result = new_drafter(name, tmp_path)
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {expected}") and result.output.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_an_existing_folder_or_a_missing_dir_is_refused_in_one_line(package, tmp_path):
    before = sorted(package.rglob("*"))
    result = new_drafter("tail-copy", package.parent)
    assert result.exit_code == 1
    assert result.output == f"Error: {package} already exists: choose another name or folder\n"
    assert sorted(package.rglob("*")) == before
    result = new_drafter("tail-copy", tmp_path / "missing")
    assert result.output == f"Error: {tmp_path / 'missing'}: no such folder to write the package into\n"
