# Shared by the benchmark build scripts (reference/build.sh, peers/build.sh): sourced, not run.
# Before sourcing, the script sets TAG (its name in messages) and USAGE_LINES (the range of its header that
# --help prints). Afterwards it has say/die/hash_stdin, FORCE and JOBS from --force/--jobs N, cmake and ninja on
# PATH, REPO_DIR, CACHE_DIR, PYTHON, LLAMA_COMMIT and SDIST_VERSION (both read from build_llama.sh), SRC_DIR (the
# pinned llama.cpp source) and CPU_FLAGS (the CPU CMake flags of our own libllama build, from ./build_llama.sh
# --print-cmake-args; with --cuda, its CUDA flags too), BACKEND (cpu or cuda), TOOLS_ONLY (--tools-only) and
# SERVER_ONLY (--server-only).

say() { printf '[%s] %s\n' "$TAG" "$*" >&2; }
die() { printf '[%s] error: %s\n' "$TAG" "$*" >&2; exit 1; }
hash_stdin() { "$PYTHON" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])'; }

REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The pins live in build_llama.sh alone: the llama.cpp commit and the llama-cpp-python sdist that vendors it.
LLAMA_COMMIT=$(sed -n 's/^LLAMA_COMMIT=\([0-9a-f]*\).*/\1/p' "$REPO_DIR/build_llama.sh")
SDIST_VERSION=$(sed -n 's/^SDIST_VERSION=\([0-9.]*\).*/\1/p' "$REPO_DIR/build_llama.sh")
[ -n "$LLAMA_COMMIT" ] && [ -n "$SDIST_VERSION" ] || die "cannot read LLAMA_COMMIT and SDIST_VERSION from build_llama.sh"
PYTHON=${PYTHON:-python3}
CACHE_DIR=${SPECFRAME_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specframe}
JOBS=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
FORCE=0
BACKEND=cpu
TOOLS_ONLY=0
SERVER_ONLY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --force) FORCE=1 ;;
        --jobs) JOBS=${2:?--jobs needs a number}; shift ;;
        --cuda) BACKEND=cuda ;;
        --tools-only) TOOLS_ONLY=1 ;;
        --server-only) SERVER_ONLY=1 ;;
        -h|--help) sed -n "${USAGE_LINES}p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option '$1' (expected --force, --jobs N, --cuda, --tools-only, --server-only)" ;;
    esac
    shift
done
[ "$TOOLS_ONLY" = 0 ] || [ "$SERVER_ONLY" = 0 ] || die "--tools-only and --server-only exclude each other"

# tools: the ones build_llama.sh may have installed from PyPI come first
export PATH="$CACHE_DIR/tools/bin:$PATH"
command -v cmake >/dev/null || die "cmake not found (./build_llama.sh installs it from PyPI into $CACHE_DIR/tools)"
command -v ninja >/dev/null || die "ninja not found (./build_llama.sh installs it from PyPI into $CACHE_DIR/tools)"
command -v c++ >/dev/null || die "no C++ compiler (c++) found"

if [ -n "${LLAMA_CPP_DIR:-}" ]; then
    SRC_DIR=$(cd "$LLAMA_CPP_DIR" && pwd) || die "LLAMA_CPP_DIR=$LLAMA_CPP_DIR is not a directory"
else
    SRC_DIR="$CACHE_DIR/src/llama.cpp-$LLAMA_COMMIT"
    if [ ! -f "$SRC_DIR/.specframe-complete" ]; then
        say "no llama.cpp source at $SRC_DIR: running ./build_llama.sh --no-smoke-test to fetch it"
        "$REPO_DIR/build_llama.sh" --no-smoke-test >&2 || die "build_llama.sh failed"
    fi
fi

mapfile -t CPU_FLAGS < <("$REPO_DIR/build_llama.sh" "--$BACKEND" --print-cmake-args)
[ "${#CPU_FLAGS[@]}" -gt 0 ] || die "./build_llama.sh --print-cmake-args printed no flags"

# The source's identity: its path, the commit and the newest modification time of the given parts of the tree.
source_id() {
    local parts=() part
    for part in "$@"; do parts+=("$SRC_DIR/$part"); done
    printf '%s:%s:%s' "$SRC_DIR" "$LLAMA_COMMIT" "$(find "${parts[@]}" -type f -printf '%T@\n' | sort -n | tail -1)"
}
