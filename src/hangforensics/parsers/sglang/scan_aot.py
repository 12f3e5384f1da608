"""The compiled scanner built ahead of time: ``sglang_scan``'s three entry points and ``envelope_cut``'s three,
compiled once by numba's ``pycc`` into a C extension module, kept in a cache directory and imported in about a
millisecond.

The scanner's code cached by numba's JIT still costs every process that loads it some 0.5 s of CPU (numba's
import, its typing registries, LLVM, the cached code linked): the parser workers' fork server paid it before
any log could be parsed, and an ingest of one large log waited for it (its first range was parsed 0.95 s after
the command started, 0.6 s of it the main process idle).  The extension module needs no numba at run time.

It is built on first use, where a C compiler and Python's headers are at hand (some 10-20 s, once, as the JIT
compiled before), for this host's CPU and these sources and versions (its name is their digest): a new release
or numba builds a new one.  Where it cannot be built, a marker says why and the JIT's cached code is used, as
before.  Both are the same code compiled by the same numba: the tests compare their output.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

# The entry points and their types as ``sglang_fast`` calls them (C-contiguous arrays; the chunk's bytes are
# a read-only view of the reader's buffer).
SIGNATURES = {
    "bounds": "Tuple((i8[::1], i8[::1], i8[::1]))(u1[::1])",
    "scan": "Tuple((i1[::1], i8[::1], i8[:, ::1], i8[:, ::1], i1[:, ::1], f8[:, ::1], i1[:, ::1], i1[::1], "
            "i1[:, ::1], i8[:, ::1], i8[::1], i4[::1], i8[:, ::1]))(u1[::1], i8[::1], i8[::1], i8[::1], b1)",
    "gather": "Tuple((i8[::1], u1[::1]))(u1[::1], i8[::1], i8[::1])",
    "envelope_cut": "Tuple((i8[::1], i8[::1], i8))(u1[::1], i8[::1], i8[::1], i8[::1])",
    "docker_cut": "Tuple((u1[::1], i8[::1], i8))(u1[::1], i8[::1], i8[::1])",
    "yearless_cut": "Tuple((i8[::1], i8[:, ::1], i8))(u1[::1], i8[::1], i8[::1], b1)",
}
# What the compiled code is made of: a change to any of these is a new module.
_SOURCES = ("sglang_scan.py", "envelope_cut.py", "scan_layout.py", "sglang_patterns.py", "scan_aot.py", "../datetimes.py")
_VERSIONS = ("numba", "llvmlite", "numpy")
_SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


class BuildError(Exception):
    """The module could not be built here (no compiler, no headers, no writable directory...)."""


def module_name() -> str:
    """The module's name: a digest of its sources, the versions that compile it, Python's and the CPU's."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for name in _SOURCES:
        digest.update((here / name).read_bytes())
    for package in _VERSIONS:
        digest.update(_version_of(package))
    digest.update(f"{sys.version};{platform.machine()};{_cpu()}".encode())
    return f"_hf_scan_{digest.hexdigest()[:20]}"


def _version_of(package: str) -> bytes:
    """What says ``package``'s version, without importing it (numba's import is what this module avoids;
    importlib.metadata's own costs some 40 ms): its version file, else its folder."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        return f"{package}: none;".encode()
    folder = Path(spec.origin).parent
    for name in ("_version.py", "version.py"):
        with contextlib.suppress(OSError):
            return f"{package}:".encode() + (folder / name).read_bytes()
    return f"{package}: {folder};".encode()


def _cpu() -> str:
    """This host's CPU (the module is compiled for it: the JIT's vectorised loops, not a generic CPU's)."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        wanted = {}
        for line in f:
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "flags", "Features", "CPU part") and key not in wanted:
                wanted[key] = value.strip()
            if not line.strip() and wanted:
                break
        return repr(sorted(wanted.items()))
    return platform.processor()


def directories() -> list[Path]:
    """Where the module may be kept, in order: HANGFORENSICS_SCANNER_DIR alone if set; else numba's cache
    directory (NUMBA_CACHE_DIR), this package's ``__pycache__``, the user's cache."""
    env = os.environ.get("HANGFORENSICS_SCANNER_DIR")
    if env:
        return [Path(env)]
    dirs = []
    if os.environ.get("NUMBA_CACHE_DIR"):
        dirs.append(Path(os.environ["NUMBA_CACHE_DIR"]) / "hangforensics")
    dirs.append(Path(__file__).parent / "__pycache__")
    dirs.append(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hangforensics")
    return dirs


def load(name: str | None = None) -> ModuleType | None:
    """The module built already (None: not built, or where it cannot be); ``name``: its ``module_name``."""
    name = name or module_name()
    for d in directories():
        path = d / f"{name}{_SUFFIX}"
        if path.is_file():
            return _import(name, path)
    return None


def load_or_build() -> ModuleType:
    """The module, built first where it is not yet (``BuildError`` where it cannot be, now or before)."""
    name = module_name()
    module = load(name)
    if module is not None:
        return module
    d = _writable(directories())
    with _locked(d / f"{name}.lock"):
        path, failed = d / f"{name}{_SUFFIX}", d / f"{name}.failed"
        if path.is_file():                      # built by another process meanwhile
            return _import(name, path)
        if failed.is_file():
            raise BuildError(failed.read_text(errors="replace").strip() or "an earlier build failed")
        log.warning("compiling the log scanner once for this machine (some 10-20 s)")
        try:
            _build(name, d)
        except Exception as e:  # noqa: BLE001 (whatever the toolchain raises: said once, the JIT then)
            why = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
            with contextlib.suppress(OSError):
                failed.write_text(why + "\n")
            log.warning("the log scanner could not be compiled ahead of time (%s; %s says so for later runs): "
                        "numba's JIT-compiled code is used", why, failed)
            raise BuildError(why) from e
        return _import(name, path)


def _build(name: str, d: Path) -> None:
    """Compile the entry points into ``d / name`` (through a private directory: a reader never sees half of
    it)."""
    import warnings

    with warnings.catch_warnings():         # (numba's pycc says it is deprecated: it is what builds this)
        warnings.simplefilter("ignore")
        from numba.pycc import CC

    from . import envelope_cut, sglang_scan

    work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=d))
    try:
        cc = CC(name)
        cc.output_dir = str(work)
        cc.target_cpu = "host"
        cc.verbose = False
        for entry, signature in SIGNATURES.items():
            cc.export(entry, signature)(getattr(sglang_scan if hasattr(sglang_scan, entry) else envelope_cut,
                                                entry).py_func)
        with _quiet(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cc.compile()
        built = work / f"{name}{_SUFFIX}"
        os.replace(built, d / built.name)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _import(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _writable(dirs: list[Path]) -> Path:
    for d in dirs:
        with contextlib.suppress(OSError):
            d.mkdir(parents=True, exist_ok=True)
            if os.access(d, os.W_OK):
                return d
    raise BuildError("no writable directory for the compiled scanner (HANGFORENSICS_SCANNER_DIR)")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One process builds at a time (others wait, then load its module)."""
    try:
        import fcntl
    except ImportError:                         # (Windows: no lock; a second build replaces the first's file)
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The compiler's own output (distutils prints each command) kept off the user's terminal."""
    with open(os.devnull, "w") as null:
        saved = os.dup(1), os.dup(2)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
