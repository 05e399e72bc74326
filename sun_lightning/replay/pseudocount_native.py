"""Build and load the native index of the radius pseudocount (SPEC §4).

``_pseudocount.c`` is compiled on first use with the system C compiler (``$CC``, else ``cc``,
``gcc`` or ``clang`` on ``PATH``) into a per-user cache directory and loaded with :mod:`ctypes`;
no Python headers or build-time dependencies are involved.

* Cache directory: ``$SUN_LIGHTNING_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/sun_lightning``,
  else ``~/.cache/sun_lightning``; if that is not writable, a ``sun_lightning-<uid>`` folder in
  the system temp directory.
* The library's file name carries a hash of the source, the compiler (path, size, mtime), the
  flags and the platform, so an edited source or another compiler never loads a stale build.
* Several processes may build at once: each compiles (the hashed source bytes) in its own
  temporary folder of the cache directory and moves the library into place with
  :func:`os.replace` (atomic), so a reader never sees a partial library.
* ``-ffp-contract=off`` keeps the distance arithmetic free of fused multiply-adds: ties at
  exactly ``rho`` must round like numpy.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

__all__ = ["load_library", "NativeError"]

_SOURCE = Path(__file__).with_name("_pseudocount.c")
_FLAGS = ["-O3", "-ffp-contract=off", "-fno-fast-math", "-std=c99", "-fPIC", "-shared"]
_LOCK = threading.Lock()
_LIB: ctypes.CDLL | None = None


class NativeError(RuntimeError):
    """The native pseudocount index could not be built or loaded."""


def _compiler() -> str:
    for cand in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cand:
            path = shutil.which(cand)
            if path:
                return path
    raise NativeError(
        "RadiusPseudocount needs a C compiler to build its native index "
        f"({_SOURCE.name}): none found (looked for $CC, cc, gcc, clang on PATH). "
        "Install gcc (e.g. `apt-get install gcc`) or set CC.")


def _cache_dirs() -> list[Path]:
    dirs = []
    if os.environ.get("SUN_LIGHTNING_CACHE_DIR"):
        dirs.append(Path(os.environ["SUN_LIGHTNING_CACHE_DIR"]))
    xdg = os.environ.get("XDG_CACHE_HOME")
    dirs.append((Path(xdg) if xdg else Path.home() / ".cache") / "sun_lightning")
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    dirs.append(Path(tempfile.gettempdir()) / f"sun_lightning-{uid}")
    return dirs


def _library_name(cc: str, src: bytes) -> str:
    """File name of the build of ``src`` by ``cc``: a hash of everything the binary depends on."""
    st = os.stat(cc)
    key = hashlib.sha256(b"\0".join([
        src, " ".join(_FLAGS).encode(), os.path.realpath(cc).encode(),
        f"{st.st_size}:{st.st_mtime_ns}".encode(), sys.platform.encode(),
        platform.machine().encode()])).hexdigest()[:16]
    return f"_pseudocount-{key}.so"


def _build(cc: str, src: bytes) -> Path:
    """Path of the compiled library, building it into the first writable cache directory."""
    name = _library_name(cc, src)
    errors = []
    for d in _cache_dirs():
        lib = d / name
        if lib.exists():
            return lib
        try:
            d.mkdir(parents=True, exist_ok=True)
            work = tempfile.mkdtemp(prefix=name + ".", suffix=".tmp", dir=d)
        except OSError as e:  # not writable: try the next directory
            errors.append(f"{d}: {e}")
            continue
        try:
            # compile exactly the hashed bytes, in a private folder of the cache directory
            c_file = Path(work) / "_pseudocount.c"
            c_file.write_bytes(src)
            out = Path(work) / name
            proc = subprocess.run([cc, *_FLAGS, "-o", str(out), str(c_file), "-lm"],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise NativeError(f"compiling {_SOURCE} with {cc} failed:\n{proc.stderr}")
            os.replace(out, lib)  # atomic: concurrent builders each move a complete file
            return lib
        finally:
            shutil.rmtree(work, ignore_errors=True)
    raise NativeError("no writable cache directory for the native pseudocount index: "
                      + "; ".join(errors))


def _declare(lib: ctypes.CDLL) -> None:
    p, i64, i32, f64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_double
    sigs = {
        "pc_new": ([i32, i64, f64, f64, p, p], p),
        "pc_free": ([p], None),
        "pc_set_grid": ([p, i32, p, p, p, i32], i32),
        "pc_geometry": ([p, p, p, p], i32),
        "pc_evict": ([p, i64, p, p, p], i64),
        "pc_apply": ([p, i64, p, p, i32], i32),
        "pc_insert": ([p, i64, p, p, p], i32),
        "pc_step": ([p, i64, p, i32, i64], i32),
        "pc_counts": ([p, i64, p, p], i32),
        "pc_export": ([p, p, p, p, p], i64),
        "pc_load": ([p, i64, p, p, p, p], i32),
        "pc_stats": ([p, p], None),
        "pc_tune": ([p, i64, i64], None),
    }
    for name, (args, res) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res


def load_library() -> ctypes.CDLL:
    """The compiled native index (built on first use, then cached per process and on disk).

    Raises:
        NativeError: no C compiler, a compile error, or no writable cache directory.
    """
    global _LIB
    if _LIB is None:
        with _LOCK:
            if _LIB is None:
                lib = ctypes.CDLL(str(_build(_compiler(), _SOURCE.read_bytes())))
                _declare(lib)
                _LIB = lib
    return _LIB
