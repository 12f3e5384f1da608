"""The external tools a capture runs (py-spy, nvidia-smi, the target's own interpreter), each bounded in time.

Every child is ours (never the target), runs with a timeout, and is killed when it overruns; a child
that does not die within a grace period is abandoned rather than waited on for ever (nvidia-smi on a
wedged GPU sits in uninterruptible sleep).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .manifest import ToolInfo

PYSPY_ENV = "HANGFORENSICS_PYSPY"
# the columns parsers/gpu.py reads
NVIDIA_SMI_QUERY = "timestamp,index,utilization.gpu,power.draw,memory.used"
KILL_GRACE_S = 2.0


@dataclass(frozen=True, slots=True)
class RunResult:
    argv: tuple[str, ...]
    exit_code: int | None         # None when it timed out or could not start
    stdout: bytes
    stderr: bytes
    timed_out: bool
    start: float                  # time.time() just before the start
    end: float                    # time.time() once it exited (or was given up on)
    error: str | None = None      # why it could not start


def run_bounded(argv: list[str], timeout_s: float, env: dict[str, str] | None = None) -> RunResult:
    """Run ``argv`` (no shell) for at most ``timeout_s``; kill it when it overruns."""
    start = time.time()
    try:
        # its own process group, so a wrapper script's children are stopped with it on a timeout
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, close_fds=True, start_new_session=True)
    except OSError as e:
        return RunResult(tuple(argv), None, b"", b"", False, start, time.time(), e.strerror or str(e))
    try:
        out, err = proc.communicate(timeout=max(timeout_s, 0.01))
        return RunResult(tuple(argv), proc.returncode, out, err, False, start, time.time())
    except subprocess.TimeoutExpired:
        # our own child's group only; the kernel detaches py-spy's ptrace when it dies, so the target resumes
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        try:
            out, err = proc.communicate(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            out, err = b"", b""            # stuck in D state: abandoned, not waited on
        return RunResult(tuple(argv), None, out or b"", err or b"", True, start, time.time())


@dataclass(frozen=True, slots=True)
class PySpy:
    path: str | None
    version: str | None
    note: str                     # how it was found, or why it is missing (one line)

    @property
    def info(self) -> ToolInfo:
        return ToolInfo("py-spy", self.version, self.path, self.note)


def _installed_pyspy() -> str | None:
    """py-spy installed as a package of this Python (``pip install py-spy`` puts a binary in its scripts)."""
    try:
        dist = metadata.distribution("py-spy")
    except metadata.PackageNotFoundError:
        return None
    for f in dist.files or []:
        if f.name in ("py-spy", "py-spy.exe"):
            p = Path(str(dist.locate_file(f))).resolve()
            if p.is_file() and os.access(p, os.X_OK):
                return str(p)
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def find_pyspy(override: str | None = None, search_path: str | None = None, installed: bool = True) -> PySpy:
    """Locate py-spy: ``override`` (``--py-spy`` / $HANGFORENSICS_PYSPY) alone when given, else PATH, else
    the py-spy package installed in this Python.  Its version is asked once (``py-spy --version``)."""
    if override:
        p = shutil.which(override) if os.sep not in override else override
        if not p or not os.path.isfile(p) or not os.access(p, os.X_OK):
            return PySpy(None, None, f"py-spy not found at {override} (--py-spy / ${PYSPY_ENV}): "
                                     f"no stack dumps")
        how = "given"
    else:
        p = shutil.which("py-spy", path=search_path if search_path is not None else os.environ.get("PATH"))
        how = "on PATH"
        if p is None and installed:
            p, how = _installed_pyspy(), "installed with hangforensics"
        if p is None:
            return PySpy(None, None, "py-spy not found (not on PATH, not installed in this Python): no stack "
                                     "dumps; pip install 'hangforensics[capture]', or give --py-spy PATH")
    r = run_bounded([p, "--version"], 5.0)
    text = r.stdout.decode("utf-8", "replace").strip()
    version = text.split()[-1] if r.exit_code == 0 and text else None
    return PySpy(p, version, how)


def pyspy_argv(pyspy: PySpy, pid: int, native: bool) -> list[str]:
    # Default (blocking) mode on purpose: py-spy pauses the target for the few milliseconds it reads the
    # stack, so the stack is consistent; --nonblocking can return torn stacks of a rank that is running.
    return [str(pyspy.path), "dump", "--pid", str(pid), *(["--native"] if native else [])]


def nvidia_smi_path() -> str | None:
    return shutil.which("nvidia-smi")


def nvidia_smi_info(path: str | None) -> ToolInfo:
    if path is None:
        return ToolInfo("nvidia-smi", None, None, "not found on PATH")
    r = run_bounded([path, "--query-gpu=driver_version", "--format=csv,noheader"], 10.0)
    first = r.stdout.decode("utf-8", "replace").strip().splitlines()
    note = None if r.exit_code == 0 else ("timed out" if r.timed_out else f"exit status {r.exit_code}")
    version = f"driver {first[0].strip()}" if first and r.exit_code == 0 else None
    return ToolInfo("nvidia-smi", version, path, note)


def sample_gpus(path: str, timeout_s: float) -> RunResult:
    return run_bounded([path, f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv"], timeout_s)


# Runs in the target's own interpreter, isolated (-I: no cwd, no user site, no PYTHON* variables), so nothing
# of the target's working directory is imported as root; importlib.metadata reads package metadata only.
_VERSION_PROBE = (
    "import importlib.metadata as m, json, sys\n"
    "sys.path[0:0] = json.loads(sys.argv[1])\n"
    "out = {}\n"
    "for n in sys.argv[2:]:\n"
    "    try:\n"
    "        out[n] = m.version(n)\n"
    "    except Exception:\n"
    "        out[n] = None\n"
    "print(json.dumps(out))\n"
)


def engine_versions(pid: int, exe: str | None,
                    packages: list[str]) -> tuple[dict[str, str | None], str | None]:
    """({package: version or None}, why not) for the target's interpreter, honouring its PYTHONPATH."""
    if not exe or exe.endswith(" (deleted)") or not os.path.isfile(exe):
        return {}, f"the interpreter of pid {pid} ({exe or 'unknown'}) is not readable"
    pythonpath: list[str] = []
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            for item in fh.read().split(b"\0"):
                # the one variable taken from the target's environment
                if item.startswith(b"PYTHONPATH="):
                    entries = item[len(b"PYTHONPATH="):].decode("utf-8", "replace").split(":")
                    pythonpath = [p for p in entries if p.startswith("/")]
    except OSError:
        pass
    r = run_bounded([exe, "-I", "-c", _VERSION_PROBE, json.dumps(pythonpath), *packages], 10.0,
                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"})
    if r.exit_code != 0:
        why = "timed out" if r.timed_out else (r.error or r.stderr.decode("utf-8", "replace").strip()[-200:])
        return {}, f"could not read package versions with {exe}: {why}"
    try:
        found = json.loads(r.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}, f"could not read package versions with {exe}: unexpected output"
    return {k: v for k, v in found.items()}, None
