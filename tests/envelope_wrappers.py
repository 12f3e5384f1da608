"""Wrapping evidence as collectors and people hand it over (sglang-formats.md §12): one function per
envelope, each taking the payload lines and the collector's clock.  Shared by the envelope tests and the
ingest invariance tests."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta

T0 = datetime(2026, 4, 14, 2, 33, 58, 120000)          # the collector's UTC clock (payload is UTC+8)
Clock = datetime | list[datetime]                      # the collector's first time, or its time per line


def times(lines: list[str], t0: Clock = T0) -> list[datetime]:
    """The collector's clock: one line every 137 ms from ``t0``, or ``t0`` itself when it is one time per line."""
    if isinstance(t0, list):
        assert len(t0) == len(lines)
        return t0
    return [t0 + timedelta(milliseconds=137 * i) for i in range(len(lines))]


def go_nano(t: datetime) -> str:
    """Go's RFC3339Nano: nanoseconds with trailing zeros trimmed, Z."""
    frac = f"{t.microsecond:06d}123".rstrip("0")
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def cut(s: str, n: int) -> list[str]:
    return [s[i:i + n] for i in range(0, len(s), n)] or [""]


def w_kubectl(lines: list[str], t0: Clock = T0) -> list[str]:
    return [f"{go_nano(t)} {s}" for t, s in zip(times(lines, t0), lines, strict=True)]


def w_kubectl_prefix(lines: list[str], t0: Clock = T0) -> list[str]:
    """``kubectl logs -l app=sglang --prefix --timestamps``: two pods' lines in one stream."""
    return [f"[pod/sglang-{i % 2}/sglang] {go_nano(t)} {s}" for i, (t, s) in enumerate(zip(times(lines, t0), lines,
                                                                                           strict=True))]


def w_cri(lines: list[str], t0: Clock = T0) -> list[str]:
    out = []
    for t, s in zip(times(lines, t0), lines, strict=True):
        parts = cut(s, 100)                 # a small runtime limit, so several lines split
        ts = t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000+00:00"
        out += [f"{ts} stderr {'F' if i == len(parts) - 1 else 'P'} {p}" for i, p in enumerate(parts)]
    return out


def w_docker(lines: list[str], t0: Clock = T0) -> list[str]:
    out = []
    for t, s in zip(times(lines, t0), lines, strict=True):
        parts = cut(s, 90)
        for i, p in enumerate(parts):
            log = p + ("\n" if i == len(parts) - 1 else "")
            out.append(json.dumps({"log": log, "stream": "stderr", "time": go_nano(t)}, separators=(",", ":")))
    return out


def w_journald_short(lines: list[str], t0: Clock = T0) -> list[str]:
    return [f"{t:%b} {t.day:2d} {t:%H:%M:%S} gpu-07 python3[4121]: {s}" for t, s in zip(times(lines, t0), lines, strict=True)]


def w_journald_iso(lines: list[str], t0: Clock = T0) -> list[str]:
    return [f"{t:%Y-%m-%dT%H:%M:%S}+0000 gpu-07 python3[4121]: {s}" for t, s in zip(times(lines, t0), lines, strict=True)]


def w_journald_json(lines: list[str], t0: Clock = T0) -> list[str]:
    out = []
    for t, s in zip(times(lines, t0), lines, strict=True):
        us = int((t - datetime(1970, 1, 1)).total_seconds() * 1e6)
        parts = cut(s, 120)                 # journald's LineMax, made small
        for i, p in enumerate(parts):
            d = {"__REALTIME_TIMESTAMP": str(us), "_PID": "4121", "MESSAGE": p, "_HOSTNAME": "gpu-07"}
            if i < len(parts) - 1:
                d["_LINE_BREAK"] = "line-max"
            out.append(json.dumps(d))
    return out


def w_syslog_5424(lines: list[str], t0: Clock = T0) -> list[str]:
    return [f"<14>1 {t:%Y-%m-%dT%H:%M:%S.%f}+00:00 h100-gpu12 sglang 4121 - - {s}"
            for t, s in zip(times(lines, t0), lines, strict=True)]


def w_syslog_3164(lines: list[str], t0: Clock = T0) -> list[str]:
    return [f"<14>{t:%b} {t.day:2d} {t:%H:%M:%S} gpu-07 python3[4121]: {s}" for t, s in zip(times(lines, t0), lines, strict=True)]


def w_fluentbit(lines: list[str], t0: Clock = T0) -> list[str]:
    return [json.dumps({"date": (t - datetime(1970, 1, 1)).total_seconds(), "log": s + "\n", "stream": "stderr",
                        "kubernetes": {"pod_name": "sglang-0"}}) for t, s in zip(times(lines, t0), lines, strict=True)]


def w_vector(lines: list[str], t0: Clock = T0) -> list[str]:
    return [json.dumps({"host": "gpu-07", "message": s, "source_type": "kubernetes_logs", "timestamp": go_nano(t)})
            for t, s in zip(times(lines, t0), lines, strict=True)]


def w_ansi(lines: list[str], t0: Clock = T0) -> list[str]:
    def paint(s: str) -> str:
        s = re.sub(r"\b(INFO|200 OK|TP\d)\b", "\x1b[32m\\1\x1b[0m", s)
        return f"\x1b[2K\rloading {len(s) % 100}%\r{s}" if s.startswith("[") else s
    return [paint(s) for s in lines]


def w_compose(lines: list[str], t0: Clock = T0) -> list[str]:
    return [f"sglang-1  | {s}" if s else "sglang-1  |" for s in lines]


def w_quote(lines: list[str], t0: Clock = T0) -> list[str]:
    return [f"> {s}" if s else ">" for s in lines]


def w_fenced(lines: list[str], t0: Clock = T0) -> list[str]:
    return ["The decode server hung, log below:", "", "```log", *lines, "```", "", "Thanks for looking!"]


def w_details(lines: list[str], t0: Clock = T0) -> list[str]:
    return ["<details>", "<summary>server.log</summary>", "", "~~~", *lines, "~~~", "</details>"]


def w_lineno(fmt: str) -> Callable[..., list[str]]:
    def wrap(lines: list[str], t0: Clock = T0) -> list[str]:
        return [fmt.format(n=80000 + i, s=s).rstrip(" ") if not s else fmt.format(n=80000 + i, s=s)
                for i, s in enumerate(lines)]
    return wrap


def w_viewer_ts(lines: list[str], t0: Clock = T0) -> list[str]:
    return [f" {t + timedelta(hours=3):%Y-%m-%d %H:%M:%S} {s}" for t, s in zip(times(lines, t0), lines, strict=True)]


def w_ray(lines: list[str], t0: Clock = T0) -> list[str]:
    """Ray's driver console with RAY_COLOR_PREFIX=0: the actor's tag before every line, blank ones too (as
    Ray 2.60 wrote tests/data/real_envelopes/ray-driver)."""
    return [f"(SGLangEngine pid=4242) {s}" for s in lines]


def w_ray_console(lines: list[str], t0: Clock = T0) -> list[str]:
    """Ray's driver console by default: the tag in a colour's escapes."""
    return [f"\x1b[36m(SGLangEngine pid=4242)\x1b[0m {s}" for s in lines]


WRAP_WIDTH = 110


def w_hard_wrap(lines: list[str], t0: Clock = T0) -> list[str]:
    return [piece for s in lines for piece in cut(s, WRAP_WIDTH)]


WRAPPERS: dict[str, tuple[list[Callable[..., list[str]]], str]] = {
    # name: (wrappers applied innermost first, expected stack)
    "kubectl": ([w_kubectl], "kubectl"),
    "kubectl_prefix": ([w_kubectl_prefix], "kubectl"),
    "cri": ([w_cri], "cri"),
    "docker_json": ([w_docker], "docker_json"),
    "journald_short": ([w_journald_short], "journald"),
    "journald_iso": ([w_journald_iso], "journald"),
    "journald_json": ([w_journald_json], "journald"),
    "syslog_5424": ([w_syslog_5424], "syslog"),
    "syslog_3164": ([w_syslog_3164], "syslog"),
    "fluentbit": ([w_fluentbit], "fluentbit"),
    "vector": ([w_vector], "vector"),
    "ansi": ([w_ansi], "ansi"),
    "compose": ([w_compose], "compose"),
    "ray": ([w_ray], "proc_tag"),  # (a head of SGLang records only is plain: the parser reads their tag)
    "ray_console": ([w_ray_console], "ansi+proc_tag"),
    "quote": ([w_quote], "markdown"),
    "fenced": ([w_fenced], "markdown"),
    "details": ([w_details], "markdown"),
    "lineno_bracket": ([w_lineno("[{n}] {s}")], "viewer_lineno"),
    "lineno_pipe": ([w_lineno(" {n:6d} | {s}")], "viewer_lineno"),
    "lineno_colon": ([w_lineno("{n}:{s}")], "viewer_lineno"),
    "lineno_tab": ([w_lineno("{n:6d}\t{s}")], "viewer_lineno"),
    "viewer_ts": ([w_viewer_ts], "viewer_ts"),
    "hard_wrap": ([w_hard_wrap], "hard_wrap"),
    "compose+kubectl": ([w_kubectl, w_compose], "compose+kubectl"),
    "quote+compose": ([w_compose, w_quote], "markdown+compose"),
    "fenced+compose+kubectl": ([w_kubectl, w_compose, w_fenced], "markdown+compose+kubectl"),
    "quote+lineno": ([w_lineno("[{n}] {s}"), w_quote], "markdown+viewer_lineno"),
    "ansi+compose": ([w_compose, w_ansi], "ansi+compose"),
    "hard_wrap+kubectl": ([w_kubectl, w_hard_wrap], "hard_wrap+kubectl"),
    "quote+viewer_ts": ([w_viewer_ts, w_quote], "markdown+viewer_ts"),
    "fluentbit+cri": ([w_cri, w_fluentbit], "fluentbit+cri"),
    "lineno_pipe+compose": ([w_compose, w_lineno(" {n:6d} | {s}")], "viewer_lineno+compose"),
    "viewer_ts+compose": ([w_compose, w_viewer_ts], "viewer_ts+compose"),
}
TIMED = {"kubectl", "cri", "docker_json", "journald", "syslog", "fluentbit", "vector", "viewer_ts"}


TIMED_WRAPPERS = {w_kubectl, w_kubectl_prefix, w_cri, w_docker, w_journald_short, w_journald_iso, w_journald_json, w_syslog_5424,
                  w_syslog_3164, w_fluentbit, w_vector, w_viewer_ts}


def wrap(lines: list[str], name: str, t0: Clock = T0) -> list[str]:
    """``lines`` in the envelope ``name`` of WRAPPERS (layers applied innermost first; a clock per line is the
    innermost timed layer's, other layers count from its first time: the innermost time is the one kept; a
    viewer's column over compose prefixes still shows each line's own time)."""
    layers = WRAPPERS[name][0]
    timed = next((k for k, w in enumerate(layers) if w in TIMED_WRAPPERS), 0)
    for k, w in enumerate(layers):
        lines = w(lines, t0 if k == timed or not isinstance(t0, list) else t0[0])
    return lines
