"""A torch.distributed job's own lines: gloo / c10d errors, torchrun's elastic agent and its failure summary.

Shapes (torch 2.x under torchrun; every rank's stderr merged into the launcher's, Python tracebacks of a
rank prefixed ``[rankN]:``)::

    [rank3]: RuntimeError: [/__w/.../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 15000ms for recv operation to complete
    [rank0]: RuntimeError: [.../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:29100. This is ...
    RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [10.1.0.3]:43562: Connection reset by peer
    terminate called after throwing an instance of 'gloo::EnforceNotMet'
      what():  [enforce fail at .../gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 2048 vs 512. Received data size doesn't match expected size. ...
    torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, ...
    W1204 15:48:28.665000 5345 .../torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 5360 closing signal SIGTERM
    E1204 15:48:28.693000 5345 .../torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 2 (pid: 5362) of binary: /usr/bin/python
    ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 2810) of binary: ...  (torch < 2.3)
    torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
    ============================================================
    job.py FAILED
    ------------------------------------------------------------
    Failures:
    [1]:
      time      : 2026-12-04_15:48:28
      host      : node3
      rank      : 0 (local_rank: 0)
      exitcode  : -15 (pid: 5360)  (SIGTERM)          ('(SIGTERM)' since torch 2.4)
      error_file: <N/A>
      traceback : Signal 15 (SIGTERM) received by PID 5360
    ------------------------------------------------------------
    Root Cause (first observed failure):
    [0]:
      ...
    ============================================================

The record grammar (which line starts a record, which continues one) is ``sglang_patterns``; these
patterns are written for both Rust's regex (the polars classifier) and Python's ``re``.  The records'
fields are read here.  A gloo timeout names no collective sequence number: it says that the rank's
collective timed out, never which one, so it is no ``collectives`` row.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from ..collectives.torch_nccl import barrier_facts

# -- record starts (classifier patterns, Rust and Python syntax alike) ---------------------------------
_RANK = r"^(?:\[rank\d+\]: ?)?"
# torch.distributed's Python loggers: glog form (torch >= 2.3), else logging's default 'LEVEL:logger:msg'
_ELASTIC_HEAD = (r"(?:[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S*torch/distributed/\S*:\d+\] "
                 r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):torch\.distributed\.[\w.]+:)")
# the elastic agent's line for a worker that exited non-zero (the first observed failure)
WORKER_FAILED = _RANK + _ELASTIC_HEAD + r"failed \(exitcode: -?\d+\) local_rank: \d+ \(pid: \d+\)"
ELASTIC = _RANK + _ELASTIC_HEAD
# torchrun's failure summary: the exception line, its title (the script or module that failed), its two
# sections (one record: a header inside a summary continues it, see sglang_log.classify)
CHILD_FAILED = (_RANK + r"(?:torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError:"
                r"|\S*[./]\S* FAILED$|Failures:$|Root Cause \(first observed failure\):$)")
CHILD_FAILED_ALWAYS = _RANK + r"torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError:"
# a rank's Python traceback under torchrun's '[rankN]:' prefix
RANK_TRACEBACK = r"^\[rank\d+\]: ?Traceback \(most recent call last\):"
# An error of torch.distributed or gloo: c10d's own exception types (any message); any exception whose
# message is gloo's ('[<path>/gloo/<file>:<line>] ...', '[enforce fail at ...gloo...]') or one only c10d
# prints; a C++ gloo exception that ends the process (std::terminate: SIGABRT).  Anchored at the line's start
# (after torchrun's prefix) so that a frame or a quoted line mentioning gloo does not start a record.
_EXC = r"(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)"
_GLOO_SRC = r"\[(?:enforce fail at )?[^\]]*\bgloo/[^\]]*\]"
_C10D_PHRASES = (r"Timed out waiting \d+ms for (?:recv|send) operation|Gloo connectFullMesh failed"
                 r"|is setting up NCCL communicator|NCCL communicator was aborted|NCCL error in: "
                 r"|Detected mismatch between collectives on ranks|failed to pass monitoredBarrier"
                 r"|successfully reached monitoredBarrier")
C10D_ERROR = (_RANK + r"(?:(?:torch\.distributed\.)?Dist(?:Backend|Network|Store|QueueEmpty)?Error: "
              r"|" + _EXC + r": (?:" + _GLOO_SRC + r"|.*(?:" + _C10D_PHRASES + r"))"
              r"|terminate called after throwing an instance of 'gloo::)")

# -- fields -----------------------------------------------------------------------------------------
RANK_PREFIX_RE = re.compile(r"^\[rank(\d+)\]: ?")
_ELASTIC_RE = re.compile(
    r"^(?:(?P<lvl>[IWEF])(?P<md>\d{4}) (?P<hms>\d\d:\d\d:\d\d)\.(?P<frac>\d+) +(?P<pid>\d+) (?P<src>\S+):(?P<srcline>\d+)\] "
    r"|(?P<level>[A-Z]+):(?P<logger>torch\.distributed\.[\w.]+):)(?P<msg>.*)$")
_WORKER_FAILED_RE = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)(?: of (?:binary|fn): (\S+))?")
_CLOSING_RE = re.compile(r"Sending process (\d+) closing signal (SIG\w+)")
_DEATH_SIGNAL_RE = re.compile(r"Received (?:Signals\.)?(SIG\w+|\d+) death signal")
_EXC_HEAD_RE = re.compile(r"^(?P<type>" + _EXC + r"): (?P<msg>.*)$")
_TERMINATE_RE = re.compile(r"^terminate called after throwing an instance of '(?P<type>[^']+)'")
_WHAT_RE = re.compile(r"^\s*what\(\):\s+(?P<msg>.*)$")
_GLOO_SRC_RE = re.compile(r"\[(?:enforce fail at )?(?P<path>[^\]]*\bgloo/[^\]:]*)(?::(?P<line>\d+))?\] ?")
_TIMEOUT_RE = re.compile(r"Timed out waiting (\d+)ms for (recv|send) operation")
_PEER_RE = re.compile(r"(\[[^\]]*\]:\d+)")
_SIZES_RE = re.compile(r"(\d+) vs (\d+)\. Received data size doesn't match expected size")
EXCEPTION_LINE_RE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Interrupt|NotMet|Exit)\b")

# the summary's entries
_ENTRY_RE = re.compile(r"^\s*\[(\d+)\]:\s*$")
_FIELD_RE = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
_RANK_FIELD_RE = re.compile(r"^(-?\d+) \(local_rank: (-?\d+)\)")
_EXIT_FIELD_RE = re.compile(r"^(-?\d+) \(pid: (\d+)\)(?:\s+\((SIG\w+)\))?")
_SIGNAL_MSG_RE = re.compile(r"^Signal (\d+) \((SIG\w+)\) received by PID (\d+)")
_SECTION_RE = re.compile(r"^\s*(Failures:|Root Cause \(first observed failure\):)\s*$")
_TITLE_RE = re.compile(r"^(\S+) FAILED$")

# Linux numbering (the launcher printed it there): signal names without asking this host's platform
SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
           8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM",
           15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ"}


def strip_rank(text: str) -> tuple[int | None, str]:
    """(global rank, the text after torchrun's '[rankN]:' prefix)."""
    m = RANK_PREFIX_RE.match(text)
    return (int(m.group(1)), text[m.end():]) if m else (None, text)


def signal_of(exit_code: int | None, printed: str | None = None) -> str | None:
    """The signal a negative exit code stands for ('SIGKILL' for -9), as printed where it was."""
    if printed:
        return printed
    if exit_code is None or exit_code >= 0:
        return None
    return SIGNALS.get(-exit_code, f"signal {-exit_code}")


# -- gloo / c10d errors --------------------------------------------------------------------------------


def error_attrs(first: str, cont: list[str]) -> dict[str, Any]:
    """The fields of a gloo / c10d error record: ``first`` its line, ``cont`` the lines after it (a
    terminate's ``what():``).

    ``backend`` gloo / nccl / c10d; ``error`` timeout, connection_closed, connection_reset, broken_pipe,
    size_mismatch, enforce, connect, nccl_error, store or other; ``event`` collective_timeout for a timeout
    (the vocabulary of the torch_nccl events); ``op`` recv / send and ``timeout_ms`` of a gloo timeout;
    ``peer`` the address gloo names; ``src`` gloo's source file and line; ``abort`` for a C++ exception that
    ended the process (std::terminate: SIGABRT); ``reason`` the message in a few words.
    """
    rank, text = strip_rank(first)
    out: dict[str, Any] = {}
    if rank is not None:
        out["global_rank"] = rank
    t = _TERMINATE_RE.match(text)
    if t:
        out["exception"], out["abort"] = t.group("type"), True
        what = next((m.group("msg") for s in cont[:3] if (m := _WHAT_RE.match(strip_rank(s)[1]))), "")
        msg = what
    else:
        e = _EXC_HEAD_RE.match(text)
        out["exception"], msg = (e.group("type"), e.group("msg")) if e else (None, text)
    src = _GLOO_SRC_RE.search(msg)
    if src:
        out["backend"] = "gloo"
        out["src"] = src.group("path").rsplit("/", 1)[-1] + (f":{src.group('line')}" if src.group("line") else "")
        msg = (msg[:src.start()] + msg[src.end():]).strip()
    elif "gloo" in (out["exception"] or "").lower() or "Gloo" in msg:
        out["backend"] = "gloo"
    elif "NCCL" in msg:
        out["backend"] = "nccl"
    else:
        out["backend"] = "c10d"
    out.update(_classify(msg))
    out["reason"] = _reason(msg, out)
    return {k: v for k, v in out.items() if v is not None}


# TORCH_DISTRIBUTED_DEBUG=DETAIL's check (c10d ProcessGroupWrapper, before every collective): each rank's
# fingerprint against another rank's.  torch >= 2.1: 'Detected mismatch between collectives on ranks. Rank 0 is
# running collective: CollectiveFingerPrint(SequenceNumber=3, OpType=ALLREDUCE, TensorShape=[64], TensorDtypes=
# Float, TensorDeviceTypes=TensorOptions(...)), but Rank 3 is running collective: CollectiveFingerPrint(...).
# Collectives differ in the following aspects: \t Op type: ALLREDUCEvs BROADCAST'; 1.12-2.0 without the
# aspects, the other rank's op alone ('... but Rank 1 is running collective: REDUCE.'); 1.10-1.11 one rank's
# ('Rank 0 is running inconsistent collective: CollectiveFingerPrint(OpType=BROADCAST, ...)').
MISMATCH = "Detected mismatch between collectives on ranks"
_FINGERPRINT_RE = re.compile(r"Rank (\d+) is running (?:inconsistent )?collective: ?(.*?)(?=,? ?but Rank \d+ is running|$)")
_FP_SEQ_RE = re.compile(r"SequenceNumber=(\d+)")
_FP_OP_RE = re.compile(r"OpType=(\w+)")
_FP_BARE_OP_RE = re.compile(r"^([A-Z_][A-Z_0-9]*)\b")          # 1.12-2.0: the other rank's op alone
_FP_SHAPE_RE = re.compile(r"TensorShape=\[([\d, ]*)\]")
_FP_DTYPE_RE = re.compile(r"TensorDtypes=(\w+)")
_ASPECTS_RE = re.compile(r"Collectives differ in the following aspects:\s*(.*)$")


def mismatch_fingerprints(msg: str) -> list[dict[str, Any]]:
    """The collective each rank the check names is running, in the message's order (the reporting rank's
    first): rank, seq (torch's per-group SequenceNumber; None before 2.0), op, shape, dtype; a fingerprint cut
    short (a paste) keeps what it shows."""
    text = msg.split("Collectives differ in the following aspects:")[0]
    out = []
    for m in _FINGERPRINT_RE.finditer(text):
        fp = m.group(2)
        seq, op = _FP_SEQ_RE.search(fp), _FP_OP_RE.search(fp) or _FP_BARE_OP_RE.match(fp)
        shape, dtype = _FP_SHAPE_RE.search(fp), _FP_DTYPE_RE.search(fp)
        out.append({"rank": int(m.group(1)), "seq": int(seq.group(1)) if seq else None,
                    "op": op.group(1) if op else None,
                    "shape": [int(x) for x in shape.group(1).replace(" ", "").split(",") if x] if shape else None,
                    "dtype": dtype.group(1) if dtype else None})
    return out


def _classify(msg: str) -> dict[str, Any]:
    barrier = barrier_facts(msg) if "monitoredBarrier" in msg else {}
    if barrier:
        return {"error": "monitored_barrier", **barrier}
    if MISMATCH in msg:
        aspects = _ASPECTS_RE.search(msg)
        return {"error": "collective_mismatch", "event": "collective_mismatch",
                "fingerprints": mismatch_fingerprints(msg),
                "differ": re.sub(r"\s+", " ", aspects.group(1)).strip()[:300] if aspects else None}
    t = _TIMEOUT_RE.search(msg)
    if t:
        return {"error": "timeout", "event": "collective_timeout", "timeout_ms": int(t.group(1)), "op": t.group(2)}
    peer = _PEER_RE.search(msg)
    out: dict[str, Any] = {"peer": peer.group(1) if peer else None}
    if "Received data size doesn't match expected size" in msg:
        s = _SIZES_RE.search(msg)
        out.update(error="size_mismatch", peer=None)
        if s:
            out.update(received_bytes=int(s.group(1)), expected_bytes=int(s.group(2)))
    elif "Connection closed by peer" in msg:
        out["error"] = "connection_closed"
    elif "Connection reset by peer" in msg:
        out["error"] = "connection_reset"
    elif "Broken pipe" in msg:
        out["error"] = "broken_pipe"
    elif "connectFullMesh" in msg or re.search(r"Connect(?:ion)? timeout|Connection refused", msg):
        out["error"] = "connect"
    elif "NCCL error" in msg or "NCCL communicator" in msg:
        out["error"] = "nccl_error"
    elif "store" in msg.lower():
        out["error"] = "store"
    elif msg.startswith("enforce fail") or "enforce fail" in msg:
        out["error"] = "enforce"
    else:
        out["error"] = "other"
    return out


def _reason(msg: str, a: dict[str, Any]) -> str:
    """The message in a few words: the known phrase, else its first sentence."""
    if a.get("error") == "timeout":
        return f"Timed out waiting {a['timeout_ms']}ms for {a['op']} operation to complete"
    if a.get("error") == "size_mismatch":
        sizes = (f" ({a['received_bytes']} bytes received, {a['expected_bytes']} expected)"
                 if "received_bytes" in a else "")
        return "Received data size doesn't match expected size" + sizes
    if a.get("error") == "connection_closed":
        return "Connection closed by peer" + (f" {a['peer']}" if a.get("peer") else "")
    if a.get("error") == "connection_reset":
        return "Connection reset by peer" + (f" {a['peer']}" if a.get("peer") else "")
    if a.get("error") == "monitored_barrier":
        return msg.strip()[:200]
    if a.get("error") == "collective_mismatch":
        said = " but ".join(f"rank{f['rank']} runs {f['op'] or 'a collective'}"
                            + (f" #{f['seq']}" if f["seq"] is not None else "") for f in a["fingerprints"])
        return f"{MISMATCH}: {said}" + (f" ({a['differ']})" if a.get("differ") else "")
    first = re.split(r"(?<=[.!?]) ", msg.strip(), maxsplit=1)[0]
    return first[:200]


# -- torchrun: the elastic agent's lines and its failure summary -----------------------------------------


def elastic_line(text: str) -> dict[str, Any] | None:
    """An elastic agent line: its glog time fields (md, hms, frac: dated by the caller) and what it says:
    ``event`` worker_failed (exit_code, local_rank, pid, signal), closing_signal (the launcher stopping a
    worker: pid, signal), death_signal (the launcher itself was signalled) or other."""
    rank, body = strip_rank(text)
    m = _ELASTIC_RE.match(body)
    if not m:
        return None
    msg = m.group("msg")
    out: dict[str, Any] = {"agent_pid": int(m.group("pid")) if m.group("pid") else None,
                           "src": f"{m.group('src').rsplit('/', 1)[-1]}:{m.group('srcline')}" if m.group("src") else None,
                           "logger": m.group("logger")}
    w = _WORKER_FAILED_RE.search(msg)
    c = _CLOSING_RE.search(msg)
    d = _DEATH_SIGNAL_RE.search(msg)
    if w:
        code = int(w.group(1))
        out.update(event="worker_failed", exit_code=code, signal=signal_of(code), local_rank=int(w.group(2)),
                   pid=int(w.group(3)), binary=w.group(4), source="elastic_agent", first_failure=True)
    elif c:
        out.update(event="closing_signal", pid=int(c.group(1)), signal=c.group(2))
    elif d:
        sig = d.group(1)
        out.update(event="death_signal", signal=sig if sig.startswith("SIG") else signal_of(-int(sig)))
    else:
        out["event"] = "other"
    if rank is not None:
        out["global_rank"] = rank
    return {"_time": m if m.group("md") else None, **{k: v for k, v in out.items() if v is not None}}


def failure_entries(lines: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """torchrun's failure summary (``ChildFailedError``): the summary's own fields (title, failures) and one
    dict per failed rank: ``offset`` / ``offset_end`` of its lines in ``lines``, ``rank`` (global),
    ``local_rank``, ``exit_code``, ``pid``, ``signal``, ``host``, ``ts``, ``root_cause`` (listed under 'Root
    Cause (first observed failure)'), ``traceback`` (its first line) and ``error`` (the exception line of a
    traceback the rank left, when it wrote one)."""
    summary: dict[str, Any] = {}
    entries: list[dict[str, Any]] = []
    section = None
    cur: dict[str, Any] | None = None
    in_tb = False
    for i, raw in enumerate(lines):
        text = strip_rank(raw)[1].rstrip()
        if i == 0 and "ChildFailedError" in text:
            continue
        if (t := _TITLE_RE.match(text.strip())) and not text.startswith(" "):
            summary["title"] = t.group(1)
            continue
        s = _SECTION_RE.match(text)
        if s:
            section, cur, in_tb = ("root_cause" if s.group(1).startswith("Root") else "failures"), None, False
            continue
        e = _ENTRY_RE.match(text)
        if e:
            cur = {"offset": i, "offset_end": i, "root_cause": section == "root_cause", "index": int(e.group(1))}
            entries.append(cur)
            in_tb = False
            continue
        if cur is None:
            continue
        f = _FIELD_RE.match(text)
        if f:
            cur["offset_end"] = i
            in_tb = _field(cur, f.group(1), f.group(2).strip())
        elif in_tb and text.startswith("  ") and text.strip():
            cur["offset_end"] = i                       # a traceback the rank recorded (@record), indented
            if EXCEPTION_LINE_RE.match(text.strip()):
                cur["error"] = text.strip()[:500]
        elif text.strip() and not set(text.strip()) <= {"=", "-"}:
            in_tb = False
    for c in entries:
        c["signal"] = signal_of(c.get("exit_code"), c.pop("_signal", None))
    summary["failures"] = len(entries)
    roots = [c["rank"] for c in entries if c["root_cause"] and c.get("rank") is not None]
    if roots:
        summary["root_cause_rank"] = roots[0]
    return summary, entries


def _field(cur: dict[str, Any], key: str, value: str) -> bool:
    """Set one field of an entry; True when it is the traceback (indented lines may follow)."""
    if key == "time":
        for fmt in ("%Y-%m-%d_%H:%M:%S", "%Y-%m-%d_%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"):
            try:
                cur["ts"] = datetime.strptime(value, fmt)
                break
            except ValueError:
                continue
    elif key == "host":
        cur["host"] = value
    elif key == "rank":
        m = _RANK_FIELD_RE.match(value)
        if m:
            cur["rank"], cur["local_rank"] = int(m.group(1)), int(m.group(2))
    elif key == "exitcode":
        m = _EXIT_FIELD_RE.match(value)
        if m:
            cur["exit_code"], cur["pid"] = int(m.group(1)), int(m.group(2))
            if m.group(3):
                cur["_signal"] = m.group(3)
    elif key == "error_file":
        if value and value != "<N/A>":
            cur["error_file"] = value
    elif key == "traceback":
        cur["traceback"] = value[:300]
        s = _SIGNAL_MSG_RE.match(value)
        if s and "_signal" not in cur:
            cur["_signal"] = s.group(2)
        elif EXCEPTION_LINE_RE.match(value):
            cur["error"] = value[:500]
        return True
    return False
