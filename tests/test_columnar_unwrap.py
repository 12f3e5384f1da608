"""Collector prefixes unwrapped as a column (readers/envelopes/columnar.py): the same payload text and
collector times as each layer's line-by-line code, on any line (property), and the same rows through
``ingest`` whichever way a wrapped log's chunks are unwrapped."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from conftest import LogWriter
from hypothesis import given, settings
from hypothesis import strategies as st

from hangforensics.analysis.findings import run_rules
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.readers import logfile
from hangforensics.readers.envelopes import columnar
from hangforensics.readers.envelopes.unwrap import EnvelopeStack, Unwrapper
from hangforensics.store import Store

STACKS = {"kubectl": EnvelopeStack(("kubectl",), ("",)), "cri": EnvelopeStack(("cri",), ("",)),
          "syslog": EnvelopeStack(("syslog",), ("5424",)), "journald": EnvelopeStack(("journald",), ("short-iso",)),
          "proc_tag": EnvelopeStack(("proc_tag",), ("",)), "compose": EnvelopeStack(("compose",), ("",)),
          "ansi": EnvelopeStack(("ansi",), ("",)), "docker_json": EnvelopeStack(("docker_json",), ("",)),
          "ansi+proc_tag": EnvelopeStack(("ansi", "proc_tag"), ("", "")),
          "cri+proc_tag": EnvelopeStack(("cri", "proc_tag"), ("", "")),
          "kubectl+compose+ansi": EnvelopeStack(("kubectl", "compose", "ansi"), ("", "", "")),
          "compose+kubectl": EnvelopeStack(("compose", "kubectl"), ("", ""))}


def line_by_line(key: str, lines: list[str]) -> tuple[list[str], list[datetime | None]]:
    u = Unwrapper(STACKS[key]).feed(list(lines), 1, final=True)
    return u.payload, u.collected_ts


def as_column(key: str, lines: list[str]) -> tuple[list[str], list[datetime | None]] | None:
    got = columnar.unwrap_column(key, pl.Series(lines, dtype=pl.String))
    return None if got is None else (got[0].to_list(), got[1].to_list())


# -- lines near and far from each prefix: valid and invalid times, zones, fractions, glued or missing parts --
digits = st.text("0123456789", min_size=1, max_size=10)
two = st.sampled_from(["00", "01", "09", "12", "13", "23", "24", "29", "30", "31", "59", "60", "99"])
year = st.sampled_from(["0000", "0001", "1999", "2026", "9999", "２０２６"])
base = st.builds(lambda y, mo, d, h, mi, s, t: f"{y}-{mo}-{d}{t}{h}:{mi}:{s}",
                 year, two, two, two, two, two, st.sampled_from(["T", "T", "T", " "]))
frac = st.one_of(st.just(""), st.builds(lambda sep, d: sep + d, st.sampled_from([".", ","]), digits))
zone = st.sampled_from(["Z", "z", "+00:00", "+0000", "+05:30", "-0130", "-12:00", "+14:00", "", "+5", "Zx"])
text = st.text(st.sampled_from("ab é\t[]\"\\:-=-1 2ー\u00a0\ufeff"), max_size=12)
stamp = st.builds(lambda b, f, z: b + f + z, base, frac, zone)
sep = st.sampled_from([" ", " ", "", "x", "\t"])

kubectl_line = st.one_of(
    st.builds(lambda pod, t, s, p: pod + t + s + p,
              st.sampled_from(["", "", "[pod/sglang-0/sglang] ", "[pod/a b] ", "[pod/x]"]), stamp, sep, text),
    text)
cri_line = st.one_of(
    st.builds(lambda t, stream, tag, s, p: f"{t} {stream} {tag}{s}{p}", stamp,
              st.sampled_from(["stdout", "stderr", "stdin"]), st.sampled_from(["F", "F", "X", "FF"]), sep, text),
    text)
sd = st.sampled_from(["-", "[a]", '[a b="c"]', '[a b="c\\"d"][e]', "[a", '[a b="]"]', "--"])
syslog_line = st.one_of(
    st.builds(lambda pri, t, host, s, d, b, p: f"<{pri}>1 {t}{host} app 12 ID {d}{s}{b}{p}",
              st.sampled_from(["14", "0", "191", "1000", "x"]), st.one_of(stamp, st.just("-")),
              st.sampled_from([" h100", "  h", " h\tx", ""]), sep, sd, st.sampled_from(["", "\ufeff"]), text),
    text)
journald_line = st.one_of(
    st.builds(lambda t, host, tag, s, p: f"{t}{host} {tag}{s}{p}", stamp,
              st.sampled_from([" h100", " h\tx", "", " a b"]),
              st.sampled_from(["sglang[123]:", "python3:", "sglang[x]:", "a:b:", "[1]:", "s[1]"]), sep, text),
    text)

# Ray's and launchers' process tags, whole, glued, in colour escapes that lost their ESC, before vLLM records
# (which keep them) and anything else
tag_name = st.sampled_from(["", "RayWorkerWrapper ", "MegatronPolicyWorker[rank=8] ", "Two words ", "a b c ",
                            "é ", "x:y.z-1 ", "(", ")"])
tag_ip = st.sampled_from(["", ", ip=10.1.2.3", ", ip=host-a.b:1", ", ip=", ",ip=1"])
colour = st.sampled_from(["", "[36m", "\x1b[36m", " [36m", " \x1b[1;36m", "[999m"])
after = st.sampled_from(["", " ", "  ", "[0m ", " \x1b[0m ", "x"])
record = st.one_of(text, st.builds(lambda lvl, rest: f"{lvl} 09-01 12:00:05 [x.py:1] {rest}",
                                   st.sampled_from(["INFO", "WARNING", "TRACE", "INFO:"]), text))
proc_tag_line = st.one_of(
    st.builds(lambda c, n, pid, ip, a, r: f"{c}({n}pid={pid}{ip}){a}{r}", colour, tag_name,
              st.sampled_from(["1", "4009", "", "x"]), tag_ip, after, record),
    text)

# docker compose's service column: names of any length and character, padding, the bar glued or alone
compose_line = st.one_of(
    st.builds(lambda n, pad, bar, p: f"{n}{pad}{bar}{p}",
              st.one_of(st.sampled_from(["sglang-1", "a.b_c-2", "é", "x" * 80, "x" * 81, "", "a b"]), text),
              st.sampled_from(["", " ", "   "]), st.sampled_from(["| ", "|", "|x", " | ", "||"]), text),
    text)
# a terminal's escapes (CSI, OSC ended by BEL or ST or not at all, charsets, two-byte, a lone ESC) and redraws
escape = st.sampled_from(["\x1b[32m", "\x1b[0m", "\x1b[1;36m", "\x1b[?25l", "\x1b[2K", "\x1b]0;title\x07",
                          "\x1b]8;;http://x\x1b\\", "\x1b]open", "\x1b(B", "\x1bM", "\x1b", "\x1b[", "\r", "\r\r",
                          "[32m"])
ansi_line = st.lists(st.one_of(escape, text), max_size=6).map("".join)



def _docker_entry(log: str, stamp: str, go: bool, order: int) -> str:
    """An entry as docker's json-file driver writes it (``go``: with Go's escapes of <, > and &), or in
    another key order."""
    import json

    body = json.dumps(log, ensure_ascii=False)
    if go:
        body = body.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("\x1b", "\\u001b")
    keys = [f'"log":{body}', '"stream":"stderr"', f'"time":"{stamp}"']
    return "{" + ",".join(keys if order == 0 else keys[::-1]) + "}"


docker_line = st.one_of(
    st.builds(_docker_entry, st.builds(lambda t, end: t + end, st.text(st.sampled_from(
        'ab é\t"\\/<>&\x1b\r\u2028[]:1 \x00\x08'), max_size=12), st.sampled_from(["\n", "\n", "", "\r\n", "\n\n"])),
              stamp, st.booleans(), st.sampled_from([0, 0, 0, 1])),
    text)


# Ray's console: its tag in a colour's escapes (``\x1b[36m(SGLangEngine pid=N)\x1b[0m ``), and redraws
ray_console_line = st.builds(lambda pre, line, post: pre + line + post, st.sampled_from(["", "\x1b[36m", "\x1b[1;33m"]),
                             st.one_of(proc_tag_line, st.builds(lambda rest: "(SGLangEngine pid=7)\x1b[0m " + rest, text)),
                             st.sampled_from(["", "\x1b[0m", "\r"]))


# a layer with times around layers without (a Ray pod's log on its node: CRI, then Ray's tag; kubectl around
# compose's column around colours)
cri_ray_line = st.one_of(
    st.builds(lambda t, stream, tag, s, p: f"{t} {stream} {tag}{s}{p}", stamp, st.sampled_from(["stdout", "stderr"]),
              st.sampled_from(["F", "F", "X"]), sep, proc_tag_line),
    proc_tag_line)
kubectl_compose_line = st.one_of(
    st.builds(lambda t, s, p: t + s + p, stamp, sep, st.builds(lambda c, a: c + a, compose_line, ansi_line)),
    compose_line)


@pytest.mark.parametrize("key, lines", [("kubectl", kubectl_line), ("cri", cri_line), ("syslog", syslog_line),
                                        ("journald", journald_line), ("proc_tag", proc_tag_line),
                                        ("compose", compose_line), ("ansi", ansi_line),
                                        ("docker_json", docker_line), ("ansi+proc_tag", ray_console_line),
                                        ("cri+proc_tag", cri_ray_line), ("kubectl+compose+ansi", kubectl_compose_line)])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_property_a_column_unwraps_as_the_layer_does_line_by_line(key: str, lines: st.SearchStrategy[str],
                                                                  data: st.DataObject) -> None:
    got = data.draw(st.lists(lines, min_size=1, max_size=30))
    column = as_column(key, got)
    if column is None:          # a chunk only docker's entries leave to the layer (partial, in another form)
        assert key == "docker_json"
        return
    assert column == line_by_line(key, got)


# the driver's own time: RFC 3339 with nanoseconds, any date the digits make (an impossible one has none)
driver_stamp = st.builds(lambda y, mo, d, h, mi, sec, f, z: f"{y}-{mo}-{d}T{h}:{mi}:{sec}{f}{z}",
                         st.sampled_from(["0000", "0001", "2026", "9999"]), two, two, two, two, two,
                         st.sampled_from(["", ".5", ".123456789", ",1"]),
                         st.sampled_from(["Z", "z", "+00:00", "+0000", "+05:30", "-0130", "-12:00"]))
whole_entry = st.builds(_docker_entry, st.builds(lambda t, end: t + end, st.text(st.sampled_from(
    'ab é\t"\\/<>&\x1b\u2028[]:1 '), max_size=20), st.sampled_from(["\n", "\r\n"])), driver_stamp,
    st.booleans(), st.just(0))


@settings(max_examples=300, deadline=None)
@given(got=st.lists(whole_entry, min_size=1, max_size=30))
def test_property_docker_entries_of_whole_lines_unwrap_as_a_column(got: list[str]) -> None:
    """A chunk of whole lines in the driver's own form (Go's escapes included) is read as a column, as the
    layer reads it."""
    column = as_column("docker_json", got)
    assert column is not None
    assert column == line_by_line("docker_json", got)


def test_zones_fractions_and_impossible_times_as_python_reads_them() -> None:
    lines = ["2026-03-02T08:00:00.123456789Z a", "2026-03-02T08:00:00,5-0130 b", "2026-03-02T08:00:00.5+05:30 c",
             "2026-02-30T08:00:00Z d", "2026-03-02T08:00:60Z e", "0001-01-01T00:30:00+01:00 f", "no prefix"]
    payload, ts = as_column("kubectl", lines)           # type: ignore[misc]
    assert payload == ["a", "b", "c", "d", "e", "f", "no prefix"]
    assert ts == [datetime(2026, 3, 2, 8, 0, 0, 123456), datetime(2026, 3, 2, 9, 30, 0, 500000),
                  datetime(2026, 3, 2, 2, 30, 0, 500000), None, None, None, None]
    assert (payload, ts) == line_by_line("kubectl", lines)


def test_a_cri_chunk_with_partial_lines_is_left_to_the_layer() -> None:
    lines = ["2026-03-02T08:00:00Z stdout P first half, ", "2026-03-02T08:00:00Z stdout F second half"]
    assert as_column("cri", lines) is None
    assert as_column("cri", lines[1:]) == line_by_line("cri", lines[1:])
    assert columnar.columnar_layer(("compose", "kubectl"), ("", "")) is None     # (a time inside: line by line)
    assert columnar.columnar_layer(("kubectl",), ("",)) == "kubectl"
    assert columnar.columnar_layer(("cri", "proc_tag"), ("", "")) == "cri+proc_tag"
    assert columnar.columnar_layer(("journald", "proc_tag"), ("short", "")) == "journald:short+proc_tag"
    assert columnar.columnar_layer(("cri", "kubectl"), ("", "")) is None


# -- the same prefixes cut from a chunk's bytes by the compiled scanner's side (``envelope_cut``) ----------------
def cut_from_bytes(key: str, lines: list[str]) -> tuple[list[str], list[datetime | None]] | None:
    """``envelope_cut`` of ``lines`` (a chunk's bytes, CRLF line ends): each payload and time, None where it
    leaves the chunk to the column."""
    import numpy as np

    from hangforensics.parsers.sglang import scan_layout, sglang_fast

    sc = sglang_fast.scanner()
    assert sc is not None
    raw = "".join(s + "\r\n" for s in lines).encode()
    buf = np.frombuffer(raw, np.uint8)
    starts, ends, _ = sc.bounds(buf)
    if key == "docker_json":            # the texts unescaped into bytes of their own, a line each
        out, times, status = sc.docker_cut(buf, starts, ends)
        if status != scan_layout.OK:
            return None
        payload = bytes(out).decode().split("\n")[:-1]
    else:
        layers = np.array([scan_layout.LAYER_CODES[k] for k in key.split("+")], np.int64)
        pstarts, times, status = sc.envelope_cut(buf, starts, ends, layers)
        if status != scan_layout.OK:
            return None
        payload = [raw[a:b].decode() for a, b in zip(pstarts.tolist(), ends.tolist(), strict=True)]
    return payload, [None if t == scan_layout.NO_TIME else datetime(1970, 1, 1) + timedelta(microseconds=t)
                     for t in times.tolist()]


@pytest.mark.parametrize("key, lines", [("kubectl", kubectl_line), ("cri", cri_line), ("proc_tag", proc_tag_line),
                                        ("compose", compose_line), ("cri+proc_tag", cri_ray_line),
                                        ("docker_json", docker_line), ("docker_json", whole_entry),
                                        ("journald", journald_line), ("syslog", syslog_line)])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_property_the_scanners_cut_of_a_prefix_is_the_columns(key: str, lines: st.SearchStrategy[str],
                                                              data: st.DataObject) -> None:
    """Behind kubectl, CRI, compose, a process's tag, docker's JSON, journald's ``short-iso`` or RFC 5424 syslog
    the scanner cuts each line's payload from the chunk's bytes (docker's: unescaped), with the collector's
    time: the same text and time as the column's unwrapping, on any line; where it leaves the chunk to the
    column (a CRI line in parts, a tag after a colour's remnant or one the column rewrites before a vLLM record,
    a payload that ends in CR) the column reads it."""
    got = data.draw(st.lists(lines, min_size=1, max_size=30))
    cut = cut_from_bytes(key, got)
    column = as_column(key, got)
    if cut is None:
        assert column is None or "proc_tag" in key or any(p.endswith("\r") for p in column[0]), \
            "only a partial CRI line, a tag in colour or a payload ending in CR is the column's"
        return
    assert cut == column


# a time inside an untimed layer (compose's column around kubectl's times): no column, the layers line by line
compose_kubectl_line = st.one_of(
    st.builds(lambda c, t, s, p: c + t + s + p, st.sampled_from(["sglang-1  | ", "x|", "a b | ", ""]), stamp, sep,
              text),
    compose_line)


@settings(max_examples=300, deadline=None)
@given(got=st.lists(compose_kubectl_line, min_size=1, max_size=30))
def test_property_a_time_inside_an_untimed_layer_is_cut_as_the_layers_read_it(got: list[str]) -> None:
    """compose's column around kubectl's times, which the column does not read: cut from the bytes, each line as
    the two layers read it one after the other, line by line."""
    assert columnar.columnar_layer(("compose", "kubectl"), ("", "")) is None
    cut = cut_from_bytes("compose+kubectl", got)
    assert cut is not None and cut == line_by_line("compose+kubectl", got)


def test_a_collectors_lines_as_they_come_are_cut_by_the_scanner() -> None:
    """Lines as kubelet, docker compose and Ray write them are the scanner's to cut (none left to the column),
    with the times of the column."""
    cases = {"kubectl": ["2026-03-02T08:00:00.123456789Z [2026-03-02 08:00:00 TP0] Decode batch. #running-req: 3",
                         "[pod/sglang-0/sglang] 2026-03-02T08:00:01+05:30 Traceback (most recent call last):",
                         "2026-03-02T08:00:02Z ", "no prefix at all"],
             "cri": ["2026-03-02T08:00:00.5Z stderr F [2026-03-02 08:00:00] INFO:     1.2.3.4:5 - \"GET /health "
                     "HTTP/1.1\" 200 OK", "2026-03-02T08:00:01-01:00 stdout F"],
             "compose": ["sglang-1  | [2026-03-02 08:00:00 TP0] Prefill batch.", "sglang-1  |", "web|x"],
             "proc_tag": ["(APIServer pid=3164) INFO:     10.0.9.66:54306 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
                          "(APIServer pid=3164) INFO 03-02 08:00:00 [loggers.py:123] Engine 000: Avg prompt",
                          "(RayWorkerWrapper pid=7, ip=10.0.0.2) [2026-03-02 08:00:00 TP1] Decode batch.",
                          "  File \"x.py\", line 1"],
             "cri+proc_tag": ["2026-03-02T08:00:00Z stdout F (SGLangEngine pid=7) [2026-03-02 08:00:00] x"]}
    for key, lines in cases.items():
        cut = cut_from_bytes(key, lines)
        assert cut is not None, key
        assert cut == as_column(key, lines), key
    payload, ts = cut_from_bytes("kubectl", cases["kubectl"])       # type: ignore[misc]
    assert payload[1] == "Traceback (most recent call last):" and ts[1] == datetime(2026, 3, 2, 2, 30, 1)
    assert cut_from_bytes("cri", ["2026-03-02T08:00:00Z stdout P half, ", "2026-03-02T08:00:00Z stdout F half"]) \
        is None


# -- times without a year (journald's default 'short', RFC 3164): the file's year, carried from chunk to chunk --
YEARLESS = {"journald:short": EnvelopeStack(("journald",), ("short",)), "syslog:3164": EnvelopeStack(("syslog",), ("3164",))}
month = st.sampled_from(["Jan", "Feb", "Feb", "Mar", "Jun", "Jul", "Dec", "Dec", "Foo"])
yearless_stamp = st.builds(lambda mo, d, h, mi, sec, f: f"{mo} {d:>2} {h}:{mi}:{sec}{f}", month,
                           st.sampled_from(["1", "9", "28", "29", "30", "31", "32", "05"]),
                           st.sampled_from(["00", "09", "23", "24"]), st.sampled_from(["00", "59", "60"]),
                           st.sampled_from(["00", "30", "59", "60", "61"]),
                           st.sampled_from(["", ".5", ",123456789", "."]))
yearless_line = st.one_of(st.builds(lambda pri, t, host, tag, s, p: f"{pri}{t}{host} {tag}{s}{p}",
                                    st.sampled_from(["", "<14>"]), yearless_stamp,
                                    st.sampled_from([" h100", "", " a b"]),
                                    st.sampled_from(["sglang[123]:", "python3:", "sglang[x]:", "s[1]"]), sep, text),
                          text)


def _fed(stack: EnvelopeStack, chunks: list[list[str]], hint: object, column: bool) -> list[tuple]:
    """Each chunk's payload and times, fed one after the other to one unwrapper (as lists: line by line)."""
    u = Unwrapper(stack, year_hint=hint)
    out = []
    for chunk in chunks:
        got = u.feed(pl.Series(chunk, dtype=pl.String) if column else list(chunk), 1)
        ts = got.collected_ts
        out.append((list(got.payload), ts.to_list() if isinstance(ts, pl.Series) else list(ts)))
    return out


@pytest.mark.parametrize("key", list(YEARLESS))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_property_a_yearless_column_unwraps_as_the_layer_does_chunk_after_chunk(key: str, data: st.DataObject) -> None:
    """The year of each time as ``times._Years`` gives it line after line, over chunks fed one after the other
    (the state carried): a chunk that stays within the year is read as a column, one that steps half a year
    (New Year, a jump) line by line, and the next chunk carries on from either alike."""
    chunks = data.draw(st.lists(st.lists(yearless_line, min_size=1, max_size=12), min_size=1, max_size=3))
    hint = data.draw(st.sampled_from([None, 2026, datetime(2026, 1, 3), datetime(2025, 12, 30, 23, 0), datetime(2024, 6, 1)]))
    assert _fed(YEARLESS[key], chunks, hint, column=True) == _fed(YEARLESS[key], chunks, hint, column=False)


def _fed_cut(stack: EnvelopeStack, key: str, chunks: list[list[str]], hint: object) -> list[tuple]:
    """``_fed``, each chunk cut by the scanner's side first (``yearless_cut``, its year by
    ``columnar.yearless_times`` on the unwrapper's state), the unwrapper's own reading where that declines."""
    import numpy as np

    from hangforensics.parsers.sglang import scan_layout, sglang_fast

    sc = sglang_fast.scanner()
    assert sc is not None
    u = Unwrapper(stack, year_hint=hint)
    out = []
    for chunk in chunks:
        raw = "".join(s + "\n" for s in chunk).encode()
        buf = np.frombuffer(raw, np.uint8)
        starts, ends, _ = sc.bounds(buf)
        pstarts, fields, status = sc.yearless_cut(buf, starts, ends, key == "syslog:3164")
        times = columnar.yearless_times(fields, u.years) if status == scan_layout.OK else None
        if times is None:
            got = u.feed(pl.Series(chunk, dtype=pl.String), 1)
            ts = got.collected_ts
            out.append((list(got.payload), ts.to_list() if isinstance(ts, pl.Series) else list(ts)))
            continue
        out.append(([raw[a:b].decode() for a, b in zip(pstarts.tolist(), ends.tolist(), strict=True)],
                    [None if t == scan_layout.NO_TIME else datetime(1970, 1, 1) + timedelta(microseconds=t)
                     for t in times.tolist()]))
    return out + [(u.years.year, u.years.last)]


@pytest.mark.parametrize("key", list(YEARLESS))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_property_the_scanners_cut_of_a_yearless_prefix_is_the_columns(key: str, data: st.DataObject) -> None:
    """journald's ``short`` and RFC 3164 cut from the bytes, chunk after chunk: the payloads and times of the
    column (each chunk's one year, the latest time carried; a chunk that steps half a year line by line), and
    the same year and latest time carried on after them."""
    chunks = data.draw(st.lists(st.lists(yearless_line, min_size=1, max_size=12), min_size=1, max_size=3))
    hint = data.draw(st.sampled_from([None, 2026, datetime(2026, 1, 3), datetime(2025, 12, 30, 23, 0), datetime(2024, 6, 1)]))
    u = Unwrapper(YEARLESS[key], year_hint=hint)
    column = _fed(YEARLESS[key], chunks, hint, column=True)
    for chunk in chunks:                        # (the column's final state, read again the column's way)
        u.feed(pl.Series(chunk, dtype=pl.String), 1)
    assert _fed_cut(YEARLESS[key], key, chunks, hint) == column + [(u.years.year, u.years.last)]


def test_a_yearless_log_is_read_as_a_column_until_it_crosses_new_year() -> None:
    """journald's ``short`` lines of one year are a column (the times the layer gives); a chunk across New Year
    is left to the layer, which moves to the next year; the chunk after it is a column again, in that year."""
    t0 = datetime(2025, 12, 31, 23, 58)
    lines = [f"{(t0 + timedelta(seconds=7 * i)):%b %d %H:%M:%S} h sglang[1]: line {i}" for i in range(60)]
    u = Unwrapper(EnvelopeStack(("journald",), ("short",)), year_hint=datetime(2025, 12, 31))
    assert u.columnar == "journald:short"
    first = columnar.unwrap_column(u.columnar, pl.Series(lines[:10]), u.years)
    assert first is not None and first[1].to_list()[-1] == datetime(2025, 12, 31, 23, 59, 3)
    assert columnar.unwrap_column(u.columnar, pl.Series(lines[10:30]), u.years) is None    # (crosses midnight)
    u.feed(lines[10:30], 11)                                                           # (line by line)
    last = columnar.unwrap_column(u.columnar, pl.Series(lines[30:]), u.years)
    assert last is not None and last[1].to_list()[0] == datetime(2026, 1, 1, 0, 1, 30)


# -- through ingest: the same rows whichever way the chunks are unwrapped --------------------------------------
def wrapped_log(key: str) -> list[str]:
    """A busy log with bare access lines (dated by their envelope), a stall's watchdog dump and lines no parser
    takes, behind ``key``'s prefix in a zone east of UTC with fractions of a second."""
    w = LogWriter(tp=2).startup().traffic(10, 160, ranks=("TP0", "TP1")).posts(12, 200).probes(15, 220)
    w.watchdog(180, "TP0").watchdog(180, "TP1").raw("garbage that no parser takes")
    t0 = w.t0 - timedelta(hours=8, minutes=30)
    out = []
    for i, s in enumerate(w.lines):
        t = (t0 + timedelta(milliseconds=731 * i)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-2]
        short = (t0 + timedelta(milliseconds=731 * i)).strftime("%b %d %H:%M:%S")     # (no year, no zone)
        prefix = {"kubectl": f"{t}+05:30 ", "cri": f"{t}-01:00 stdout F ",
                  "syslog": f"<14>1 {t}+05:30 h100 sglang 7 - - ", "journald": f"{t}+0530 h100 sglang[7]: ",
                  "journald-short": f"{short} h100 sglang[7]: ", "syslog-3164": f"<14>{short} h100 sglang[7]: "}[key]
        out.append(s if i % 17 == 5 else prefix + s)        # a few lines without the prefix: kept whole
    if key == "cri":                                        # a long line split in two parts: that chunk by line
        out[40:41] = [out[40][:60].replace(" F ", " P ", 1), out[40][:35] + out[40][60:]]
    return out


def rows(db: Store) -> dict[str, list[tuple]]:
    return {t: db.con.execute(f"SELECT * EXCLUDE (engine) FROM {t} ORDER BY ALL").fetchall()
            for t in ("batches", "http_requests", "events", "stacks", "unparsed", "sources")
            if t != "sources"} | {"sources": db.con.execute(
                "SELECT path, envelope, parsed_lines, unparsed_lines, read_bytes, status, note FROM sources").fetchall()}


@pytest.mark.parametrize("key", ["kubectl", "cri", "syslog", "journald", "journald-short", "syslog-3164"])
def test_a_wrapped_log_gives_the_same_rows_as_a_column_or_line_by_line(key: str, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "eng"
    folder.mkdir()
    (folder / "server.log").write_text("\n".join(wrapped_log(key)) + "\n")
    monkeypatch.setattr(logfile, "CHUNK_BYTES", 16 * 1024)            # many chunks, cut at record starts
    monkeypatch.setattr("hangforensics.ingest.parse.CHUNK_BYTES", 16 * 1024)
    seen: list[int] = []
    real = columnar.unwrap_column

    def counted(k: str, lines: pl.Series, *years: object) -> tuple[pl.Series, pl.Series] | None:
        got = real(k, lines, *years)
        seen.append(len(lines) if got is not None else 0)
        return got

    monkeypatch.setattr("hangforensics.readers.envelopes.unwrap.unwrap_column", counted)
    got = {}
    for way in ("column", "line"):
        if way == "line":
            monkeypatch.setattr("hangforensics.readers.envelopes.unwrap.columnar_layer", lambda *a: None)
        with Store(":memory:") as db:
            ingest_paths(db, [folder], mode="engine")
            got[way] = rows(db)
    assert sum(1 for n in seen if n) > 3                   # chunk by chunk, as a column
    assert got["column"]["sources"][0][1] == key.split("-")[0]
    assert sum(1 for r in got["column"]["http_requests"] if r[-1] is not None) > 20   # collected times kept
    assert got["column"] == got["line"]


# -- a collector's own output ------------------------------------------------------------------------------------
REAL = Path(__file__).parent / "data" / "real_envelopes"
SOURCE = Path(__file__).parent / "data" / "stack_variants" / "fleet" / "bom3-qwq-32b-21" / "server.log"


def _said(findings: list[dict]) -> list[tuple]:
    return sorted((f["rule"], f["severity"], f["ts"], f["ts_end"], tuple(f["ranks"]), f["title"]) for f in findings)


@pytest.mark.parametrize(("form", "envelope"), [("rsyslog-5424", "syslog"), ("rsyslog-traditional", "journald")])
def test_rsyslogs_own_output_gives_the_findings_of_the_plain_log(tmp_path: Path, form: str, envelope: str) -> None:
    """What rsyslogd wrote when fed a stalled engine's log (tests/data/real_envelopes/README.md), in RFC 5424
    and in its traditional file format (year-less, as journald's ``short``): read as a column behind its
    prefix, the same findings as the log itself, and every line parsed."""
    plain, wrapped = tmp_path / "plain", tmp_path / "wrapped"
    for folder, log in ((plain, SOURCE), (wrapped, REAL / form / "server.log")):
        folder.mkdir()
        (folder / "server.log").write_bytes(log.read_bytes())
    seen: list[int] = []
    real = columnar.unwrap_column

    def counted(k: str, lines: pl.Series, *years: object) -> tuple[pl.Series, pl.Series] | None:
        got = real(k, lines, *years)
        seen.append(len(lines) if got is not None else 0)
        return got

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("hangforensics.readers.envelopes.unwrap.unwrap_column", counted)
        with Store(":memory:") as db:
            ingest_paths(db, [wrapped], mode="engine")
            (src,) = db.query("SELECT envelope, parsed_lines, unparsed_lines FROM sources")
            got = _said(run_rules(db))
    assert seen and all(seen) and src["envelope"] == envelope
    with Store(":memory:") as db:
        ingest_paths(db, [plain], mode="engine")
        (plain_src,) = db.query("SELECT parsed_lines, unparsed_lines FROM sources")
        want = _said(run_rules(db))
    assert (src["parsed_lines"], src["unparsed_lines"]) == (plain_src["parsed_lines"], plain_src["unparsed_lines"])
    assert len(want) >= 3 and got == want


def test_a_ray_relayed_hang_gives_the_findings_of_the_plain_log_with_or_without_rays_own_lines(tmp_path: Path) -> None:
    """Ray's driver console relaying a hung engine's log (tests/data/real_envelopes/ray-driver-nccl: Ray 2.60's
    own output), every line behind the actor's tag, the torch watchdog's lines and native traces of the hang
    too: as Ray wrote it (read behind the ``proc_tag`` envelope), and without Ray's own two first lines (its
    head then only tagged SGLang lines: read as a plain log), the findings, stacks and parsed lines of the log
    itself.  Read as plain, the tag before torch's lines and the traces was not stripped: 92 lines unparsed,
    the signature and the first stopped rank lost."""
    relayed = (REAL / "ray-driver-nccl" / "server.log").read_bytes()
    forms = {"plain": (Path(__file__).parent / "data" / "variants" / "fleet" / "lhr5-llama31-70b-14"
                       / "server.log").read_bytes(),
             "relayed": relayed, "cut": b"".join(relayed.splitlines(keepends=True)[2:])}
    got = {}
    for form, data in forms.items():
        folder = tmp_path / form
        folder.mkdir()
        (folder / "server.log").write_bytes(data)
        with Store(":memory:") as db:
            ingest_paths(db, [folder], mode="engine")
            (src,) = db.query("SELECT envelope, parsed_lines FROM sources")
            stacks = db.scalar("SELECT count(*) FROM stacks")
            got[form] = (src, stacks, _said(run_rules(db)))
    assert got["relayed"][0]["envelope"] == "proc_tag" and got["cut"][0]["envelope"] == "none"
    want = got["plain"]
    assert len(want[2]) >= 3 and want[1] > 0
    for form in ("relayed", "cut"):
        assert got[form][0]["parsed_lines"] == want[0]["parsed_lines"], form
        assert got[form][1:] == want[1:], form


def test_rays_own_driver_output_gives_the_findings_of_the_plain_log(tmp_path: Path) -> None:
    """What Ray's log monitor printed on the driver's console when an actor printed a stalled engine's log
    (tests/data/real_envelopes/README.md), with its colours and without, unwrapped as a column (its tag, and
    with its colours two layers one after the other): the findings of the log itself,
    every line of it parsed as there, Ray's own two lines kept in unparsed, no line taken for a record cut
    into by another process's."""
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "server.log").write_bytes(SOURCE.read_bytes())
    with Store(":memory:") as db:
        ingest_paths(db, [plain], mode="engine")
        (want_src,) = db.query("SELECT parsed_lines, unparsed_lines FROM sources")
        want = _said(run_rules(db))
    assert len(want) >= 3
    for form, envelope in (("colour", "ansi+proc_tag"), ("no-colour", "proc_tag")):
        folder = tmp_path / form
        folder.mkdir()
        (folder / "server.log").write_bytes((REAL / "ray-driver" / form / "server.log").read_bytes())
        seen: list[str] = []

        def counted(k: str, lines: pl.Series, *years: object, seen: list[str] = seen
                    ) -> tuple[pl.Series, pl.Series] | None:
            seen.append(k)
            return columnar.unwrap_column(k, lines, *years)

        with pytest.MonkeyPatch.context() as mp, Store(":memory:") as db:
            mp.setattr("hangforensics.readers.envelopes.unwrap.unwrap_column", counted)
            ingest_paths(db, [folder], mode="engine")
            (src,) = db.query("SELECT envelope, parsed_lines, unparsed_lines, note FROM sources")
            got = _said(run_rules(db))
            ray_lines = [r["text"] for r in db.query("SELECT text FROM unparsed WHERE text LIKE '%Ray%'")]
        assert src["envelope"] == envelope and seen == [envelope], form         # (read as a column)
        assert (src["parsed_lines"], src["unparsed_lines"]) == (want_src["parsed_lines"], want_src["unparsed_lines"] + 2)
        assert len(ray_lines) == 2 and "cut into" not in (src["note"] or "")
        assert got == want, form
