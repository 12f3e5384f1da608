"""``hangforensics capture`` end to end: process trees that hang like SGLang ranks, real py-spy, the real CLI.

The trees come from tests/capture_targets.py (a server titled like ``sglang.launch_server`` and four
ranks titled ``sglang::scheduler_TP<N>``).  Every tree is killed in teardown and the test asserts that
none of its processes (nor any py-spy aimed at them) outlives it.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from hangforensics.capture import ManifestError, read_manifest
from hangforensics.capture.discover import classify, label_of, redact
from hangforensics.capture.logtail import plan_tail
from hangforensics.capture.manifest import (
    CaptureOptions,
    DumpRecord,
    Failure,
    HostInfo,
    Manifest,
    ProcessEntry,
    ProcessFacts,
    Round,
    TargetInfo,
    ToolInfo,
)
from hangforensics.capture.tools import find_pyspy
from hangforensics.readers.kinds import detect_kind

TARGETS = Path(__file__).with_name("capture_targets.py")
PYSPY = find_pyspy().path
SECRET = "sk-test-secret-123"

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="capture reads /proc"),
    pytest.mark.filterwarnings("ignore"),
]
needs_pyspy = pytest.mark.skipif(PYSPY is None, reason="py-spy is not installed (pip install -e '.[test]')")


# -- process trees ---------------------------------------------------------------------------------

@dataclass
class Tree:
    proc: subprocess.Popen
    parent: int
    port: int
    ranks: dict[str, int]
    log: Path
    born: dict[int, float]          # pid -> create_time: a reused pid is not ours

    @property
    def pids(self) -> list[int]:
        return [self.parent, *self.ranks.values()]


def _exists(pid: int, born: float) -> bool:
    """The process is still in the process table (running, or a zombie nobody reaped)."""
    try:
        return abs(psutil.Process(pid).create_time() - born) < 0.01
    except psutil.NoSuchProcess:
        return False


def _alive(pid: int, born: float) -> bool:
    try:
        return _exists(pid, born) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _blocked(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/wchan").read_text().strip() not in ("", "0")
    except OSError:
        return False


@contextmanager
def spawn_tree(where: Path, mode: str, env: dict[str, str] | None = None) -> Iterator[Tree]:
    where.mkdir(parents=True, exist_ok=True)
    ready, info, log = where / "ready", where / "info.json", where / "server.log"
    ready.mkdir()
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(TARGETS), "tree", mode, str(info), str(ready)],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    tree = None
    try:
        _wait(info.exists, 20, "the tree's info file")
        data = json.loads(info.read_text())
        born = {p: psutil.Process(p).create_time() for p in [data["parent"], *data["ranks"].values()]}
        tree = Tree(proc, data["parent"], data["port"], data["ranks"], log, born)
        _wait(lambda: len(list(ready.iterdir())) == 4, 20, "4 ranks ready")
        # ready means about to block: wait until every rank's main thread sleeps in the kernel
        _wait(lambda: all(_blocked(p) for p in data["ranks"].values()), 10, "every rank blocked")
        yield tree
    finally:
        pids = tree.pids if tree else []
        for pid in pids[1:]:
            if tree and _alive(pid, tree.born[pid]):
                os.kill(pid, signal.SIGKILL)        # the test's own fixture processes
        if tree:
            # the server reaps its ranks (one waiting thread each): no zombie is left behind
            _wait(lambda: not any(_exists(p, tree.born[p]) for p in pids[1:]), 10, "ranks reaped")
        proc.kill()
        proc.wait(10)
        if tree:
            assert not [p for p in pids if _exists(p, tree.born[p])], "a fixture process outlived its test"
        strays = [p for p in psutil.process_iter(["cmdline"])
                  if "py-spy" in " ".join(p.info["cmdline"] or []) and
                  any(str(pid) in (p.info["cmdline"] or []) for pid in pids)]
        assert not strays, f"py-spy still running against the tree: {strays}"


@pytest.fixture(scope="module")
def symm_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tree]:
    with spawn_tree(tmp_path_factory.mktemp("symm"), "symm") as tree:
        yield tree


def hf(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    run_env = {k: v for k, v in os.environ.items() if k != "HANGFORENSICS_PYSPY"}
    return subprocess.run([sys.executable, "-m", "hangforensics", *args], capture_output=True, text=True,
                          env={**run_env, **(env or {})}, cwd=cwd, timeout=120)


def unpack(bundle: Path, dest: Path) -> tuple[Path, dict[str, tarfile.TarInfo]]:
    with tarfile.open(bundle) as t:
        members = {m.name: m for m in t.getmembers()}
        t.extractall(dest, filter="data")
    tops = {n.split("/", 1)[0] for n in members}
    assert len(tops) == 1, f"one engine folder expected, got {tops}"
    return dest / tops.pop(), members


def rank_dumps(m: Manifest, round_index: int = 1) -> dict[str, object]:
    return {d.rank: d for d in m.rounds[round_index - 1].dumps if d.rank}


# -- end to end ------------------------------------------------------------------------------------

@needs_pyspy
def test_capture_symm_tree_is_fast_simultaneous_and_reported_as_the_symm_mem_signature(symm_tree, tmp_path):
    bundle = tmp_path / "b.tar.gz"
    t0 = time.monotonic()
    p = hf("capture", "--pid", str(symm_tree.parent), "-o", str(bundle), "--native")
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(bundle)
    assert took < 10, f"capture took {took:.1f} s"
    assert all(s.startswith(("hangforensics: not captured: ", str(bundle))) for s in p.stderr.splitlines())

    engine, members = unpack(bundle, tmp_path / "x")
    pids = symm_tree.ranks
    assert engine.name == f"{os.uname().nodename}-{symm_tree.parent}"
    names = {n.split("/", 1)[1] for n in members}
    assert {"manifest.json", "proc/round1.json", "logs/server.log",
            f"pyspy/round1/main-{symm_tree.parent}.txt"} <= names
    assert {f"pyspy/round1/TP{i}-{pids[f'TP{i}']}.txt" for i in range(4)} <= names
    assert all(not n.startswith("/") and ".." not in n.split("/") for n in members)

    m = read_manifest(engine)
    assert m is not None and m.format_version == 1
    assert m.host.hostname == os.uname().nodename
    assert m.command[:2] == ("hangforensics", "capture") and "--native" in m.command
    assert (m.target.root_pid, m.target.family, m.target.selector) == (symm_tree.parent, "sglang", "pid")
    assert m.tool("py-spy").version and m.tool("nvidia-smi") is not None and m.tool("sglang") is not None
    roles = {p.pid: p for p in m.processes}
    assert roles[symm_tree.parent].role == "main"
    for label, pid in pids.items():
        entry = roles[pid]
        assert (entry.role, entry.rank, entry.label) == ("scheduler", label, label)
        assert entry.state == "S" and entry.wchan, entry       # blocked in the kernel, not running
        assert entry.threads == 2                              # MainThread + HealthPoller
        assert entry.title == f"sglang::scheduler_{label}"
    # the wait the seed incident shows: recvmsg on a Unix socket
    assert {roles[p].wchan for p in pids.values()} <= {"unix_stream_read_generic", "unix_stream_data_wait"}

    (rnd,) = m.rounds
    dumps = rank_dumps(m)
    assert set(dumps) == set(pids) and all(d.ok and d.native for d in dumps.values())
    starts = [d.start for d in dumps.values()]
    assert (max(starts) - min(starts)).total_seconds() < 1.0, "ranks were not dumped at the same moment"
    assert rnd.start_spread_s < 1.0
    assert all(d.start.utcoffset() is not None for d in dumps.values())    # ISO-8601 with zone
    for d in dumps.values():
        text = (engine / d.file).read_text()
        assert text.startswith(f"Process {d.pid}: sglang::scheduler_{d.rank}\n")
        assert "_register_segments_for_comm" in text and "recvmsg (libc" in text
        assert abs(members[f"{engine.name}/{d.file}"].mtime - d.end.timestamp()) < 1e-3   # dated by capture
        assert m.dump_for(d.file) == d
    facts = {f.pid: f for f in rnd.facts}
    assert all(facts[p].syscall in ("recvmsg", None) for p in pids.values())
    proc = json.loads((engine / "proc/round1.json").read_text())
    assert {r["pid"] for r in proc["processes"]} == {p.pid for p in m.processes}
    assert all(len(r["thread_list"]) == 2 for r in proc["processes"] if r["pid"] in pids.values())

    # the log: the server's stdout file, found through /proc, with its own modification time
    (tail,) = m.logs
    assert tail.origin.startswith("stdout of pid") and tail.complete
    log_mtime = members[f"{engine.name}/logs/server.log"].mtime
    assert log_mtime == pytest.approx(symm_tree.log.stat().st_mtime, abs=1e-3)
    # keys on the command line never travel with the bundle
    for f in engine.rglob("*"):
        assert not f.is_file() or SECRET not in f.read_text(errors="replace"), f
    assert "--api-key ***" in roles[symm_tree.parent].title

    js = tmp_path / "f.json"
    r = hf("report", str(bundle), "-o", str(tmp_path / "r.html"), "--json", str(js))
    assert r.returncode == 0, r.stderr
    found = json.loads(js.read_text())["findings"]
    sig = [f for f in found if f.get("signature") == "symm-mem-window-register"]
    assert sig and sorted(sig[0]["ranks"]) == ["TP0", "TP1", "TP2", "TP3"], found
    assert not [f for f in found if f["rule"] == "collective-desync"]


FAKE_NVIDIA_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=driver_version) echo 550.54.15 ;;
  *) echo "timestamp, index, utilization.gpu [%], power.draw [W], memory.used [MiB]"
     for i in 0 1; do echo "$(date '+%Y/%m/%d %H:%M:%S.000'), $i, 0 %, 71.52 W, 61234 MiB"; done ;;
esac
"""


@needs_pyspy
def test_repeat_gives_rounds_apart_by_port_with_gpu_samples(symm_tree, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)      # no GPU here: a stand-in printing its CSV
    (bin_dir / "nvidia-smi").chmod(0o755)
    bundle = tmp_path / "b.tar.gz"
    p = hf("capture", "--port", str(symm_tree.port), "-o", str(bundle), "--repeat", "2", "--interval", "1",
           env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert p.returncode == 0, p.stderr
    assert "not captured" not in p.stderr
    engine, members = unpack(bundle, tmp_path / "x")
    m = read_manifest(engine)
    assert m.target.selector == "port" and m.target.root_pid == symm_tree.parent
    assert [r.index for r in m.rounds] == [1, 2]
    assert (m.rounds[1].started - m.rounds[0].started).total_seconds() >= 1.0
    for r in m.rounds:
        assert r.start_spread_s < 1.0 and all(d.ok and not d.native for d in r.dumps)
        assert f"{engine.name}/{r.proc_file}" in members
    for pid in symm_tree.ranks.values():
        (_, f1), (_, f2) = m.facts_of(pid)
        assert f1.state == f2.state == "S" and f1.wchan == f2.wchan      # did not move between rounds
        assert f2.cpu_s - f1.cpu_s < 0.5
    a, b = (engine / d.file for d in (rank_dumps(m, 1)["TP3"], rank_dumps(m, 2)["TP3"]))
    assert a.read_text() == b.read_text()                                 # the same stack both times
    assert m.gpu_file == "gpu/nvidia-smi.csv" and m.tool("nvidia-smi").version == "driver 550.54.15"
    csv = (engine / m.gpu_file).read_text().splitlines()
    assert csv[0].startswith("timestamp, index,") and len(csv) == 5       # one header, 2 GPUs x 2 rounds
    assert detect_kind(engine / m.gpu_file) == "gpu_samples"


@needs_pyspy
def test_native_failure_falls_back_to_a_plain_dump(symm_tree, tmp_path):
    wrapper = tmp_path / "py-spy-no-native"
    wrapper.write_text(f'#!/bin/sh\nif [ "$4" = --native ]; then\n'
                       f'  echo "Error: Failed to unwind native stack" >&2; exit 1\nfi\nexec {PYSPY} "$@"\n')
    wrapper.chmod(0o755)
    bundle = tmp_path / "b.tar.gz"
    p = hf("capture", "--pid", str(symm_tree.ranks["TP0"]), "-o", str(bundle), "--native",
           "--py-spy", str(wrapper))
    assert p.returncode == 0, p.stderr
    m = read_manifest(unpack(bundle, tmp_path / "x")[0])
    for d in m.rounds[0].dumps:
        assert d.ok and not d.native and d.note.startswith("--native failed (Error: Failed to unwind")


@needs_pyspy
def test_match_and_explicit_log_tail(symm_tree, tmp_path):
    bundle = tmp_path / "b.tar.gz"
    p = hf("capture", "--match", rf"sglang\.launch_server .*--port {symm_tree.port}$", "-o", str(bundle),
           "--logs", str(symm_tree.log), "--log-lines", "2", "--name", "node3 decode")
    assert p.returncode == 0, p.stderr
    engine, _ = unpack(bundle, tmp_path / "x")
    assert engine.name == "node3-decode"
    m = read_manifest(engine)
    assert m.target.selector == "match" and m.target.root_pid == symm_tree.parent
    (tail,) = m.logs
    assert (tail.origin, tail.lines, tail.complete) == ("--logs", 2, False)
    assert (engine / tail.file).read_text().splitlines() == symm_tree.log.read_text().splitlines()[-2:]


@needs_pyspy
def test_desync_tree_by_a_rank_pid_names_the_odd_rank(tmp_path):
    with spawn_tree(tmp_path / "tree", "desync") as tree:
        bundle = tmp_path / "b.tar.gz"
        # any pid of the tree: walked up to its root
        p = hf("capture", "--pid", str(tree.ranks["TP1"]), "-o", str(bundle))
        assert p.returncode == 0, p.stderr
    engine, _ = unpack(bundle, tmp_path / "x")
    m = read_manifest(engine)
    assert m.target.root_pid == tree.parent and len(m.processes) == 5
    tp2 = m.process(tree.ranks["TP2"])
    assert tp2.state == "S" and tp2.wchan                     # time.sleep: an hrtimer wait, not a socket
    assert tp2.wchan != m.process(tree.ranks["TP0"]).wchan
    js = tmp_path / "f.json"
    r = hf("report", str(bundle), "-o", str(tmp_path / "r.html"), "--json", str(js))
    assert r.returncode == 0, r.stderr
    found = json.loads(js.read_text())["findings"]
    desync = [f for f in found if f["rule"] == "collective-desync"]
    assert desync and desync[0]["ranks"] == ["TP2"], found
    assert "_all_reduce_attn_groups" in desync[0]["detail"]
    assert any(f["rule"] == "known-signature" and f["signature"] == "hicache-collective-desync"
               and f["ranks"] == ["TP2"] for f in found)


@needs_pyspy
def test_plain_pyspy_dumps_of_ranks_blocked_outside_any_collective_say_where_they_are(tmp_path):
    """Real py-spy dumps of four real processes hung in a start-up rendezvous (no log, no bundle): the summary
    names the one point every rank waits at, and asks for the dumps repeated to tell stuck from slow."""
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    with spawn_tree(tmp_path / "tree", "rendezvous") as tree:
        for label, pid in tree.ranks.items():
            out = subprocess.run([PYSPY, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            (dumps / f"{label}.txt").write_text(out.stdout)
    js = tmp_path / "f.json"
    r = hf("report", str(dumps), "-o", str(tmp_path / "r.html"), "--json", str(js))
    assert r.returncode == 0, r.stderr
    doc = json.loads(js.read_text())
    assert doc["findings"] == []
    (engine,) = doc["engines"]
    assert engine["verdict"].startswith("Only stack dumps: all 4 ranks at one point outside any collective: "
                                        "_recv_fds ← ShmBroadcastRendezvous.exchange_shm_fds ← init_shm_broadcast "
                                        "(idle: waiting)"), engine["verdict"]
    assert any("repeated a few seconds apart" in c for c in engine["capture_next"])


# -- what could not be captured: still a bundle, one clear line each -------------------------------

@needs_pyspy
def test_a_rank_that_exits_mid_capture(tmp_path):
    flag = tmp_path / "exit-now"
    wrapper = tmp_path / "py-spy-wrapper"
    # a stand-in for py-spy: asked to dump the victim, it first lets the victim exit (the victim leaves by
    # itself when the flag file appears), then runs the real py-spy on the vanished pid
    wrapper.write_text(f"""#!/bin/sh
if [ "$1" = dump ] && [ "$3" = "$(cat {tmp_path}/victim 2>/dev/null)" ]; then
  touch {flag}
  i=0; while [ -d /proc/$3 ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done
fi
exec {PYSPY} "$@"
""")
    wrapper.chmod(0o755)
    victim_env = {"CAPTURE_VICTIM": "TP3", "CAPTURE_EXIT_FLAG": str(flag)}
    with spawn_tree(tmp_path / "tree", "symm", victim_env) as tree:
        victim = tree.ranks["TP3"]
        (tmp_path / "victim").write_text(str(victim))
        bundle = tmp_path / "b.tar.gz"
        p = hf("capture", "--pid", str(tree.parent), "-o", str(bundle), "--repeat", "2", "--interval", "0.5",
               env={"HANGFORENSICS_PYSPY": str(wrapper)})
        assert p.returncode == 0, p.stderr
        assert not psutil.pid_exists(victim) or not _alive(victim, tree.born[victim])
    gone_lines = [s for s in p.stderr.splitlines() if "process gone" in s]
    assert len(gone_lines) == 1 and f"pid {victim} (TP3)" in gone_lines[0], p.stderr
    engine, _ = unpack(bundle, tmp_path / "x")
    m = read_manifest(engine)
    d1 = rank_dumps(m, 1)
    assert not d1["TP3"].ok and d1["TP3"].reason.startswith("process gone")
    assert all(d1[r].ok for r in ("TP0", "TP1", "TP2"))
    assert d1["TP3"].error_file and detect_kind(engine / d1["TP3"].error_file) == "capture_error"
    (_, f1), (_, f2) = m.facts_of(victim)
    assert not f1.gone and f2.gone                               # round 2 saw it gone; no dump was tried
    assert "TP3" not in rank_dumps(m, 2) and len(rank_dumps(m, 2)) == 3
    assert [f.pid for f in m.failures if f.what in ("pyspy", "process")] == [victim]


@needs_pyspy
def test_pyspy_missing_still_writes_the_bundle(symm_tree, tmp_path):
    bundle = tmp_path / "b.tar.gz"
    p = hf("capture", "--pid", str(symm_tree.parent), "-o", str(bundle),
           env={"HANGFORENSICS_PYSPY": str(tmp_path / "no" / "py-spy"), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert f"hangforensics: not captured: py-spy not found at {tmp_path / 'no' / 'py-spy'}" in p.stderr
    engine, members = unpack(bundle, tmp_path / "x")
    m = read_manifest(engine)
    assert m.tool("py-spy").version is None and not any(r.dumps for r in m.rounds)
    assert not [n for n in members if "/pyspy/" in n]
    assert {f.what for f in m.failures} >= {"tool"}
    assert all(m.process(pid).state == "S" for pid in symm_tree.ranks.values())   # /proc facts still there


@needs_pyspy
def test_a_pyspy_that_hangs_is_stopped_within_the_timeout(symm_tree, tmp_path):
    wrapper = tmp_path / "py-spy-hangs"
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = dump ] || exec {PYSPY} "$@"\nsleep 60\n')
    wrapper.chmod(0o755)
    bundle = tmp_path / "b.tar.gz"
    t0 = time.monotonic()
    p = hf("capture", "--pid", str(symm_tree.parent), "-o", str(bundle), "--timeout", "2", "--repeat", "3",
           "--py-spy", str(wrapper))
    assert p.returncode == 0, p.stderr
    assert time.monotonic() - t0 < 8
    timeouts = [s for s in p.stderr.splitlines() if "not captured: timeout: py-spy dump of pid" in s]
    assert len(timeouts) == 5, p.stderr
    assert "rounds 2..3 not taken: --timeout 2 s reached" in p.stderr
    m = read_manifest(unpack(bundle, tmp_path / "x")[0])
    assert len(m.rounds) == 1 and not any(d.ok for d in m.rounds[0].dumps)
    left = [q for q in psutil.process_iter(["cmdline"]) if str(wrapper) in " ".join(q.info["cmdline"] or [])]
    assert not left


def test_find_pyspy_off_path_and_not_installed():
    found = find_pyspy(search_path="", installed=False)
    assert found.path is None and "not on PATH" in found.note
    assert "pip install 'hangforensics[capture]'" in found.note          # the command that brings it


def test_the_capture_extra_brings_pyspy():
    """``pip install 'hangforensics[capture]'`` installs py-spy: the extra the error names exists."""
    import tomllib

    meta = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    extras = meta["project"]["optional-dependencies"]
    assert any(req.startswith("py-spy") for req in extras["capture"])


@needs_pyspy
def test_permission_denied_is_said_and_kept_as_failed_captures(symm_tree, tmp_path):
    wrapper = tmp_path / "py-spy-as-nobody"
    if os.geteuid() == 0 and shutil.which("setpriv"):
        # the real thing: py-spy run as an unprivileged user may not attach to root's processes
        body = f'[ "$1" = dump ] && exec setpriv --reuid=65534 --regid=65534 --clear-groups {PYSPY} "$@"\n' \
               f'exec {PYSPY} "$@"'
    else:
        # py-spy 0.4.3's own words when ptrace is refused (not root), exit status 1
        body = (f'[ "$1" = dump ] || exec {PYSPY} "$@"\n'
                "echo 'Permission Denied: Try running again with elevated permissions by going "
                "'\"'\"'sudo env \"PATH=$PATH\" !!'\"'\"'' >&2; exit 1")
    wrapper.write_text("#!/bin/sh\n" + body + "\n")
    wrapper.chmod(0o755)
    bundle = tmp_path / "b.tar.gz"
    p = hf("capture", "--pid", str(symm_tree.parent), "-o", str(bundle), "--py-spy", str(wrapper))
    assert p.returncode == 0, p.stderr
    denied = [s for s in p.stderr.splitlines() if "no permission" in s]
    assert len(denied) == 5 and all("CAP_SYS_PTRACE" in s for s in denied), p.stderr
    engine, _ = unpack(bundle, tmp_path / "x")
    m = read_manifest(engine)
    (rnd,) = m.rounds
    assert not any(d.ok for d in rnd.dumps)
    for d in rnd.dumps:
        assert d.error_file and detect_kind(engine / d.error_file) == "capture_error"
        assert "Permission Denied" in (engine / d.error_file).read_text()


@pytest.mark.parametrize("args, says", [
    (["--pid", "999999999"], "no process with pid 999999999"),
    (["--match", "no-such-engine-[x]yz"], "no engine process found: --match"),
    (["--pid", "1", "--port", "1"], "only one of --pid, --port and --match"),
    (["--repeat", "0"], "--repeat must be at least 1"),
])
def test_bad_targets_are_one_line_exit_2_and_no_bundle(args, says, tmp_path):
    p = hf("capture", *args, "-o", str(tmp_path / "b.tar.gz"))
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr and says in p.stderr, p.stderr
    assert list(tmp_path.iterdir()) == []                    # no bundle, no staging left behind


def test_an_existing_bundle_is_never_overwritten(tmp_path):
    earlier = tmp_path / "b.tar.gz"
    earlier.write_bytes(b"an earlier capture")
    p = hf("capture", "--pid", "1", "-o", str(earlier))
    assert p.returncode == 2 and "already exists" in p.stderr and p.stderr.count("\n") == 1
    assert earlier.read_bytes() == b"an earlier capture"


# -- units -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("title, role, rank, label", [
    ("sglang::scheduler_DP0_TP3_EP3", "scheduler", "DP0 TP3 EP3", "DP0_TP3_EP3"),
    ("sglang::scheduler_TP3", "scheduler", "TP3", "TP3"),
    ("sglang::scheduler_PP1_TP4", "scheduler", "PP1 TP4", "PP1_TP4"),
    ("sglang::detokenizer", "detokenizer", None, "detokenizer"),
    ("sglang::data_parallel_controller", "dp_controller", None, "dp_controller"),
    ("/usr/bin/python3 -m sglang.launch_server --model-path m --tp 8", "main", None, "main"),
    ("VLLM::EngineCore_DP1", "engine_core", "DP1", "EngineCore_DP1"),
    ("VLLM::Worker_TP2", "worker", "TP2", "TP2"),
    ("VLLM::APIServer", "api_server", None, "api_server"),
    ("/opt/venv/bin/python /opt/venv/bin/vllm serve Qwen/Qwen3 --tensor-parallel-size 4", "main", None,
     "main"),
    ("python -m sglang_router.launch_server", "other", None, "other"),
    ("/usr/bin/python3 -c from multiprocessing.resource_tracker import main;main(8)", "other", None, "other"),
])
def test_roles_and_ranks_from_titles(title, role, rank, label):
    got_role, _, got_rank = classify(title)
    assert (got_role, got_rank, label_of(got_role, got_rank, title)) == (role, rank, label)


def test_secrets_are_masked():
    masked = redact("serve --api-key sk-1 --hf-token=hf_x --port 8000")
    assert masked == "serve --api-key *** --hf-token=*** --port 8000"


def test_log_tail_reads_lines_from_the_end(tmp_path):
    f = tmp_path / "server.log"
    f.write_bytes(b"".join(b"line %d\n" % i for i in range(100_000)))
    t = plan_tail(f, 3)
    assert (t.lines, t.complete) == (3, False)
    assert f.read_bytes()[t.offset:t.end] == b"line 99997\nline 99998\nline 99999\n"
    f.write_bytes(b"a\nb\nc")                                 # a last line without its newline is a line
    t = plan_tail(f, 2)
    assert f.read_bytes()[t.offset:t.end] == b"b\nc" and t.lines == 2
    assert plan_tail(f, 10).complete
    gz = tmp_path / "server.log.1.gz"
    gz.write_bytes(gzip.compress(b"x\n" * 10))
    t = plan_tail(gz, 1)
    assert (t.offset, t.end, t.lines, t.complete) == (0, gz.stat().st_size, None, True)


def test_read_manifest_absent_malformed_and_newer(tmp_path):
    assert read_manifest(tmp_path) is None
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ManifestError, match="not JSON"):
        read_manifest(tmp_path)
    head = {"format": "hangforensics-capture", "format_version": 99}
    (tmp_path / "manifest.json").write_text(json.dumps(head))
    with pytest.raises(ManifestError, match="format_version 99"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({**head, "format_version": 1}))
    with pytest.raises(ManifestError, match="malformed"):
        read_manifest(tmp_path)


def test_manifest_round_trips(tmp_path):
    now = datetime.now().astimezone()
    d = DumpRecord(1, 42, "TP0", "TP0", "scheduler", True, "pyspy/round1/TP0-42.txt", None, now, now, False,
                   0)
    m = Manifest(1, "e", HostInfo("h", "6.8", "x86_64", 0, None), ("hangforensics", "capture"), "0.1.0", now,
                 now,
                 TargetInfo("pid", "42", 42, "sglang"), CaptureOptions(False, 1, 3.0, 120.0, 20000),
                 (ToolInfo("py-spy", "0.4.3", "/usr/bin/py-spy"),),
                 (ProcessEntry(42, 1, "sglang::scheduler_TP0", "scheduler", "TP0", "TP0", None, True, now,
                               "S"),),
                 (Round(1, now, now, "proc/round1.json", (d,),
                        (ProcessFacts(42, now, state="S", thread_states={"S": 2}),)),),
                 None, (), (Failure("gpu", "nvidia-smi not found on PATH: no GPU samples"),))
    (tmp_path / "manifest.json").write_text(m.to_json())
    back = read_manifest(tmp_path)
    assert back == m
    assert back.dump_for("pyspy/round1/TP0-42.txt") == d and back.dump_for("nope.txt") is None
