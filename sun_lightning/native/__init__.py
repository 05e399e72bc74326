"""Build and load the package's C sources (the pseudocount index, the Q network's row kernels).

A source is compiled on first use with the system C compiler (``$CC``, else ``cc``, ``gcc`` or
``clang`` on ``PATH``) into a per-user cache directory and loaded with :mod:`ctypes`; no Python
headers or build-time dependencies are involved.

* Cache directory: ``$SUN_LIGHTNING_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/sun_lightning``,
  else ``~/.cache/sun_lightning``; if that is not writable, a ``sun_lightning-<uid>`` folder in
  the system temp directory.
* The library's file name carries a hash of the source, the compiler (path, size, mtime), the
  flags and the platform, so an edited source or another compiler never loads a stale build.
* Several processes may build at once: each compiles (the hashed source bytes) in its own
  temporary folder of the cache directory and moves the library into place with
  :func:`os.replace` (atomic), so a reader never sees a partial library.
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
import warnings
from collections.abc import Callable
from pathlib import Path

__all__ = ["NativeError", "NativeLibrary", "simd_flags"]

#: Shared by every source: no fused multiply-adds and no fast-math, so results round like numpy
#: (the pseudocount's ties at exactly rho) and do not depend on the compiler's contraction choices.
FLAGS = ("-O3", "-ffp-contract=off", "-fno-fast-math", "-std=c99", "-fPIC", "-shared")


def simd_flags() -> tuple[str, ...]:
    """``-mavx2`` where PyTorch itself runs its AVX2 (or AVX-512) kernels, else nothing.

    The flags name the cached build, so machines sharing a cache never load each other's.
    """
    import torch  # here only: building needs no torch otherwise

    return ("-mavx2",) if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") else ()


class NativeError(RuntimeError):
    """A native library could not be built or loaded."""


def compiler(purpose: str) -> str:
    """Path of the C compiler; ``purpose`` (what needs it) goes into the error if there is none."""
    for cand in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cand:
            path = shutil.which(cand)
            if path:
                return path
    raise NativeError(
        f"{purpose} needs a C compiler: none found (looked for $CC, cc, gcc, clang on PATH). "
        "Install gcc (e.g. `apt-get install gcc`) or set CC.")


def cache_dirs() -> list[Path]:
    dirs = []
    if os.environ.get("SUN_LIGHTNING_CACHE_DIR"):
        dirs.append(Path(os.environ["SUN_LIGHTNING_CACHE_DIR"]))
    xdg = os.environ.get("XDG_CACHE_HOME")
    dirs.append((Path(xdg) if xdg else Path.home() / ".cache") / "sun_lightning")
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    dirs.append(Path(tempfile.gettempdir()) / f"sun_lightning-{uid}")
    return dirs


def library_name(stem: str, cc: str, src: bytes, flags: tuple[str, ...] = (),
                 extra: tuple[tuple[str, bytes], ...] = ()) -> str:
    """File name of the build of ``src`` (and the ``extra`` sources) by ``cc``: a hash of everything the binary depends on."""
    st = os.stat(cc)
    key = hashlib.sha256(b"\0".join([
        src, *(name.encode() + b"\0" + data for name, data in extra), " ".join(FLAGS + tuple(flags)).encode(), os.path.realpath(cc).encode(),
        f"{st.st_size}:{st.st_mtime_ns}".encode(), sys.platform.encode(),
        platform.machine().encode()])).hexdigest()[:16]
    return f"{stem}-{key}.so"


def build(stem: str, cc: str, src: bytes, flags: tuple[str, ...] = (), extra: tuple[tuple[str, bytes], ...] = ()) -> Path:
    """Path of the compiled library of ``src`` (``FLAGS`` + ``flags``), built into the first writable cache directory.

    ``extra``: further C sources ``(file name, bytes)`` compiled into the same library.
    """
    name = library_name(stem, cc, src, flags, extra)
    errors = []
    for d in cache_dirs():
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
            c_file = Path(work) / f"{stem}.c"
            c_file.write_bytes(src)
            others = []
            for other, data in extra:
                others.append(Path(work) / other)
                others[-1].write_bytes(data)
            out = Path(work) / name
            proc = subprocess.run([cc, *FLAGS, *flags, "-o", str(out), str(c_file), *map(str, others), "-lm"],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise NativeError(f"compiling {stem}.c with {cc} failed:\n{proc.stderr}")
            os.replace(out, lib)  # atomic: concurrent builders each move a complete file
            return lib
        finally:
            shutil.rmtree(work, ignore_errors=True)
    raise NativeError(f"no writable cache directory for the native library {stem}: " + "; ".join(errors))


class NativeLibrary:
    """A C source of the package, built and loaded on first :meth:`load` (once per process).

    Args:
        source: the ``.c`` file.
        signatures: ``{function: (argtypes, restype)}`` declared on the loaded library.
        purpose: what needs it, for the no-compiler error ("RadiusPseudocount's native index").
        flags: compiler flags added to ``FLAGS`` (part of the cached library's name).
        optional_flags: further flags, dropped if the build with them fails (a compiler without
            OpenMP support, say).
        init: called once with the loaded library before first use (it may raise
            :class:`NativeError`: the library is then unavailable).
        extra_sources: further ``.c`` files compiled into the same library (distinct file names).
    """

    def __init__(
        self,
        source: Path,
        signatures: dict[str, tuple[list, object]],
        purpose: str,
        flags: tuple[str, ...] = (),
        optional_flags: tuple[str, ...] = (),
        init: Callable[[ctypes.CDLL], None] | None = None,
        extra_sources: tuple[Path, ...] = (),
    ) -> None:
        self.source, self.signatures, self.purpose = source, signatures, purpose
        self.extra_sources = tuple(extra_sources)
        self.flags, self.optional_flags, self.init = tuple(flags), tuple(optional_flags), init
        self._lib: ctypes.CDLL | None = None
        self._available: bool | None = None
        self._lock = threading.Lock()

    def path(self) -> Path:
        """Build (or find in the cache) the library and return its path."""
        cc, src = compiler(self.purpose), self.source.read_bytes()
        extra = tuple((p.name, p.read_bytes()) for p in self.extra_sources)
        if self.optional_flags:
            try:
                return build(self.source.stem, cc, src, self.flags + self.optional_flags, extra)
            except NativeError:
                pass  # the same code without them
        return build(self.source.stem, cc, src, self.flags, extra)

    def load(self) -> ctypes.CDLL:
        """The loaded library with its functions declared.

        Raises:
            NativeError: no C compiler, a compile error, or no writable cache directory.
        """
        if self._lib is None:
            with self._lock:
                if self._lib is None:
                    lib = ctypes.CDLL(str(self.path()))
                    for name, (args, res) in self.signatures.items():
                        fn = getattr(lib, name)
                        fn.argtypes, fn.restype = args, res
                    if self.init is not None:
                        self.init(lib)
                    self._lib = lib
        return self._lib

    def available(self, fallback: str) -> bool:
        """Whether :meth:`load` succeeds; the first failure warns once with the reason and ``fallback``
        (what runs instead), later calls answer from memory."""
        if self._available is None:
            try:
                self.load()
                self._available = True
            except NativeError as e:
                warnings.warn(f"{e}\n{fallback}", stacklevel=3)
                self._available = False
        return self._available

    def reset(self) -> None:
        """Forget the loaded library and its availability (the next :meth:`load` builds or finds it again); for tests."""
        self._lib, self._available = None, None
