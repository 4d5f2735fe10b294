"""build_llama.sh --amx: the CMake flags it plans, the patch it applies to a copy of the pinned llama.cpp, and
(slow, where an AMX build is at hand) that the build's smoke test runs its AMX kernels, or says it could not."""

import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys

import pytest

from specframe.llama import cpu_has_amx, library_prefix

REPO = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = REPO / "build_llama.sh"
AMX_PATCHES = sorted((REPO / "patches").glob("ggml-amx-*.patch"))
LLAMA_COMMIT = re.search(r"^LLAMA_COMMIT=(\w+)", SCRIPT.read_text(), re.M).group(1)  # type: ignore[union-attr]
X86 = platform.machine().lower() in ("x86_64", "amd64")


def build_llama(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def pinned_source() -> pathlib.Path:
    """The llama.cpp that build_llama.sh extracted beside the build in use (<cache>/src), or $LLAMA_CPP_DIR."""
    if os.environ.get("LLAMA_CPP_DIR"):
        return pathlib.Path(os.environ["LLAMA_CPP_DIR"])
    return library_prefix().parent.parent / "src" / f"llama.cpp-{LLAMA_COMMIT}"


def test_help_lists_amx():
    shown = build_llama("--help")
    assert shown.returncode == 0 and "--amx" in shown.stdout and "Emerald Rapids" in shown.stdout


@pytest.mark.skipif(not X86, reason="AMX is x86-64's")
def test_an_amx_build_plans_amx_kernels_beside_avx512_vnni_and_changes_nothing_else():
    default = build_llama("--cpu", "--print-cmake-args").stdout.split()
    amx = build_llama("--cpu", "--amx", "--print-cmake-args").stdout.split()
    assert {"-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF"} <= set(default)
    # ggml builds its AMX kernels only beside AVX-512 VNNI: ON whatever the CPU building it has
    assert {"-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=ON", "-DGGML_AMX_INT8=ON", "-DGGML_AVX512=ON",
            "-DGGML_AVX512_VNNI=ON"} <= set(amx)
    assert [f for f in amx if "AMX" not in f and "AVX512" not in f] == \
           [f for f in default if "AMX" not in f and "AVX512" not in f]


@pytest.mark.parametrize("backend", ["--cuda", "--metal"])
def test_amx_is_refused_for_a_gpu_build(backend):
    refused = build_llama(backend, "--amx", "--print-cmake-args")
    assert refused.returncode != 0 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "--amx is for CPU builds on x86-64" in refused.stderr


@pytest.mark.parametrize("patch_file", AMX_PATCHES, ids=lambda p: p.name)
def test_the_amx_patch_applies_to_the_pinned_source(patch_file):
    source = pinned_source()
    if shutil.which("patch") is None:
        pytest.skip("no patch program here (build_llama.sh --amx needs GNU patch)")
    if not (source / "ggml").is_dir():
        pytest.skip(f"no extracted llama.cpp at {source}: ./build_llama.sh extracts it")
    with open(patch_file) as patch:
        applied = subprocess.run(["patch", "-d", str(source), "-p1", "--dry-run", "--batch", "--forward"],
                                 stdin=patch, capture_output=True, text=True, timeout=60)
    assert applied.returncode == 0, applied.stdout + applied.stderr


def amx_builds() -> list[pathlib.Path]:
    """The build in use and those beside it that build_llama.sh --amx made."""
    in_use = library_prefix()
    found = []
    for prefix in dict.fromkeys([in_use, *sorted(in_use.parent.glob("cpu-amx-*"))]):
        args = prefix / "cmake-args.txt"
        if (prefix / ".complete").is_file() and args.is_file() and "-DGGML_AMX_INT8=ON" in args.read_text():
            found.append(prefix)
    return found


@pytest.mark.slow
def test_an_amx_build_runs_its_amx_kernels_or_says_it_could_not():
    builds = amx_builds()
    if not builds:
        pytest.skip(f"no AMX build (./build_llama.sh --amx) in use or beside {library_prefix()}")
    for build in builds:
        smoke = subprocess.run([sys.executable, "-m", "specframe.llama.smoke_test"], capture_output=True, text=True,
                               timeout=300, env={**os.environ, "SPECFRAME_LLAMA_PREFIX": str(build)})
        assert smoke.returncode == 0, smoke.stderr
        if cpu_has_amx():   # llama.cpp logged "AMX model buffer size": weights went to the AMX kernels
            assert re.search(r"weights in .*\bAMX \d", smoke.stderr), smoke.stderr
            assert "smoke test passed: a quantized model loads and evaluates, with AMX kernels" in smoke.stderr
        else:
            assert "AMX kernels could not be exercised here: this CPU has no amx_int8" in smoke.stderr
            assert "smoke test passed: a quantized model loads and evaluates\n" in smoke.stderr


@pytest.mark.slow
@pytest.mark.skipif(not X86 or shutil.which("cmake") is None, reason="an x86-64 machine with cmake")
def test_an_amx_build_patches_a_copy_of_the_source_and_configures(tmp_path):
    source = pinned_source()
    if not (source / "ggml").is_dir():
        pytest.skip(f"no extracted llama.cpp at {source}: ./build_llama.sh extracts it")
    kernel = pathlib.Path("ggml/src/ggml-cpu/amx/mmq.cpp")
    before = (source / kernel).read_text()
    configured = build_llama("--amx", "--configure-only", SPECFRAME_CACHE=str(tmp_path), LLAMA_CPP_DIR=str(source),
                             PYTHON=sys.executable)
    assert configured.returncode == 0, configured.stderr
    assert "configure-only: the cpu build configures" in configured.stderr
    (copy,) = (tmp_path / "src").glob("patched-*")
    assert "static constexpr tile_config_t tc" in (copy / kernel).read_text()
    assert (source / kernel).read_text() == before and "static constexpr tile_config_t" not in before
