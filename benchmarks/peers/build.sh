#!/usr/bin/env bash
# Build the peers that benchmarks/peers/run.py measures specframe against, from the pinned llama.cpp (0c1e570) with
# the CPU flags of our libllama build (./build_llama.sh --print-cmake-args), and print their folder as the last
# line of stdout:
#   bin/     llama.cpp's llama-bench, llama-completion, llama-speculative-simple, llama-lookup (and their libraries)
#   server/  llama.cpp's llama-server (and its libraries), without its web UI, for benchmarks/serving.py
#   venv/    llama-cpp-python 0.3.36 built from its sdist, the same flags passed through CMAKE_ARGS
#
#   benchmarks/peers/build.sh [--force] [--jobs N] [--cuda] [--tools-only | --server-only]
#
# --cuda builds the tools for NVIDIA GPUs (the flags of ./build_llama.sh --cuda); --tools-only builds llama.cpp's
# tools alone (bin/), neither llama-server nor llama-cpp-python: each of those compiles ggml again, which for CUDA
# takes minutes. --server-only builds llama-server alone (server/, for benchmarks/serving.py, structured.py and
# editor.py), neither the tools nor llama-cpp-python (nor fetches its sdist).
#
# Source: $LLAMA_CPP_DIR when set, otherwise the tree that ./build_llama.sh extracts into
# ${SPECFRAME_CACHE:-${XDG_CACHE_HOME:-~/.cache}/specframe}/src/llama.cpp-0c1e570 (run here when it is missing).
# Cache: <cache>/peers/<key>/, <key> hashing the source identity, the flags, the compiler and RECIPE_VERSION (the
# venv's completion mark holds the sdist's hash, so that --tools-only, --server-only and a full build share their
# parts); each part is marked complete on its own, so a second run builds nothing and a failed part is all that a
# rerun builds.
# First build: about 35 minutes on 2 cores (15 the tools, 10 llama-server, 10 llama-cpp-python).
set -euo pipefail

TAG=peers/build
USAGE_LINES=2,22
RECIPE_VERSION=1   # bump when the way the peers are configured changes
TOOLS=(llama-bench llama-completion llama-speculative-simple llama-lookup)
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../common.sh"

# Run a build step with its output in a log; on failure show the log's end and stop.
logged() {
    local log=$1 what=$2; shift 2
    "$@" > "$log" 2>&1 || { tail -40 "$log" >&2; die "$what failed; log: $log"; }
}

# --- sources --------------------------------------------------------------------------------------------------
[ -f "$SRC_DIR/examples/speculative-simple/speculative-simple.cpp" ] \
    || die "$SRC_DIR has no examples/speculative-simple: not a llama.cpp tree"
SOURCE_ID=$(source_id src ggml include common vendor tools examples CMakeLists.txt cmake)

SDIST="$CACHE_DIR/src/llama_cpp_python-$SDIST_VERSION.tar.gz"   # build_llama.sh keeps it there, sha256-checked
SDIST_ID=none                        # --tools-only, --server-only: llama-cpp-python is not built
if [ "$TOOLS_ONLY" = 0 ] && [ "$SERVER_ONLY" = 0 ]; then
    if [ ! -f "$SDIST" ]; then
        say "downloading the llama-cpp-python==$SDIST_VERSION sdist"
        mkdir -p "$(dirname "$SDIST")"
        "$PYTHON" -m pip download --quiet --no-deps --no-binary llama-cpp-python -d "$(dirname "$SDIST")" \
            "llama-cpp-python==$SDIST_VERSION" || die "could not download llama-cpp-python==$SDIST_VERSION from PyPI"
    fi
    SDIST_ID=$(hash_stdin < "$SDIST")
fi

# --- flags and key --------------------------------------------------------------------------------------------
TOOLS_CMAKE_ARGS=(
    -G Ninja
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=ON
    -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF
    -DLLAMA_BUILD_COMMIT=$LLAMA_COMMIT -DLLAMA_BUILD_NUMBER=0
    "-DCMAKE_INSTALL_RPATH=\$ORIGIN" -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON   # tools find their libraries beside them
    "${CPU_FLAGS[@]}"
)
COMPILER_ID=$(c++ --version 2>/dev/null | head -1)
KEY=$(printf '%s\n' "$RECIPE_VERSION" "$SOURCE_ID" "$COMPILER_ID" "${TOOLS_CMAKE_ARGS[@]}" | hash_stdin)
OUT_DIR="$CACHE_DIR/peers/$KEY"
mkdir -p "$OUT_DIR"

# --- llama.cpp tools ------------------------------------------------------------------------------------------
if [ "$SERVER_ONLY" = 1 ]; then
    say "--server-only: the llama.cpp tools are not built"
elif [ "$FORCE" = 1 ] || [ ! -f "$OUT_DIR/bin/.complete" ]; then
    BUILD_DIR="$CACHE_DIR/peers/build-$KEY"
    say "building ${TOOLS[*]} from $SRC_DIR (first time: about 15 minutes on 2 cores)"
    logged "$OUT_DIR/tools-configure.log" "cmake configure" cmake -S "$SRC_DIR" -B "$BUILD_DIR" "${TOOLS_CMAKE_ARGS[@]}"
    logged "$OUT_DIR/tools-build.log" "the llama.cpp tools build" cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TOOLS[@]}"
    rm -rf "$OUT_DIR/bin" && mkdir -p "$OUT_DIR/bin"
    cp -P "$BUILD_DIR"/bin/*.so* "$OUT_DIR/bin/"
    for tool in "${TOOLS[@]}"; do cp "$BUILD_DIR/bin/$tool" "$OUT_DIR/bin/"; done
    printf '%s\n' "${TOOLS_CMAKE_ARGS[@]}" > "$OUT_DIR/bin/cmake-args.txt"
    rm -rf "$BUILD_DIR"
    touch "$OUT_DIR/bin/.complete"
else
    say "llama.cpp tools are up to date in $OUT_DIR/bin"
fi

# --- llama-server ---------------------------------------------------------------------------------------------
# Built apart from the tools (the same flags plus the server's), so that adding it rebuilt nothing else; the UI is
# left out (it would be fetched from the network) and is not measured.
if [ "$TOOLS_ONLY" = 1 ]; then
    say "--tools-only: llama-server is not built"
elif [ "$FORCE" = 1 ] || [ ! -f "$OUT_DIR/server/.complete" ]; then
    BUILD_DIR="$CACHE_DIR/peers/build-server-$KEY"
    say "building llama-server from $SRC_DIR (first time: about 10 minutes on 2 cores)"
    logged "$OUT_DIR/server-configure.log" "cmake configure (llama-server)" cmake -S "$SRC_DIR" -B "$BUILD_DIR" \
        "${TOOLS_CMAKE_ARGS[@]}" -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
    logged "$OUT_DIR/server-build.log" "the llama-server build" cmake --build "$BUILD_DIR" -j "$JOBS" --target llama-server
    rm -rf "$OUT_DIR/server" && mkdir -p "$OUT_DIR/server"
    cp -P "$BUILD_DIR"/bin/*.so* "$OUT_DIR/server/"
    cp "$BUILD_DIR/bin/llama-server" "$OUT_DIR/server/"
    rm -rf "$BUILD_DIR"
    touch "$OUT_DIR/server/.complete"
else
    say "llama-server is up to date in $OUT_DIR/server"
fi

# --- llama-cpp-python -----------------------------------------------------------------------------------------
if [ "$SDIST_ID" = none ]; then
    say "--$([ "$TOOLS_ONLY" = 1 ] && echo tools || echo server)-only: llama-cpp-python is not built"
elif [ "$FORCE" = 1 ] || [ "$(cat "$OUT_DIR/venv/.complete" 2>/dev/null)" != "$SDIST_ID" ]; then
    say "building llama-cpp-python $SDIST_VERSION from its sdist into $OUT_DIR/venv (about 10 minutes on 2 cores)"
    rm -rf "$OUT_DIR/venv"
    logged "$OUT_DIR/venv.log" "creating the venv" "$PYTHON" -m venv "$OUT_DIR/venv"
    # scikit-build-core builds Release. LLAVA_BUILD=OFF: the multimodal library is not measured. CMAKE_ARGS is
    # split on spaces: the CPU flags have none.
    logged "$OUT_DIR/llama-cpp-python-build.log" "the llama-cpp-python build" \
        env CMAKE_ARGS="${CPU_FLAGS[*]} -DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
        "$OUT_DIR/venv/bin/python" -m pip install --verbose --no-cache-dir "$SDIST"
    echo "$SDIST_ID" > "$OUT_DIR/venv/.complete"   # the venv is the sdist's: another one rebuilds it alone
else
    say "llama-cpp-python is up to date in $OUT_DIR/venv"
fi

printf 'commit=%s\nsource=%s\nllama-cpp-python=%s\ncompiler=%s\n' "$LLAMA_COMMIT" "$SOURCE_ID" "$SDIST_VERSION" \
    "$COMPILER_ID" > "$OUT_DIR/build-info.txt"
say "ready: $OUT_DIR"
echo "$OUT_DIR"
