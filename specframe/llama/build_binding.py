"""Compile the cffi binding against the llama.h and libllama of one build prefix (run by build_llama.sh)."""

import argparse
import pathlib
import sys
import tempfile

from specframe.llama._declarations import CDEF, HOT_LOOPS, MODULE_NAME


def build(prefix: pathlib.Path) -> pathlib.Path:
    """Build ``<prefix>/python/<MODULE_NAME>.<abi>.so`` unless it already exists; return its path."""
    import cffi  # only needed at build time

    out_dir = prefix / "python"
    existing = sorted(out_dir.glob(f"{MODULE_NAME}.*"))
    if existing:
        return existing[0]
    if not (prefix / "include" / "llama.h").is_file():
        raise SystemExit(f"{prefix}/include/llama.h not found: build libllama first (./build_llama.sh)")
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source(
        MODULE_NAME,
        '#include "llama.h"\n' + HOT_LOOPS,
        extra_compile_args=["-O3"],       # the lane loops of hot_loops.c vectorised
        include_dirs=[str(prefix / "include")],
        library_dirs=[str(prefix / "lib")],
        libraries=["llama", "ggml", "ggml-base"],   # ggml's device registry and CPU buffer type, called directly
        # Relative to the binding itself (prefix/python), so the whole prefix can move.
        extra_link_args=["-Wl,-rpath," + ("@loader_path/../lib" if sys.platform == "darwin" else "$ORIGIN/../lib")],
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        built = pathlib.Path(ffi.compile(tmpdir=tmp, verbose=False))
        target = out_dir / built.name
        built.replace(target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prefix", required=True, type=pathlib.Path)
    path = build(parser.parse_args().prefix.resolve())
    print(f"[build_llama] binding: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
