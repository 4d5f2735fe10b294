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

TAG=reference/build
USAGE_LINES=2,12
RECIPE_VERSION=2   # bump when the way the build is configured changes
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/../common.sh"
hash_file() { hash_stdin < "$1"; }

[ -f "$SRC_DIR/common/speculative.h" ] || die "$SRC_DIR has no common/speculative.h: not a llama.cpp tree"
SOURCE_ID=$(source_id src ggml include common vendor CMakeLists.txt cmake)

CMAKE_ARGS=(
    -G Ninja
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=OFF
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
    -DLLAMA_BUILD_COMMIT=$LLAMA_COMMIT -DLLAMA_BUILD_NUMBER=0
    "${CPU_FLAGS[@]}"
)

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
