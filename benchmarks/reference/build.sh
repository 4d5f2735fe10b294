#!/usr/bin/env bash
# Build benchmarks/reference/ngram_reference.cpp against llama.cpp's `llama-common` library (pinned 0c1e570, CPU,
# static) and print the binary's path as the last line of stdout.
#
#   benchmarks/reference/build.sh [--force] [--jobs N]
#
# Source: $LLAMA_CPP_DIR when set, otherwise the tree that ./build_llama.sh extracts into
# ${SPECFRAME_CACHE:-${XDG_CACHE_HOME:-~/.cache}/specframe}/src/llama.cpp-0c1e570 (run here when it is missing).
# Cache: <cache>/reference/<key>/ngram_reference, <key> hashing the source identity, compiler, flags and the
# content of ngram_reference.cpp and CMakeLists.txt; a second run with the same inputs builds nothing. The CMake
# build tree <cache>/reference/build-<libkey> (libkey: the same minus the program's own files) is kept, so an
# edit of the .cpp recompiles only the .cpp.
set -euo pipefail

LLAMA_COMMIT=0c1e570
RECIPE_VERSION=1   # bump when the way the build is configured changes

say() { printf '[reference/build] %s\n' "$*" >&2; }
die() { printf '[reference/build] error: %s\n' "$*" >&2; exit 1; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-python3}
CACHE_DIR=${SPECFRAME_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specframe}
JOBS=2
FORCE=0
while [ $# -gt 0 ]; do
    case "$1" in
        --force) FORCE=1 ;;
        --jobs) JOBS=${2:?--jobs needs a number}; shift ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option '$1' (expected --force, --jobs N)" ;;
    esac
    shift
done

# tools: the ones build_llama.sh may have installed from PyPI come first
export PATH="$CACHE_DIR/tools/bin:$PATH"
command -v cmake >/dev/null || die "cmake not found (./build_llama.sh installs it from PyPI into $CACHE_DIR/tools)"
command -v ninja >/dev/null || die "ninja not found (./build_llama.sh installs it from PyPI into $CACHE_DIR/tools)"
command -v c++ >/dev/null || die "no C++ compiler (c++) found"

hash_stdin() { "$PYTHON" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])'; }
hash_file() { hash_stdin < "$1"; }

# --- source ------------------------------------------------------------------------------------------------
if [ -n "${LLAMA_CPP_DIR:-}" ]; then
    SRC_DIR=$(cd "$LLAMA_CPP_DIR" && pwd) || die "LLAMA_CPP_DIR=$LLAMA_CPP_DIR is not a directory"
else
    SRC_DIR="$CACHE_DIR/src/llama.cpp-$LLAMA_COMMIT"
    if [ ! -f "$SRC_DIR/.specframe-complete" ]; then
        say "no llama.cpp source at $SRC_DIR: running ./build_llama.sh --no-smoke-test to fetch it"
        "$REPO_DIR/build_llama.sh" --no-smoke-test >&2 || die "build_llama.sh failed"
    fi
fi
[ -f "$SRC_DIR/common/speculative.h" ] || die "$SRC_DIR has no common/speculative.h: not a llama.cpp tree"
# identity: the path and the newest modification time of everything that goes into the program
newest=$(find "$SRC_DIR/src" "$SRC_DIR/ggml" "$SRC_DIR/include" "$SRC_DIR/common" "$SRC_DIR/vendor" \
              "$SRC_DIR/CMakeLists.txt" "$SRC_DIR/cmake" -type f -printf '%T@\n' | sort -n | tail -1)
SOURCE_ID="$SRC_DIR:$LLAMA_COMMIT:$newest"

CMAKE_ARGS=(
    -G Ninja
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=OFF
    -DGGML_NATIVE=OFF
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
    -DLLAMA_BUILD_COMMIT=$LLAMA_COMMIT -DLLAMA_BUILD_NUMBER=0
    -DGGML_CUDA=OFF -DGGML_METAL=OFF
)
case "$(uname -m)" in
    x86_64|amd64)
        CMAKE_ARGS+=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
                     -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF) ;;
esac

COMPILER_ID=$(c++ --version 2>/dev/null | head -1)
LIBKEY=$(printf '%s\n' "$RECIPE_VERSION" "$SOURCE_ID" "$COMPILER_ID" "${CMAKE_ARGS[@]}" | hash_stdin)
KEY=$(printf '%s\n' "$LIBKEY" "$(hash_file "$HERE/ngram_reference.cpp")" "$(hash_file "$HERE/CMakeLists.txt")" | hash_stdin)

OUT_DIR="$CACHE_DIR/reference/$KEY"
BIN="$OUT_DIR/ngram_reference"
if [ "$FORCE" = 0 ] && [ -x "$BIN" ] && [ -f "$OUT_DIR/.complete" ]; then
    say "up to date: $BIN"
    echo "$BIN"
    exit 0
fi

# --- build -------------------------------------------------------------------------------------------------
BUILD_DIR="$CACHE_DIR/reference/build-$LIBKEY"
WRAP_DIR="$BUILD_DIR/wrapper"      # a copy of this folder's sources: the build tree never points into the repo
mkdir -p "$WRAP_DIR" "$OUT_DIR"
for f in CMakeLists.txt ngram_reference.cpp; do
    cmp -s "$HERE/$f" "$WRAP_DIR/$f" || cp "$HERE/$f" "$WRAP_DIR/$f"
done
if [ "$FORCE" = 1 ] || [ ! -f "$BUILD_DIR/cmake/build.ninja" ]; then
    say "configuring llama.cpp ($SRC_DIR) in $BUILD_DIR/cmake"
    cmake -S "$WRAP_DIR" -B "$BUILD_DIR/cmake" "${CMAKE_ARGS[@]}" -DLLAMA_SRC="$SRC_DIR" \
        > "$BUILD_DIR/configure.log" 2>&1 \
        || { tail -30 "$BUILD_DIR/configure.log" >&2; die "cmake configure failed; log: $BUILD_DIR/configure.log"; }
fi
say "building ngram_reference (the first build compiles llama-common, llama and ggml: many minutes on 2 cores)"
cmake --build "$BUILD_DIR/cmake" -j "$JOBS" --target ngram_reference > "$BUILD_DIR/build.log" 2>&1 \
    || { tail -40 "$BUILD_DIR/build.log" >&2; die "build failed; log: $BUILD_DIR/build.log"; }
built=$(find "$BUILD_DIR/cmake" -type f -name ngram_reference -perm -u+x | head -1)
[ -n "$built" ] || die "the build produced no ngram_reference binary (see $BUILD_DIR/build.log)"
cp "$built" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
printf 'source=%s\ncompiler=%s\nlibkey=%s\n' "$SOURCE_ID" "$COMPILER_ID" "$LIBKEY" > "$OUT_DIR/build-info.txt"
echo "$KEY" > "$OUT_DIR/.complete"
say "built $BIN"
echo "$BIN"
