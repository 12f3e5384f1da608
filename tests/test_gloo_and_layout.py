"""Flight Recorder dumps as torch 2.13's gloo backend writes them (tests/data/collectives/gloo, real dumps),
where a rank stands when a dump records no lifecycle, and what an incident folder is (interface.md §1)."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

from conftest import DATA, analyze_folder, by_rule

from hangforensics.parsers.collectives.flight_recorder import (
    collective_rows,
    position_entries,
    read_flight_recorder,
)
from hangforensics.parsers.collectives.flight_recorder_rows import records_no_lifecycle
from hangforensics.readers.layout import Workspace, is_fleet

GLOO = DATA / "collectives" / "gloo"


def test_gloo_dump_stands_at_its_newest_entry() -> None:
    d = read_flight_recorder(GLOO / "op-mismatch" / "nccl_trace_rank_3")
    assert d.rank == 3 and d.version == "2.10"
    assert records_no_lifecycle(d)
    (e,) = position_entries(d)
    assert (e.op, e.seq, e.backend) == ("broadcast", 4, "gloo")
    rows = collective_rows(d)
    assert [(r.seq, r.state) for r in rows] == [(1, "completed"), (2, "completed"), (3, "completed"),
                                                (4, "scheduled")]
    # pg_config keys gloo's default group '': tied to the entries' group '0', so members are known
    assert rows[0].pg == "0" and rows[0].pg_ranks == (0, 1, 2, 3)


def test_gloo_op_mismatch_is_a_desync_of_the_minority(tmp_path: Path) -> None:
    shutil.copytree(GLOO / "op-mismatch", tmp_path / "job" / "fr")
    f = by_rule(analyze_folder(tmp_path / "job"))
    (d,) = f["collective-desync"]
    assert d["ranks"] == ["rank3"] and "broadcast #4" in d["detail"]
    assert "first-rank-stopped" not in f


def test_only_the_stuck_group_is_named(tmp_path: Path) -> None:
    """Rank 0 trained on outside group 1 and left no dump; the default group's older entries were left
    behind on each thread, so nobody waits there and rank 0 is not called absent."""
    shutil.copytree(GLOO / "two-groups", tmp_path / "job" / "fr")
    f = by_rule(analyze_folder(tmp_path / "job"))
    (d,) = f["collective-desync"]
    assert d["ranks"] == ["rank3"] and "pg 1" in d["title"]
    assert "first-rank-stopped" not in f


def test_an_empty_dump_is_an_absent_rank(tmp_path: Path) -> None:
    """A rank killed by the launcher while it wrote its dump leaves a 0-byte file: it is absent; when it
    stopped is in no evidence (interface.md: ts null where unknown)."""
    fr = tmp_path / "job" / "fr"
    fr.mkdir(parents=True)
    for r in (0, 1, 2):
        shutil.copy(GLOO / "op-mismatch" / f"nccl_trace_rank_{r}", fr)
    (fr / "nccl_trace_rank_3").write_bytes(b"")
    f = by_rule(analyze_folder(tmp_path / "job"))
    (first,) = f["first-rank-stopped"]
    assert first["ranks"] == ["rank3"] and first["ts"] is None
    assert "collective-desync" not in f


def test_ncclish_dump_with_completed_entries_keeps_lifecycle() -> None:
    """Dumps whose entries carry states other than scheduled (NCCL) keep their own lifecycle."""
    for p in sorted((DATA / "collectives" / "fr").rglob("*"))[:20]:
        if p.is_file() and not p.name.endswith((".md", ".py")):
            d = read_flight_recorder(p)
            if any(e.state in ("started", "completed") for e in d.entries):
                assert not records_no_lifecycle(d), p


# -- layout -------------------------------------------------------------------------------------------


def _incident(root: Path) -> Path:
    inc = root / "incident-42"
    (inc / "logs").mkdir(parents=True)
    (inc / "logs" / "job.log").write_text(
        "2026-12-03 19:08:44,404 INFO [rank0] step 0 done\n"
        "[2026-12-03 19:08:45] INFO:     127.0.0.1:5000 - \"GET /health HTTP/1.1\" 200 OK\n")
    shutil.copytree(GLOO / "op-mismatch", inc / "fr")
    return inc


def test_incident_folder_of_evidence_subfolders_is_one_engine(tmp_path: Path) -> None:
    inc = _incident(tmp_path)
    assert not is_fleet(inc)
    with Workspace() as ws:
        _, files = ws.resolve(inc)
    assert {f.engine for f in files} == {"incident-42"}


def test_folder_of_engines_with_their_own_logs_is_a_fleet(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    for name in ("node1", "node2"):
        (fleet / name).mkdir(parents=True)
        (fleet / name / "server.log").write_text(
            "[2026-12-03 19:08:45 TP0] Decode batch. #running-req: 1, #token: 10, token usage: 0.01, "
            "gen throughput (token/s): 10.0, #queue-req: 0\n")
    assert is_fleet(fleet)
    (fleet / "node2" / "server.log").write_text("no log here\n")
    assert not is_fleet(fleet)


def test_bundle_inside_engine_folder_is_read_as_part_of_it(tmp_path: Path) -> None:
    inc = _incident(tmp_path)
    staged = tmp_path / "stage" / "host-123"
    shutil.copytree(GLOO / "op-mismatch", staged / "fr-copy")
    with tarfile.open(inc / "capture.tar.gz", "w:gz") as t:
        t.add(staged, arcname="host-123")
    with Workspace() as ws:
        _, files = ws.resolve(inc)
        inner = [f for f in files if f.rel_path.startswith("capture.tar.gz/")]
        assert {f.engine for f in files} == {"incident-42"}
        assert sorted(f.rel_path for f in inner) == [
            f"capture.tar.gz/host-123/fr-copy/nccl_trace_rank_{r}" for r in range(4)]
        assert all(f.abs_path.exists() for f in inner)
    # the same unchanged bundle unpacks to the same files on the next run: nothing is new to ingest
    with Workspace() as ws:
        _, again = ws.resolve(inc)
    assert sorted(str(f.abs_path) for f in again if f.rel_path.startswith("capture.tar.gz/")) == \
        sorted(str(f.abs_path) for f in inner)
    # a changed bundle is unpacked anew
    with tarfile.open(inc / "capture.tar.gz", "w:gz") as t:
        t.add(staged / "fr-copy" / "nccl_trace_rank_0", arcname="host-123/fr-copy/nccl_trace_rank_0")
    with Workspace() as ws:
        _, changed = ws.resolve(inc)
    moved = [f for f in changed if f.rel_path.startswith("capture.tar.gz/")]
    assert len(moved) == 1 and str(moved[0].abs_path) not in {str(f.abs_path) for f in inner}


def test_reingesting_an_incident_with_a_bundle_adds_nothing(tmp_path: Path) -> None:
    """A second report / scan into the same database reads nothing again (a fresh unpack folder each run
    made every member of the bundle a new file: its stacks and capture failures counted twice)."""
    import duckdb

    from hangforensics import api

    inc = _incident(tmp_path)
    staged = tmp_path / "stage" / "host-9"
    shutil.copytree(GLOO / "op-mismatch", staged / "fr")
    with tarfile.open(inc / "capture.tar.gz", "w:gz") as t:
        t.add(staged, arcname="host-9")
    db = tmp_path / "h.duckdb"
    counts = []
    for _ in range(2):
        api.ingest([inc], db=db)
        with duckdb.connect(str(db), read_only=True) as con:
            counts.append(con.execute("SELECT count(*), count(DISTINCT path) FROM sources").fetchone()
                          + con.execute("SELECT count(*) FROM collective_records").fetchone())
    assert counts[0] == counts[1] and counts[0][0] == counts[0][1], counts


def test_unsafe_bundle_inside_engine_stays_one_file(tmp_path: Path) -> None:
    inc = _incident(tmp_path)
    evil = tmp_path / "evil.txt"
    evil.write_text("x")
    with tarfile.open(inc / "capture.tar.gz", "w:gz") as t:
        t.add(evil, arcname="../../escape.txt")
    with Workspace() as ws:
        _, files = ws.resolve(inc)
    assert "capture.tar.gz" in {f.rel_path for f in files}
