#!/usr/bin/env bash
# Build libllama (pinned llama.cpp 0c1e570) and specframe's cffi binding against that exact llama.h.
#
#   ./build_llama.sh [--cpu | --cuda | --metal] [--amx] [--prefix DIR] [--jobs N] [--force] [--no-smoke-test]
#                    [--configure-only] [--print-cmake-args]
#
# Source: $LLAMA_CPP_DIR when set (a llama.cpp checkout at the pinned commit), otherwise the llama.cpp that the
# PyPI sdist llama-cpp-python==0.3.36 vendors, checked against its sha256.
# Output: a prefix under ${SPECFRAME_CACHE:-${XDG_CACHE_HOME:-~/.cache}/specframe}/llama/<key>, where <key> hashes
# the source, backend, flags and compiler, so a second run with the same inputs rebuilds nothing. The prefix in
# use is recorded in <cache>/llama/current, where specframe looks for it (SPECFRAME_LLAMA_PREFIX overrides).
# --print-cmake-args prints the CPU and backend CMake flags, one per line, and exits: other builds from the same
# source (benchmarks/peers/build.sh) take them from here.
# --amx: a CPU build with Intel AMX kernels (GGML_AMX_TILE, GGML_AMX_INT8, beside AVX-512 VNNI) for the Xeons that
# have them (amx_int8 in /proc/cpuinfo), from a copy of the source with patches/ggml-amx-*.patch applied. Opt-in:
# on one Emerald Rapids Xeon it verified 16 drafted tokens in 2.0 single passes instead of 4.1, but single passes
# (plain decoding, drafting) were slower (README.md, "Building libllama"). Its prefix is llama/cpu-amx-<key>;
# `current` is the one built last.
set -euo pipefail

LLAMA_COMMIT=0c1e570
SDIST_NAME=llama-cpp-python
SDIST_VERSION=0.3.36
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
BUILD_RECIPE_VERSION=1   # bump when the way we configure the build changes

say() { printf '[build_llama] %s\n' "$*" >&2; }
die() { printf '[build_llama] error: %s\n' "$*" >&2; exit 1; }

REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
CACHE_DIR=${SPECFRAME_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specframe}
case "$(uname -s)" in Darwin) BACKEND=metal ;; *) BACKEND=cpu ;; esac
PREFIX=""
JOBS=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
FORCE=0
SMOKE=1
CONFIGURE_ONLY=0
PRINT_CMAKE_ARGS=0
AMX=0

while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) BACKEND=cpu ;;
        --cuda) BACKEND=cuda ;;
        --metal) BACKEND=metal ;;
        --amx) AMX=1 ;;
        --prefix) PREFIX=${2:?--prefix needs a directory}; shift ;;
        --jobs) JOBS=${2:?--jobs needs a number}; shift ;;
        --force) FORCE=1 ;;
        --no-smoke-test) SMOKE=0 ;;
        --configure-only) CONFIGURE_ONLY=1 ;;
        --print-cmake-args) PRINT_CMAKE_ARGS=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
        *) die "unknown option '$1' (expected --cpu, --cuda, --metal, --amx, --prefix DIR, --jobs N, --force, --no-smoke-test, --configure-only, --print-cmake-args)" ;;
    esac
    shift
done
case "$(uname -m)" in x86_64|amd64) x86=1 ;; *) x86=0 ;; esac
[ "$AMX" = 0 ] || { [ "$BACKEND" = cpu ] && [ "$x86" = 1 ]; } \
    || die "--amx is for CPU builds on x86-64 (this is a $BACKEND build on $(uname -m))"

# --- CPU and backend flags (what --print-cmake-args prints) --------------------------------------------------------
BACKEND_ARGS=()
cpu_has() { grep -qw "$1" /proc/cpuinfo 2>/dev/null; }
# Under --amx, the features every CPU with AMX has (Sapphire Rapids on) are ON whatever this CPU has.
cpu_flag() { { [ "$AMX" = 1 ] || cpu_has "$1"; } && echo ON || echo OFF; }
if [ "$x86" = 1 ]; then
    # Named features, not GGML_NATIVE=ON, which would also pick the AMX kernels (opt-in: --amx).
    amx_flag=OFF; [ "$AMX" = 0 ] || amx_flag=ON
    BACKEND_ARGS+=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
                   -DGGML_AMX_TILE=$amx_flag -DGGML_AMX_INT8=$amx_flag -DGGML_AMX_BF16=OFF)
    if [ "$(cpu_flag avx512f)" = ON ] && [ "$(cpu_flag avx512bw)" = ON ] && [ "$(cpu_flag avx512vl)" = ON ]; then
        # ggml compiles its AMX kernels only beside the AVX-512 VNNI ones (ggml-cpu/amx/amx.cpp).
        BACKEND_ARGS+=(-DGGML_AVX512=ON -DGGML_AVX512_VNNI="$(cpu_flag avx512_vnni)"
                       -DGGML_AVX512_VBMI="$(cpu_flag avx512vbmi)" -DGGML_AVX512_BF16="$(cpu_flag avx512_bf16)")
    fi
fi

case "$BACKEND" in
    cpu) BACKEND_ARGS+=(-DGGML_CUDA=OFF -DGGML_METAL=OFF) ;;
    metal) BACKEND_ARGS+=(-DGGML_METAL=ON -DGGML_METAL_EMBED_LIBRARY=ON) ;;
    cuda)
        command -v nvcc >/dev/null || die "--cuda needs nvcc (the CUDA toolkit) on PATH"
        # The toolkit's real location (nvcc on PATH may be a wrapper script); CUDA_HOME wins when set.
        cuda_root=${CUDA_HOME:-$(cd /tmp && nvcc -dryrun --version 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)}
        [ -n "$cuda_root" ] || cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
        cuda_root=$(cd "$cuda_root" && pwd)
        cuda_arch=${CMAKE_CUDA_ARCHITECTURES:-}
        if [ -z "$cuda_arch" ]; then
            if nvidia-smi -L >/dev/null 2>&1; then
                cuda_arch=native
            else   # no GPU to ask: cover Turing to Hopper
                cuda_arch="75;80;86;89;90"
                say "no GPU visible: building for CUDA architectures $cuda_arch (set CMAKE_CUDA_ARCHITECTURES to choose)"
            fi
        fi
        BACKEND_ARGS+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$cuda_arch"
                       "-DCUDAToolkit_ROOT=$cuda_root" "-DCMAKE_CUDA_COMPILER=$cuda_root/bin/nvcc")
        if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so' && ! ls "$cuda_root"/lib64/stubs/libcuda.so* \
                "$cuda_root"/targets/*/lib/stubs/libcuda.so* >/dev/null 2>&1; then
            # No driver library here (building for a GPU elsewhere): ggml's VMM pool links libcuda directly.
            say "no libcuda.so (NVIDIA driver) on this machine: building without CUDA VMM (GGML_CUDA_NO_VMM=ON)"
            BACKEND_ARGS+=(-DGGML_CUDA_NO_VMM=ON)
        fi
        if ! ls "$cuda_root"/lib64/libcublas.so* "$cuda_root"/lib/libcublas.so* "$cuda_root"/targets/*/lib/libcublas.so* >/dev/null 2>&1 \
                && ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so'; then
            # Some toolkits ship without cuBLAS; NVIDIA publishes it on PyPI.
            cuda_major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
            cublas_dir="$CACHE_DIR/cublas-cu$cuda_major"
            if [ ! -d "$cublas_dir/nvidia" ]; then
                say "the CUDA toolkit at $cuda_root has no cuBLAS: installing nvidia-cublas (CUDA $cuda_major) from PyPI"
                pkg=nvidia-cublas; [ "$cuda_major" -lt 13 ] && pkg="nvidia-cublas-cu$cuda_major"
                "$PYTHON" -m pip install --quiet --no-deps --target "$cublas_dir" "$pkg" \
                    || die "could not install $pkg from PyPI; install cuBLAS with your CUDA toolkit"
            fi
            cublas_root=$(dirname "$(find "$cublas_dir" -name 'cublas_v2.h' | head -1)")/..
            cublas_root=$(cd "$cublas_root" && pwd)
            for so in "$cublas_root"/lib/libcublas.so.* "$cublas_root"/lib/libcublasLt.so.*; do
                base=$(basename "$so" | sed 's/\.so\..*/.so/')
                [ -e "$cublas_root/lib/$base" ] || ln -s "$(basename "$so")" "$cublas_root/lib/$base"
            done
            BACKEND_ARGS+=("-DCUDA_cublas_LIBRARY=$cublas_root/lib/libcublas.so"
                           "-DCUDA_cublasLt_LIBRARY=$cublas_root/lib/libcublasLt.so"
                           "-DCMAKE_CUDA_FLAGS=-I$cublas_root/include" "-DCMAKE_CXX_FLAGS=-I$cublas_root/include"
                           "-DCMAKE_INSTALL_RPATH=\$ORIGIN;$cublas_root/lib")
        fi
        ;;
esac
if [ "$PRINT_CMAKE_ARGS" = 1 ]; then
    printf '%s\n' "${BACKEND_ARGS[@]}"
    exit 0
fi
if [ "$AMX" = 1 ] && [ "$SMOKE" = 1 ] && [ "$CONFIGURE_ONLY" = 0 ] && ! cpu_has avx512_vnni; then
    die "--amx builds for CPUs with AVX-512 VNNI (all that have AMX); this one has none, so the library could not run here (add --no-smoke-test to build it anyway)"
fi

# --- tools ---------------------------------------------------------------------------------------------------------
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || die "Python 3.10+ is needed ($PYTHON is $("$PYTHON" -V 2>&1)); set PYTHON=/path/to/python3.10+"
command -v c++ >/dev/null || command -v g++ >/dev/null || command -v clang++ >/dev/null \
    || die "no C++ compiler found: install g++ or clang (e.g. apt-get install build-essential)"
TOOLS_DIR="$CACHE_DIR/tools"
export PATH="$TOOLS_DIR/bin:$PATH"
if ! command -v cmake >/dev/null || ! command -v ninja >/dev/null; then
    say "installing cmake and ninja from PyPI into $TOOLS_DIR"
    "$PYTHON" -m pip install --quiet --target "$TOOLS_DIR/site" cmake ninja
    mkdir -p "$TOOLS_DIR/bin"
    for tool in cmake ninja; do
        printf '#!/bin/sh\nPYTHONPATH="%s" exec "%s" -c "import sys, %s; sys.argv[0] = \\"%s\\"; sys.exit(%s.%s())" "$@"\n' \
            "$TOOLS_DIR/site" "$PYTHON" "$tool" "$tool" "$tool" "$tool" > "$TOOLS_DIR/bin/$tool"
        chmod +x "$TOOLS_DIR/bin/$tool"
    done
fi
"$PYTHON" -c 'import cffi' 2>/dev/null || "$PYTHON" -m pip install --quiet 'cffi>=1.17'

sha256_of() { "$PYTHON" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$1"; }
hash_text() { "$PYTHON" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])'; }

PATCH_NAMES=""   # what --amx applies, recorded in build-info.txt

# --- source --------------------------------------------------------------------------------------------------------
if [ -n "${LLAMA_CPP_DIR:-}" ]; then
    SRC_DIR=$(cd "$LLAMA_CPP_DIR" && pwd) || die "LLAMA_CPP_DIR=$LLAMA_CPP_DIR is not a directory"
    [ -f "$SRC_DIR/include/llama.h" ] || die "LLAMA_CPP_DIR=$SRC_DIR has no include/llama.h: not a llama.cpp checkout"
    # A checkout may be edited: its identity is its path plus the newest modification time of its sources.
    newest=$(find "$SRC_DIR/src" "$SRC_DIR/ggml" "$SRC_DIR/include" -type f -printf '%T@\n' | sort -n | tail -1)
    SOURCE_ID="dir:$SRC_DIR:$newest"
else
    SRC_ROOT="$CACHE_DIR/src"
    SRC_DIR="$SRC_ROOT/llama.cpp-$LLAMA_COMMIT"
    SOURCE_ID="sdist:$SDIST_SHA256"
    if [ ! -f "$SRC_DIR/.specframe-complete" ]; then
        mkdir -p "$SRC_ROOT"
        sdist="$SRC_ROOT/llama_cpp_python-$SDIST_VERSION.tar.gz"
        if [ ! -f "$sdist" ] || [ "$(sha256_of "$sdist")" != "$SDIST_SHA256" ]; then
            say "downloading $SDIST_NAME==$SDIST_VERSION (sdist, vendors llama.cpp $LLAMA_COMMIT)"
            tmp=$(mktemp -d)
            "$PYTHON" -m pip download --quiet --no-deps --no-binary "$SDIST_NAME" -d "$tmp" "$SDIST_NAME==$SDIST_VERSION" \
                || die "could not download $SDIST_NAME==$SDIST_VERSION from PyPI; or set LLAMA_CPP_DIR to a llama.cpp checkout at $LLAMA_COMMIT"
            mv "$tmp"/llama_cpp_python-"$SDIST_VERSION".tar.gz "$sdist"
            rm -rf "$tmp"
        fi
        actual=$(sha256_of "$sdist")
        [ "$actual" = "$SDIST_SHA256" ] || die "sha256 of $sdist is $actual, expected $SDIST_SHA256"
        say "extracting llama.cpp into $SRC_DIR"
        rm -rf "$SRC_DIR" "$SRC_DIR.tmp"
        mkdir -p "$SRC_DIR.tmp"
        tar -xzf "$sdist" -C "$SRC_DIR.tmp" --strip-components=3 "llama_cpp_python-$SDIST_VERSION/vendor/llama.cpp"
        rm -f "$SRC_DIR.tmp/.git"   # a submodule pointer into a repository that is not there
        mv "$SRC_DIR.tmp" "$SRC_DIR"
        touch "$SRC_DIR/.specframe-complete"
    fi
fi

# --- patches (--amx) ------------------------------------------------------------------------------------------------
# Applied to a copy of the source (hard links, but for the files patched), never to the source the other builds use;
# the patches' text becomes part of the source's identity, hence of the build's key.
if [ "$AMX" = 1 ]; then
    PATCHES=("$REPO_DIR"/patches/ggml-amx-*.patch)   # in name order
    [ -f "${PATCHES[0]}" ] || die "no patches/ggml-amx-*.patch in $REPO_DIR"
    PATCH_NAMES="${PATCHES[*]##*/}"
    command -v patch >/dev/null || die "--amx needs GNU patch (e.g. apt-get install patch)"
    SOURCE_ID="$SOURCE_ID patches:$(cat "${PATCHES[@]}" | hash_text)"
    PATCHED_DIR="$CACHE_DIR/src/patched-$(printf '%s\n' "$SOURCE_ID" | hash_text)"
    if [ ! -f "$PATCHED_DIR/.specframe-complete" ]; then
        say "applying $PATCH_NAMES to a copy of $SRC_DIR"
        rm -rf "$PATCHED_DIR" "$PATCHED_DIR.tmp"
        mkdir -p "$CACHE_DIR/src"
        cp -al "$SRC_DIR" "$PATCHED_DIR.tmp" 2>/dev/null \
            || { rm -rf "$PATCHED_DIR.tmp"; cp -a "$SRC_DIR" "$PATCHED_DIR.tmp"; }   # another file system
        rm -f "$PATCHED_DIR.tmp/.specframe-complete"
        for p in "${PATCHES[@]}"; do
            for f in $(sed -n 's#^+++ b/\([^\t ]*\).*#\1#p' "$p"); do   # a file of its own, not the shared one
                cp --remove-destination "$SRC_DIR/$f" "$PATCHED_DIR.tmp/$f"
            done
            if patch -d "$PATCHED_DIR.tmp" -p1 --batch --force --dry-run --reverse < "$p" >/dev/null 2>&1; then
                say "$(basename "$p") is already in $SRC_DIR: skipped"
            else
                patch -d "$PATCHED_DIR.tmp" -p1 --batch --forward --quiet < "$p" \
                    || die "$(basename "$p") does not apply to $SRC_DIR (a llama.cpp other than $LLAMA_COMMIT?)"
            fi
        done
        touch "$PATCHED_DIR.tmp/.specframe-complete"
        mv "$PATCHED_DIR.tmp" "$PATCHED_DIR"
    fi
    SRC_DIR=$PATCHED_DIR
fi

# --- configuration -------------------------------------------------------------------------------------------------
CMAKE_ARGS=(
    -G Ninja
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=ON
    -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF
    -DLLAMA_BUILD_COMMIT="$LLAMA_COMMIT" -DLLAMA_BUILD_NUMBER=0
    -DCMAKE_INSTALL_LIBDIR=lib
    "-DCMAKE_INSTALL_RPATH=\$ORIGIN"
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON
    "${BACKEND_ARGS[@]}"
)

COMPILER_ID=$( (c++ --version 2>/dev/null || g++ --version) | head -1)
KEY=$(printf '%s\n' "$BUILD_RECIPE_VERSION" "$SOURCE_ID" "$BACKEND" "$COMPILER_ID" "${CMAKE_ARGS[@]}" | hash_text)
VARIANT=$BACKEND; [ "$AMX" = 0 ] || VARIANT=$BACKEND-amx
[ -n "$PREFIX" ] || PREFIX="$CACHE_DIR/llama/$VARIANT-$KEY"
mkdir -p "$PREFIX"
PREFIX=$(cd "$PREFIX" && pwd)

# --- libllama ------------------------------------------------------------------------------------------------------
if [ "$CONFIGURE_ONLY" = 1 ]; then
    # Check that this backend configures on this machine (e.g. CUDA where no GPU is at hand), build nothing.
    BUILD_DIR=$(mktemp -d)
    cmake -S "$SRC_DIR" -B "$BUILD_DIR" "${CMAKE_ARGS[@]}" -DCMAKE_INSTALL_PREFIX="$PREFIX" > "$BUILD_DIR/configure.log" 2>&1 \
        || { tail -30 "$BUILD_DIR/configure.log" >&2; die "cmake configure failed ($BACKEND); log: $BUILD_DIR/configure.log"; }
    grep -iE "cuda|cublas|metal|including" "$BUILD_DIR/configure.log" | sed 's/^/[build_llama]   /' >&2 || true
    rm -rf "$BUILD_DIR"
    rmdir "$PREFIX" 2>/dev/null || true
    say "configure-only: the $BACKEND build configures"
    exit 0
fi
if [ "$FORCE" = 1 ] || [ ! -f "$PREFIX/.complete" ] || [ "$(cat "$PREFIX/.complete")" != "$KEY" ]; then
    BUILD_DIR="$CACHE_DIR/build/$VARIANT-$KEY"
    say "building libllama ($VARIANT) from $SRC_DIR into $PREFIX (a few minutes)"
    cmake -S "$SRC_DIR" -B "$BUILD_DIR" "${CMAKE_ARGS[@]}" -DCMAKE_INSTALL_PREFIX="$PREFIX" > "$PREFIX/configure.log" 2>&1 \
        || { tail -30 "$PREFIX/configure.log" >&2; die "cmake configure failed; full log: $PREFIX/configure.log"; }
    cmake --build "$BUILD_DIR" -j "$JOBS" > "$PREFIX/build.log" 2>&1 \
        || { tail -30 "$PREFIX/build.log" >&2; die "build failed; full log: $PREFIX/build.log"; }
    cmake --install "$BUILD_DIR" > "$PREFIX/install.log" 2>&1 \
        || { tail -30 "$PREFIX/install.log" >&2; die "install failed; full log: $PREFIX/install.log"; }
    printf '%s\n' "${CMAKE_ARGS[@]}" > "$PREFIX/cmake-args.txt"
    printf 'commit=%s\nbackend=%s\nsource=%s\ncompiler=%s\npatches=%s\n' "$LLAMA_COMMIT" "$BACKEND" "$SOURCE_ID" \
        "$COMPILER_ID" "$PATCH_NAMES" > "$PREFIX/build-info.txt"
    rm -rf "$BUILD_DIR"
    echo "$KEY" > "$PREFIX/.complete"
else
    say "libllama is up to date in $PREFIX"
fi

# --- binding -------------------------------------------------------------------------------------------------------
PYTHONPATH="$REPO_DIR${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m specframe.llama.build_binding --prefix "$PREFIX" \
    || die "building the cffi binding failed (see above)"
mkdir -p "$CACHE_DIR/llama"
echo "$PREFIX" > "$CACHE_DIR/llama/current.tmp" && mv "$CACHE_DIR/llama/current.tmp" "$CACHE_DIR/llama/current"

# --- smoke test ----------------------------------------------------------------------------------------------------
if [ "$SMOKE" = 1 ]; then
    SPECFRAME_LLAMA_PREFIX="$PREFIX" PYTHONPATH="$REPO_DIR${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m specframe.llama.smoke_test \
        || die "the smoke test failed: the library does not evaluate a model. Try './build_llama.sh --force', or a CPU build (--cpu) if a GPU backend is at fault; the logs are in $PREFIX"
fi
say "ready: $PREFIX"
