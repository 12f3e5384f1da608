"""Capture bundles read back: dating by the manifest, the bundle's JSON files as tables, repeated snapshots
(stuck, spinning, moved, driver wait), the desync only repeated snapshots show, and capture-next advice.

Bundles are written by hand (tests/bundle_builder.py) so every scenario is exact; tests/test_capture_report.py
does the same end to end on real process trees.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from bundle_builder import BROADCAST, ON_IDLE, SELF_CHECK, SYMM, T0, At, Bundle
from conftest import LogWriter, by_rule

from hangforensics import api
from hangforensics.analysis.findings import run_rules
from hangforensics.analysis.summaries.capture_advice import capture_facts, next_capture_command
from hangforensics.capture.advice import capture_command, literal_pattern
from hangforensics.capture.manifest import Failure
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.store import Store

WALL = T0.replace(tzinfo=None)          # the capture host's wall clock


def stuck(frames: list[str], n: int, **kw) -> list[At]:
    return [At(frames, **kw) for _ in range(n)]


def analyze(path: Path, mode: str = "auto") -> tuple[Store, list[dict]]:
    st = Store(":memory:")
    ingest_paths(st, [path], mode=mode)
    return st, run_rules(st)


def facts(st: Store) -> dict[str, dict]:
    return {r["rank"]: r for r in st.query("SELECT * FROM snapshot_facts")}


# -- ingest: the bundle's own files, and dates from the manifest ----------------------------------------

def test_manifest_and_proc_files_are_tables_and_dumps_are_dated_by_the_manifest(tmp_path: Path):
    eng = Bundle({f"TP{i}": stuck(BROADCAST, 2) for i in range(2)},
                 failures=[Failure("gpu", "nvidia-smi not found on PATH: no GPU samples")]).write(tmp_path)
    st, _ = analyze(eng)
    kinds = {r["path"]: r for r in st.query("SELECT * FROM sources")}
    assert kinds["manifest.json"]["kind"] == "capture_manifest"
    assert kinds["proc/round1.json"]["kind"] == kinds["proc/round2.json"]["kind"] == "process_facts"
    assert not [p for p, r in kinds.items() if r["kind"] == "unknown"]
    for r in kinds.values():
        assert r["lines"] == r["parsed_lines"] + r["unparsed_lines"] and r["unparsed_lines"] == 0, r
    # byte-identical rounds are both read: their sameness is the evidence, not a duplicate
    assert kinds["pyspy/round2/TP0-4100.txt"]["status"] == "ok" and kinds["pyspy/round2/TP0-4100.txt"]["lines"]
    rows = st.query("SELECT path, ts, ts_basis FROM stacks ORDER BY path")
    assert len(rows) == 4 and {r["ts_basis"] for r in rows} == {"manifest"}
    r1 = next(r for r in rows if r["path"] == "pyspy/round1/TP0-4100.txt")
    # py-spy's end time, on the capture host's clock (+05:30), whatever the file's mtime or this machine's zone
    assert r1["ts"] == WALL + timedelta(milliseconds=90)
    mtime = datetime.fromtimestamp((eng / "pyspy/round1/TP0-4100.txt").stat().st_mtime)
    assert abs((mtime - r1["ts"]).total_seconds()) > 86400
    assert st.scalar("SELECT count(*) FROM process_facts WHERE source = 'proc'") == 4
    assert st.scalar("SELECT count(*) FROM process_facts WHERE source = 'manifest'") == 4
    assert st.query("SELECT what, reason, skipped FROM capture_failures") == [
        {"what": "gpu", "reason": "nvidia-smi not found on PATH: no GPU samples", "skipped": False}]
    cap = st.query("SELECT host, selector, target, rounds, utc_offset_s FROM captures")[0]
    assert cap == {"host": "gpu7", "selector": "port", "target": "30000", "rounds": 2, "utc_offset_s": 19800}
    line = st.scalar("SELECT line FROM capture_dumps WHERE file = 'pyspy/round2/TP1-4101.txt'")
    assert '"file": "pyspy/round2/TP1-4101.txt"' in (eng / "manifest.json").read_text().splitlines()[line + 6]


def test_a_bundle_in_a_fleet_strips_the_engine_folder(tmp_path: Path):
    fleet = tmp_path / "fleet"
    Bundle({"TP0": stuck(BROADCAST, 2)}, engine="node3").write(fleet)
    LogWriter().startup().traffic(10, 60).write(fleet / "node4")
    st, _ = analyze(fleet, mode="fleet")        # node3 holds no server log: not plainly a fleet to the guess
    row = st.query("SELECT engine, path, ts, ts_basis FROM stacks WHERE path LIKE '%round2%'")[0]
    assert row == {"engine": "node3", "path": "node3/pyspy/round2/TP0-4100.txt",
                   "ts": WALL + timedelta(seconds=5, milliseconds=90), "ts_basis": "manifest"}
    assert st.scalar("SELECT capture_id FROM snapshot_facts") == "node3/manifest.json"
    assert st.scalar("SELECT file FROM capture_dumps WHERE round = 1") == "node3/pyspy/round1/TP0-4100.txt"


def test_a_cut_manifest_is_kept_in_unparsed_and_dumps_fall_back_to_their_mtime(tmp_path: Path):
    eng = Bundle({"TP0": stuck(BROADCAST, 1)}).write(tmp_path)
    text = (eng / "manifest.json").read_text()
    (eng / "manifest.json").write_text(text[: len(text) // 2])
    st, _ = analyze(eng)
    src = st.query("SELECT * FROM sources WHERE path = 'manifest.json'")[0]
    assert src["kind"] == "capture_manifest" and src["parsed_lines"] == 0
    assert src["unparsed_lines"] == src["lines"] == len(text[: len(text) // 2].splitlines())
    assert "capture manifest not read" in src["note"]
    assert st.scalar("SELECT ts_basis FROM stacks") == "mtime"


def test_any_cut_or_reshaped_manifest_is_read_or_kept_whole(tmp_path: Path):
    from hangforensics.ingest.bundles import parse_bundle_json
    from hangforensics.ingest.jobs import FileOutcome

    eng = Bundle({"TP0": stuck(BROADCAST, 2), "TP1": stuck(BROADCAST, 2)}).write(tmp_path)
    text = (eng / "manifest.json").read_text()
    variants = [text[:n] for n in range(0, len(text), max(len(text) // 40, 1))]
    variants += [text.replace('"rounds": [', '"rounds": [7, '), text.replace('"processes": [', '"processes": {"a": ['),
                 text.replace('"pid": 4100', '"pid": "x"'), text.replace('"command": [', '"command": "a", "x": ['),
                 text.replace('"host": {', '"host": null, "y": {'), "{" * 5000 + "}" * 5000]
    for i, v in enumerate(variants):
        f = tmp_path / f"m{i}.json"
        f.write_text(v)
        out = FileOutcome()
        rows = dict(parse_bundle_json("e", f, f.name, "capture_manifest", out))
        assert out.lines == len(v.splitlines())
        if "unparsed" in rows:
            assert out.unparsed == out.lines == len(rows["unparsed"]) and out.notes.extra
        else:
            assert out.unparsed == 0 and rows["captures"][0]["capture_id"] == f.name


# -- repeated snapshots ---------------------------------------------------------------------------------

def test_incident_2_one_snapshot_cannot_call_it_a_desync_repeated_snapshots_can(tmp_path: Path):
    # TP0 loops in on_idle (running, on and off the CPU); TP1-3 wait in the per-iteration broadcast for it
    def idle_loop(n: int) -> list[At]:
        return [At(ON_IDLE if k % 2 == 0 else SELF_CHECK, state="R", wchan=None, cpu=1.0 + 2.5 * k, idle=False)
                for k in range(n)]

    one = Bundle({"TP0": idle_loop(1), **{f"TP{i}": stuck(BROADCAST, 1) for i in (1, 2, 3)}}).write(tmp_path / "a")
    st, found = analyze(one)
    assert "collective-desync" not in by_rule(found)
    assert "one snapshot cannot tell stuck from slow" in facts(st)["TP1"]["detail"]

    three = Bundle({"TP0": idle_loop(3), **{f"TP{i}": stuck(BROADCAST, 3) for i in (1, 2, 3)}}).write(tmp_path / "b")
    st, found = analyze(three)
    got = by_rule(found)
    (desync,) = got["collective-desync"]
    assert desync["ranks"] == ["TP0"] and "never came back" in desync["title"]
    assert "Scheduler.self_check_during_idle" in desync["detail"] and "TP1-3 stayed blocked" in desync["detail"]
    (stuck_f,) = got["stuck-across-snapshots"]
    assert stuck_f["ranks"] == ["TP1", "TP2", "TP3"]
    assert "unchanged across 3 snapshots since 10:02:11" in stuck_f["title"]
    assert stuck_f["ts"] == WALL + timedelta(milliseconds=91)      # TP1's first dump
    (moved,) = got["moved-between-snapshots"]
    assert moved["ranks"] == ["TP0"] and "slow, not stuck" in moved["title"]
    f = facts(st)
    assert f["TP0"]["status"] == "moved" and f["TP1"]["status"] == "stuck" and f["TP1"]["unchanged"] == 3
    assert f["TP1"]["since"] == WALL + timedelta(milliseconds=91) and f["TP1"]["span_s"] == pytest.approx(10.0)


def test_ranks_stuck_since_one_round_are_one_finding_though_the_round_straddles_a_clock_second(tmp_path: Path):
    # a loaded host dumps rank after rank 400 ms apart: TP1 at 10:02:11.6, TP3 at 10:02:12.4, one round
    eng = Bundle({f"TP{i}": stuck(BROADCAST, 3) for i in range(4)}, rank_gap_ms=400).write(tmp_path)
    st, found = analyze(eng)
    assert len({r["since"].second for r in facts(st).values()}) == 2
    (stuck_f,) = by_rule(found)["stuck-across-snapshots"]
    assert stuck_f["ranks"] == ["TP0", "TP1", "TP2", "TP3"]
    assert "TP0-3:" in stuck_f["title"] and "since 10:02:11" in stuck_f["title"]


def test_a_rank_that_moves_is_not_stuck_and_not_counted_as_blocked_by_a_signature(tmp_path: Path):
    other = [*SYMM[:4], "ModelRunner.sample"]
    eng = Bundle({"TP0": stuck(SYMM, 3), "TP1": stuck(SYMM, 3), "TP3": stuck(SYMM, 3),
                  "TP2": [At(SYMM), At(other), At(SYMM)]}).write(tmp_path)   # the same wait, back and forth
    st, found = analyze(eng)
    got = by_rule(found)
    assert facts(st)["TP2"]["status"] == "moved"
    assert got["stuck-across-snapshots"][0]["ranks"] == ["TP0", "TP1", "TP3"]
    assert "TP2 moved between snapshots (frames ModelRunner.sample → SymmetricMemoryContext." in \
        got["moved-between-snapshots"][0]["title"]
    (sig,) = got["known-signature"]
    assert sig["signature"] == "symm-mem-window-register" and sig["ranks"] == ["TP0", "TP1", "TP3"]


def test_state_d_is_a_driver_wait_and_a_spin_is_not_blocked(tmp_path: Path):
    d = Bundle({f"TP{i}": stuck(SYMM, 2, state="D", wchan="nvidia_ioctl_wait", idle=False) for i in range(2)})
    st, found = analyze(d.write(tmp_path / "d"))
    assert {r["status"] for r in facts(st).values()} == {"driver_wait"}
    assert "stuck in a driver wait" in by_rule(found)["stuck-across-snapshots"][0]["title"]
    assert by_rule(found)["known-signature"][0]["signature"] == "symm-mem-window-register"   # blocked: D, not idle

    # the same frames at 100 % CPU (the init-time sibling spins): py-spy may say idle, /proc says running
    spin = Bundle({f"TP{i}": [At(SYMM, state="R", wchan=None, cpu=1.0 + 5.0 * k) for k in range(2)]
                   for i in range(2)})
    st, found = analyze(spin.write(tmp_path / "r"))
    got = by_rule(found)
    assert {r["status"] for r in facts(st).values()} == {"spinning"}
    assert "known-signature" not in got and "stuck-across-snapshots" not in got
    assert "spinning in place, not blocked" in got["moved-between-snapshots"][0]["title"]
    assert "(100 % of a core)" in got["moved-between-snapshots"][0]["title"]


def test_facts_without_dumps_still_compare(tmp_path: Path):
    # py-spy failed in every round: /proc alone shows the rank did not move
    eng = Bundle({"TP0": stuck(None, 2)}).write(tmp_path)
    st, found = analyze(eng)
    f = facts(st)["TP0"]
    assert (f["status"], f["frames_same"], f["unchanged"]) == ("stuck", None, 2)
    assert "no two dumps to compare frames" in by_rule(found)["stuck-across-snapshots"][0]["title"]


def test_report_of_a_bundle_without_a_stalled_log_says_what_the_snapshots_show(tmp_path: Path):
    eng = Bundle({f"TP{i}": stuck(BROADCAST, 2) for i in range(4)},
                 failures=[Failure("pyspy", "no permission: py-spy may not attach to pid 4105 (main)", 4105, 1)])
    out = tmp_path / "r.html"
    res = api.report(eng.write(tmp_path), out)
    html = out.read_text()
    assert "No stall in gpu7-decode&#39;s log, but the processes were not moving when captured." in html
    assert "TP0-3: same main-thread frames (broadcast), same wchan unix_stream_read_generic" in html
    assert "no permission: py-spy may not attach to pid 4105 (main)" in html
    assert 'data-rank="TP2" data-state="S" data-wchan="unix_stream_read_generic"' in html
    assert "dated by the capture manifest" in html
    assert sorted(f["rule"] for f in res.document["findings"]) == ["capture-incomplete", "stuck-across-snapshots"]
    (gap,) = [f for f in res.document["findings"] if f["rule"] == "capture-incomplete"]
    assert gap["detail"] == "Not captured (manifest.json): no permission: py-spy may not attach to pid 4105 (main)."
    assert gap["evidence"][0]["file"] == "manifest.json"


# -- capture next ---------------------------------------------------------------------------------------

def test_capture_command_names_the_engine_the_way_that_survives_a_restart():
    assert capture_command(port=30000, model_path="/m", pid=7, logs=["/var/log/sglang"]) == \
        "hangforensics capture --port 30000 --native --repeat 3 --interval 5 --logs /var/log/sglang"
    cmd = capture_command(model_path="/models/Qwen2.5-72B", repeat=1, native=False)
    assert cmd == r"hangforensics capture --match '/models/Qwen2\.5-72B(\s|$)'"
    assert capture_command(pid=41235, interval_s=2.5, name="node3 decode", output="b.tar.gz") == \
        "hangforensics capture --pid 41235 --native --repeat 3 --interval 2.5 --name 'node3 decode' -o b.tar.gz"
    assert capture_command(match=r"sglang\.launch_server", model_path="/m") == \
        r"hangforensics capture --match 'sglang\.launch_server' --native --repeat 3 --interval 5"
    assert capture_command() == "hangforensics capture --native --repeat 3 --interval 5"
    with pytest.raises(ValueError):
        capture_command(repeat=0)


def test_a_model_path_pattern_matches_its_server_and_not_a_sibling():
    import re

    rx = re.compile(literal_pattern("/models/Qwen2.5-72B") + r"(\s|$)")
    assert rx.search("python3 -m sglang.launch_server --model-path /models/Qwen2.5-72B --tp 8")
    assert not rx.search("python3 -m sglang.launch_server --model-path /models/Qwen2x5-72B --tp 8")
    assert not rx.search("python3 -m sglang.launch_server --model-path /models/Qwen2.5-72B-draft")


def test_every_option_of_the_advice_exists_on_the_capture_command():
    cmd = capture_command(port=1, logs=["/x"], name="n", output="o.tar.gz").split()
    help_text = subprocess.run([sys.executable, "-m", "hangforensics", "capture", "--help"], capture_output=True,
                               text=True, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"}).stdout
    for opt in (a for a in cmd if a.startswith("-")):
        assert opt in help_text, opt


def test_capture_facts_come_from_server_args_and_an_earlier_bundle(tmp_path: Path):
    eng = tmp_path / "node3"
    log = LogWriter()
    log.startup(port=30001, model_path="/models/Llama-3.3-70B").traffic(10, 30).write(eng)
    st, _ = analyze(eng)
    assert next_capture_command(st, "node3") == \
        "hangforensics capture --port 30001 --native --repeat 3 --interval 5 --name node3"
    # no server_args: what an earlier capture used
    b = Bundle({"TP0": stuck(BROADCAST, 1)}, engine="node4").write(tmp_path / "b")
    st, _ = analyze(b)
    f = capture_facts(st, "node4")
    assert (f.port, f.snapshots, f.has_native) == (30000, 1, False)
