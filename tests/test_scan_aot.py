"""The compiled scanner built ahead of time (``scan_aot``): the same output as numba's JIT-compiled code, loaded
without numba, and the JIT's code where it cannot be built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hangforensics.parsers.sglang import scan_aot, sglang_fast, sglang_scan

REPO = Path(__file__).resolve().parents[1]


def _valid(result: tuple) -> list[np.ndarray]:
    """``scan``'s arrays with what it leaves unwritten zeroed (values are set only where the line's kind or
    status says: the rest is whatever the memory held)."""
    kind, ts, rank, ival, ist, fval, fst, graph, flags, spans, mstart, rid, uranks = result
    bulk = (kind == sglang_scan.BATCH) | (kind == sglang_scan.ACCESS) | (kind == sglang_scan.BATCH_SLOW)
    access = (kind == sglang_scan.ACCESS) | (kind == sglang_scan.ACCESS_BARE)    # (their spans)
    return [kind, np.where(bulk, ts, 0), np.where(bulk[None, :], rank, 0), np.where(ist == 1, ival, 0), ist,
            np.where(fst == 1, fval, 0), fst, graph, flags, np.where(access[None, :], spans, 0),
            np.where(bulk, mstart, 0), rid, uranks]


def _logs() -> list[bytes]:
    """Every log of the test corpora (each release's formats, envelopes, hostile bytes), and a busy stretch
    with CRLF endings, a non-ASCII line and a last line without its newline."""
    texts = [p.read_bytes() for p in sorted((REPO / "tests" / "data").rglob("*.log")) if p.stat().st_size]
    busy = b"".join(b"[2026-01-01 00:00:%02d TP%d] Decode batch, #running-req: %d, #token: %d, token usage: 0.%02d, "
                    b"gen throughput (token/s): %d.5, #queue-req: 0\r\n" % (i % 60, i % 8, i, 8 * i, i % 100, i)
                    for i in range(3000))
    access = b'[2026-01-01 00:01:00] INFO:     10.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK\n'
    texts.append(busy + access + "[2026-01-01 00:01:01 TP0] Décodé\n".encode() + busy[:-2])
    return texts


def test_the_module_built_ahead_gives_the_jit_output() -> None:
    """Line bounds, every typed value and the gathered text are the same, byte for byte, from both builds of
    the scanner, over every log of the corpora."""
    aot = scan_aot.load_or_build()
    logs = _logs()
    assert len(logs) > 50
    for raw in logs:
        buf = np.frombuffer(raw, np.uint8)
        ours, theirs = aot.bounds(buf), sglang_scan.bounds(buf)
        assert all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))
        starts, ends, brackets = ours
        for a, b in zip(_valid(aot.scan(buf, starts, ends, brackets, raw.isascii())),
                        _valid(sglang_scan.scan(buf, starts, ends, brackets, raw.isascii())), strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        for a, b in zip(aot.gather(buf, starts, ends), sglang_scan.gather(buf, starts, ends), strict=True):
            assert np.array_equal(a, b)


def test_the_module_built_ahead_cuts_a_collectors_prefixes_as_the_jit_does() -> None:
    """``envelope_cut`` and ``docker_cut`` give the same payload starts, unescaped texts, times and verdicts
    from both builds, over the corpora's logs behind each layer they cut (and the logs as they are)."""
    import json

    from hangforensics.parsers.sglang import envelope_cut, scan_layout

    aot = scan_aot.load_or_build()
    prefixes = {"kubectl": "2026-03-02T08:00:00.123456789Z ", "cri": "2026-03-02T08:00:00+05:30 stderr F ",
                "compose": "sglang-1  | ", "proc_tag": "(APIServer pid=7) ", "cri+proc_tag": "2026-03-02T08:00:00Z "
                "stdout F (SGLangEngine pid=7) ", "journald": "2026-03-02T08:00:00+0000 h100 sglang[12]: ",
                "syslog": '<14>1 2026-03-02T08:00:00.5 h100 llm 12 - [meta x="a\\"]"] '}
    seen = set()
    for raw in _logs():
        lines = raw.decode("utf-8", "replace").splitlines()
        for key, prefix in {**prefixes, "none": ""}.items():
            wrapped = "".join(prefix + s + "\n" for s in lines).encode()
            buf = np.frombuffer(wrapped, np.uint8)
            starts, ends, _ = aot.bounds(buf)
            layers = np.array([scan_layout.LAYER_CODES[k] for k in key.split("+")] if key != "none" else
                              [scan_layout.KUBECTL], np.int64)
            ours, theirs = aot.envelope_cut(buf, starts, ends, layers), envelope_cut.envelope_cut(buf, starts, ends,
                                                                                                  layers)
            assert ours[2] == theirs[2]
            seen.add(int(ours[2]))
            if ours[2] == scan_layout.OK:
                assert np.array_equal(ours[0], theirs[0]) and np.array_equal(ours[1], theirs[1])
        docker = "".join(json.dumps({"log": s + "\n", "stream": "stderr", "time": "2026-03-02T08:00:00.5Z"},
                                    ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c") + "\n"
                         for s in lines).encode()
        buf = np.frombuffer(docker, np.uint8)
        starts, ends, _ = aot.bounds(buf)
        ours, theirs = aot.docker_cut(buf, starts, ends), envelope_cut.docker_cut(buf, starts, ends)
        assert ours[2] == theirs[2]
        seen.add(int(ours[2]) + 10)
        if ours[2] == scan_layout.OK:
            assert bytes(ours[0]) == bytes(theirs[0]) and np.array_equal(ours[1], theirs[1])
    for raw in _logs()[:20]:                    # the year-less prefixes' fields (journald's short, RFC 3164)
        lines = raw.decode("utf-8", "replace").splitlines()
        for pri, prefix in ((False, "Mar  2 08:00:00 h100 sglang[12]: "), (True, "<14>Dec 31 23:59:59.5 h sglang: ")):
            wrapped = np.frombuffer("".join(prefix + s + "\n" for s in lines).encode(), np.uint8)
            starts, ends, _ = aot.bounds(wrapped)
            ours, theirs = aot.yearless_cut(wrapped, starts, ends, pri), envelope_cut.yearless_cut(wrapped, starts, ends, pri)
            assert ours[2] == theirs[2] and np.array_equal(ours[0], theirs[0]) and np.array_equal(ours[1], theirs[1])
    partial = np.frombuffer(b"2026-03-02T08:00:00Z stdout P half, \n2026-03-02T08:00:00Z stdout F half\n", np.uint8)
    starts, ends, _ = aot.bounds(partial)
    cri = np.array([scan_layout.CRI], np.int64)
    assert aot.envelope_cut(partial, starts, ends, cri)[2] == envelope_cut.envelope_cut(partial, starts, ends, cri)[2] \
        == scan_layout.FALLBACK
    assert seen == {scan_layout.OK, 10 + scan_layout.OK, 10 + scan_layout.FALLBACK}


def test_a_process_loads_it_without_numba() -> None:
    """Built once, the module is what a parser's fork server loads: numba is never imported (its import and
    the JIT's cached code cost every such process some 0.5 s)."""
    scan_aot.load_or_build()
    code = ("import sys\nimport hangforensics.ingest.preload_scanner\n"
            "from hangforensics.parsers.sglang import sglang_fast\n"
            "print(getattr(sglang_fast.scanner(), 'built_ahead', False), 'numba' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "False"]


def test_where_it_cannot_be_built_the_jit_code_is_used(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """A build that fails (no compiler, no headers) is said once and leaves a marker: later processes do not
    try again, and use numba's JIT-compiled scanner, which reads the same rows."""
    calls: list[str] = []

    def no_compiler(name: str, d: Path) -> None:
        calls.append(name)
        raise RuntimeError("error: command 'gcc' failed: No such file or directory")

    monkeypatch.setenv("HANGFORENSICS_SCANNER_DIR", str(tmp_path / "aot"))
    monkeypatch.setattr(scan_aot, "_build", no_compiler)
    with pytest.raises(scan_aot.BuildError, match="gcc"):
        scan_aot.load_or_build()
    assert "could not be compiled ahead of time" in caplog.text
    assert [p.suffix for p in (tmp_path / "aot").glob("*.failed")] == [".failed"]
    with pytest.raises(scan_aot.BuildError, match="gcc"):
        scan_aot.load_or_build()
    assert len(calls) == 1                               # the marker, not a second build
    monkeypatch.setattr(sglang_fast, "_scanner", None)
    assert sglang_fast.scanner() is sglang_scan


def test_its_name_follows_its_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    """A change to the scanner's code (or to numba, numpy, Python, the CPU) is a module of another name: an
    old build is never loaded for new code."""
    before = scan_aot.module_name()
    assert before == scan_aot.module_name()
    monkeypatch.setattr(scan_aot, "_cpu", lambda: "another CPU")
    assert scan_aot.module_name() != before
