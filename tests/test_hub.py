"""Models by Hugging Face reference, without the network: Hugging Face cannot be reached from the test machines.

What is covered: parsing references, picking a repository's files (llama.cpp's rule), and resolution through
huggingface_hub itself from a cache laid out on disk as huggingface_hub lays it out (models--OWNER--REPO with
blobs, snapshots and refs/main), offline; a listing that fails on a refused connection (a local port, not the
Hub) falling back to that cache; the online path (listing, picking, ``snapshot_download`` of the picked files)
against a local server that answers as the Hub does; ``models list``, ``path`` and ``pull``. Nothing is downloaded
from Hugging Face itself.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest
from click.testing import CliRunner

from specframe.cli import main
from specframe.engine import Engine
from specframe.errors import ConfigError, ModelError
from specframe.hub import HfRef, cached_models, parse_ref, pick_files
from specframe.llama import Model
from specframe.models import resolve_model
from specframe.testing import write_synthetic_model


def hub_cache() -> pathlib.Path:
    """The test's own Hugging Face cache (conftest points huggingface_hub at it)."""
    import huggingface_hub.constants

    return pathlib.Path(huggingface_hub.constants.HF_HUB_CACHE)


@pytest.fixture(scope="module")
def split_model(tmp_path_factory) -> dict[str, bytes]:
    """A synthetic model in three parts, named as a repository names its Q8_0 split model."""
    folder = tmp_path_factory.mktemp("split")
    write_synthetic_model(folder / "tiny-Q8_0.gguf", split_max_tensors=8)
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# --- references ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, repo, quant", [
    ("hf:Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M", "Qwen/Qwen2.5-Coder-7B-Instruct-GGUF", "Q4_K_M"),
    ("hf:ggml-org/gpt-oss-20b-GGUF", "ggml-org/gpt-oss-20b-GGUF", None),
    ("unsloth/Qwen3-8B-GGUF:UD-Q4_K_XL", "unsloth/Qwen3-8B-GGUF", "UD-Q4_K_XL"),
    ("bartowski/SmolLM2-135M-Instruct-GGUF", "bartowski/SmolLM2-135M-Instruct-GGUF", None),
])
def test_references_parse(spec, repo, quant, tmp_path):
    assert parse_ref(spec, tmp_path) == HfRef(repo, quant)
    assert str(HfRef(repo, quant)) == "hf:" + spec.removeprefix("hf:")


@pytest.mark.parametrize("spec", ["hf:Qwen", "hf:a/b/c", "hf:a/b:Q4:K", "hf:-a/b", "hf:a/b.", "hf:a--b/c",
                                  "hf:a/b:", "hf:", "hf:a/" + "b" * 100, "hf:a/b:Q4 K"])
def test_malformed_hf_references_are_one_line_errors(spec, tmp_path):
    with pytest.raises(ModelError) as error:
        parse_ref(spec, tmp_path)
    message = str(error.value)
    assert "\n" not in message and f"model '{spec}': expected a Hugging Face reference hf:OWNER/REPO[:QUANT]" \
        in message


def test_without_the_prefix_paths_stay_paths(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny").write_bytes(b"GGUF")
    assert parse_ref("models/tiny", tmp_path) is None             # an existing file
    assert parse_ref("models", tmp_path) is None                  # no owner/repo shape
    assert parse_ref("missing/model.gguf", tmp_path) is None      # a GGUF path, missing: reported as a file
    assert parse_ref("./a/b", tmp_path) is None and parse_ref("~/a", tmp_path) is None
    assert parse_ref("owner/repo:Q8_0", tmp_path) == HfRef("owner/repo", "Q8_0")


# --- picking files (llama.cpp's find_best_model) -------------------------------------------------------------

LISTING = [".gitattributes", "README.md", "model-Q8_0.gguf", "model-IQ4_XS.gguf", "mmproj-model-Q4_K_M.gguf",
           "model-Q4_K_M-00002-of-00002.gguf", "model-Q4_K_M-00001-of-00002.gguf", "model-f16.imatrix.gguf"]


def test_the_default_quant_is_q4_k_m_then_q8_0_then_the_first_model():
    assert pick_files(LISTING, HfRef("o/r")) == ["model-Q4_K_M-00001-of-00002.gguf",
                                                 "model-Q4_K_M-00002-of-00002.gguf"]
    without_q4 = [f for f in LISTING if "Q4_K_M" not in f]
    assert pick_files(without_q4, HfRef("o/r")) == ["model-Q8_0.gguf"]
    assert pick_files(["README.md", "a-BF16.gguf", "b-F16.gguf"], HfRef("o/r")) == ["a-BF16.gguf"]


def test_quants_match_case_insensitively_and_never_a_sidecar():
    assert pick_files(LISTING, HfRef("o/r", "iq4_xs")) == ["model-IQ4_XS.gguf"]
    assert pick_files(LISTING, HfRef("o/r", "q8_0")) == ["model-Q8_0.gguf"]
    assert pick_files(["mmproj-Q8_0.gguf", "m-Q8_0.gguf"], HfRef("o/r", "Q8_0")) == ["m-Q8_0.gguf"]
    assert pick_files(["sub/dir/m.q8_0.gguf"], HfRef("o/r", "Q8_0")) == ["sub/dir/m.q8_0.gguf"]


def test_a_split_model_is_every_part_the_first_first():
    listing = ["m-Q8_0-00003-of-00003.gguf", "m-Q8_0-00001-of-00003.gguf", "m-Q8_0-00002-of-00003.gguf"]
    assert pick_files(listing, HfRef("o/r", "Q8_0")) == sorted(listing)
    with pytest.raises(ModelError, match=r"hf:o/r:Q8_0: m-Q8_0-00001-of-00003.gguf is part 1 of 3, but part\(s\) "
                                         r"2 are not in the repository"):
        pick_files(listing[:2], HfRef("o/r", "Q8_0"))


def test_no_matching_file_names_the_quants_there_are():
    with pytest.raises(ModelError) as error:
        pick_files(LISTING, HfRef("o/r", "Q5_K_M"))
    assert str(error.value) == ("hf:o/r:Q5_K_M: no GGUF file of quant Q5_K_M in the repository; its quants: Q8_0, "
                                "IQ4_XS, Q4_K_M")
    with pytest.raises(ModelError, match=r"^hf:o/r: the repository has no GGUF model file \(its GGUF files: "
                                         r"mmproj-x.gguf\)$"):
        pick_files(["README.md", "mmproj-x.gguf"], HfRef("o/r"))


# --- resolution through huggingface_hub's cache --------------------------------------------------------------

def test_an_offline_reference_resolves_through_the_cache_and_libllama_loads_every_part(hf_repo, split_model):
    snapshot = hf_repo("tester/tiny-GGUF", {"README.md": b"# tiny", **split_model})
    path = resolve_model("hf:tester/tiny-GGUF:q8_0")
    assert path == snapshot / "tiny-Q8_0-00001-of-00003.gguf"   # the snapshot's name: libllama finds the parts
    assert resolve_model("tester/tiny-GGUF") == path             # bare reference, default quant falls to Q8_0
    with Model(path) as model:
        assert len(model.vocab.tokenize("hello", add_special=False)) > 0
    (snapshot / "tiny-Q8_0-00003-of-00003.gguf").unlink()
    with pytest.raises(ModelError, match="llama.cpp could not load"):   # the parts are read, not just the first
        Model(snapshot / "tiny-Q8_0-00001-of-00003.gguf")


def test_a_config_names_a_reference_and_the_engine_runs_it(hf_repo, split_model, write_config):
    hf_repo("tester/tiny-GGUF", split_model)
    config = write_config("""
        [target]
        model = "tester/tiny-GGUF:Q8_0"
        n_ctx = 512
        [speculative]
        adaptive = false
        [[drafter]]
        type = "draft-model"
        model = "hf:tester/tiny-GGUF"
        """)
    with Engine.from_config(config) as engine:
        result = engine.generate("the quick brown fox", max_tokens=8, raw=True)
    assert len(result.tokens) == 8 and result.stats.n_drafted > 0


def test_a_config_with_a_malformed_reference_names_the_key(write_config):
    from specframe.config import load_config

    config = write_config('[target]\nmodel = "hf:Qwen"\n')
    with pytest.raises(ConfigError) as error:
        load_config(config)
    assert str(error.value) == (f"{config}: target.model: model 'hf:Qwen': expected a Hugging Face reference "
                                f"hf:OWNER/REPO[:QUANT], e.g. hf:Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M")


def test_offline_and_not_cached_is_one_line():
    with pytest.raises(ModelError) as error:
        resolve_model("hf:tester/absent-GGUF:Q4_K_M")
    assert str(error.value) == (f"hf:tester/absent-GGUF:Q4_K_M: not in the Hugging Face cache ({hub_cache()}); "
                                f"HF_HUB_OFFLINE is set")


@pytest.fixture
def unreachable_hub(monkeypatch):
    """Online mode, with the Hub at a local port nothing listens on: every request is refused at once."""
    import socket

    import huggingface_hub.constants

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{port}")


def test_a_failed_listing_falls_back_to_the_cache_as_llama_cpp_does(hf_repo, unreachable_hub, split_model):
    with pytest.raises(ModelError) as error:
        resolve_model("hf:tester/tiny-GGUF:Q8_0")
    message = str(error.value)
    assert message.startswith(f"hf:tester/tiny-GGUF:Q8_0: not in the Hugging Face cache ({hub_cache()}); the "
                              f"repository cannot be listed on Hugging Face: ConnectError: ")
    assert "\n" not in message
    snapshot = hf_repo("tester/tiny-GGUF", split_model)
    assert resolve_model("hf:tester/tiny-GGUF:Q8_0") == snapshot / "tiny-Q8_0-00001-of-00003.gguf"


@pytest.fixture
def local_hub():
    """A local server that answers the few Hub API calls huggingface_hub makes to list and download a model
    repository (model info, tree, HEAD and GET of resolve URLs), from ``repos`` ({repo: {name: bytes}}); an
    unknown repository is a 404 with the Hub's RepoNotFound code. ``requests`` records the paths asked for."""
    import hashlib
    import http.server
    import re
    import threading
    import types
    import urllib.parse

    commit = "fedcba9876543210" * 2 + "fedcba98"
    repos, requests = {}, []

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.do_GET()

        def do_GET(self):
            path = urllib.parse.unquote(urllib.parse.urlparse(self.path).path)
            requests.append(f"{self.command} {path}")
            info = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/main)?", path)
            tree = re.fullmatch(rf"/api/models/([^/]+/[^/]+)/tree/{commit}", path)
            resolve = re.fullmatch(rf"/([^/]+/[^/]+)/resolve/{commit}/(.+)", path)
            repo = next((m[1] for m in (info, tree, resolve) if m), None)
            if repo not in repos or (resolve and resolve[2] not in repos[repo]):
                return self.answer(404, b"", {"X-Error-Code": "RepoNotFound"})
            files = repos[repo]
            if info:
                body = {"id": repo, "sha": commit, "siblings": [{"rfilename": name} for name in files]}
            elif tree:
                body = [{"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                        for name, data in files.items()]
            else:
                data = files[resolve[2]]
                return self.answer(200, data, {"X-Repo-Commit": commit,
                                               "ETag": f'"{hashlib.sha256(data).hexdigest()}"'})
            self.answer(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

        def answer(self, code, body, headers):
            self.send_response(code)
            for key, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def log_message(self, *args):
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield types.SimpleNamespace(url=f"http://127.0.0.1:{server.server_port}", repos=repos, requests=requests)
        server.shutdown()


def test_a_missing_repository_says_so(local_hub, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", local_hub.url)
    with pytest.raises(ModelError) as error:
        resolve_model("hf:tester/nothing-GGUF")
    assert str(error.value) == (f"hf:tester/nothing-GGUF: not in the Hugging Face cache ({hub_cache()}); the "
                                f"repository cannot be listed on Hugging Face: no such repository, or a private "
                                f"one: set HF_TOKEN")


def test_pull_lists_picks_and_downloads_through_huggingface_hub_from_a_local_hub(local_hub, split_model):
    """The online path, end to end, in a process configured as a user would (HF_ENDPOINT, HF_HUB_CACHE): from a
    local server, not from Hugging Face. Only the picked split model's parts are downloaded."""
    local_hub.repos["tester/tiny-GGUF"] = {"README.md": b"# tiny", "tiny-F16.gguf": b"other", **split_model}
    env = dict(os.environ, HF_ENDPOINT=local_hub.url, HF_HUB_CACHE=str(hub_cache()), HF_HUB_OFFLINE="0")
    pulled = subprocess.run([sys.executable, "-m", "specframe.cli", "models", "pull", "hf:tester/tiny-GGUF:Q8_0"],
                            env=env, capture_output=True, text=True)
    assert pulled.returncode == 0, pulled.stderr
    path = pathlib.Path(pulled.stderr.strip().splitlines()[-1].removeprefix("hf:tester/tiny-GGUF:Q8_0: "))
    assert path.name == "tiny-Q8_0-00001-of-00003.gguf" and path.parent.parent.name == "snapshots"
    assert {p.name: p.read_bytes() for p in path.parent.iterdir()} == split_model
    downloads = sorted(r.rsplit("/", 1)[1] for r in local_hub.requests if r.startswith("GET /tester/"))
    assert downloads == sorted(split_model)
    with Model(path) as model:
        assert len(model.vocab.tokenize("hello", add_special=False)) > 0
    assert resolve_model("hf:tester/tiny-GGUF:Q8_0") == path      # and offline afterwards, from the cache


# --- the command line ----------------------------------------------------------------------------------------

def test_models_list_shows_the_cache_with_sizes(hf_repo, split_model, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECFRAME_MODELS", str(tmp_path / "no-models"))   # the catalog's models: none fetched
    hf_repo("tester/tiny-GGUF", {**split_model, "tiny-F16.gguf": b"\0" * (3 << 19)})
    parts_size = sum(map(len, split_model.values()))
    listed = {m.filename: m for m in cached_models()}
    assert set(listed) == {"tiny-Q8_0-00001-of-00003.gguf", "tiny-F16.gguf"}
    assert listed["tiny-Q8_0-00001-of-00003.gguf"].size == parts_size
    assert listed["tiny-Q8_0-00001-of-00003.gguf"].parts == 3
    result = CliRunner().invoke(main, ["models", "list"], catch_exceptions=False)
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert "1.5 MiB  cached       tiny-F16.gguf" in lines["hf:tester/tiny-GGUF:F16"]
    assert "cached       tiny-Q8_0-00001-of-00003.gguf (3 parts)" in lines["hf:tester/tiny-GGUF:Q8_0"]
    assert "not fetched" in lines["gemma-3-270m-q4_k_m"] and "241 MiB" in lines["gemma-3-270m-q4_k_m"]
    rows = json.loads(CliRunner().invoke(main, ["models", "list", "--json"]).stdout)
    hub_rows = {r["name"]: r for r in rows if r["source"] == "huggingface"}
    assert hub_rows["hf:tester/tiny-GGUF:Q8_0"]["size"] == parts_size


def test_models_path_and_pull_in_a_process_that_huggingface_hub_configures_itself(hf_repo, split_model):
    """HF_HUB_CACHE and HF_HUB_OFFLINE as a user sets them, read by huggingface_hub when the command starts."""
    snapshot = hf_repo("tester/tiny-GGUF", split_model)
    env = dict(os.environ, HF_HUB_CACHE=str(hub_cache()), HF_HUB_OFFLINE="1")

    def specframe(*args):
        return subprocess.run([sys.executable, "-m", "specframe.cli", "models", *args], env=env,
                              capture_output=True, text=True)

    path = specframe("path", "hf:tester/tiny-GGUF:Q8_0")
    assert path.returncode == 0 and path.stdout.strip() == str(snapshot / "tiny-Q8_0-00001-of-00003.gguf")
    pulled = specframe("pull", "tester/tiny-GGUF")
    assert pulled.returncode == 0 and pulled.stderr.strip().endswith("tiny-Q8_0-00001-of-00003.gguf")
    missing = specframe("path", "hf:tester/other-GGUF")
    assert missing.returncode == 1 and missing.stderr == (
        f"Error: hf:tester/other-GGUF: not in the Hugging Face cache ({hub_cache()}); HF_HUB_OFFLINE is set\n")
