"""The bundled example (examples/seed-incident) reads the same after a fresh clone: its operator captures are
dated by the capture manifest beside them, not by the files' modification times (a clone's are the
clone's), so the report shows no capture dated by the clone (interface.md §3 "Dates")."""

from __future__ import annotations

import os
import shutil
from datetime import datetime
from pathlib import Path

import duckdb

from hangforensics import api

SEED = Path(__file__).parents[1] / "examples" / "seed-incident"


def test_a_fresh_copy_of_the_example_dates_its_captures_by_their_manifest(tmp_path: Path) -> None:
    copy = tmp_path / "seed-incident"
    shutil.copytree(SEED, copy)
    now = datetime.now().timestamp()
    for f in copy.rglob("*"):
        os.utime(f, (now, now))                      # what a clone leaves: every file dated now
    db = tmp_path / "h.duckdb"
    api.ingest([copy], db=db)
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT DISTINCT path, ts, ts_basis FROM stacks WHERE capture = 'standalone' "
                           "ORDER BY path").fetchall()
    assert [(p, b) for p, _, b in rows] == [("captures/scratch-b.txt", "manifest"),
                                            ("captures/tp3-pyspy-0412.txt", "manifest")]
    for _, ts, _ in rows:                            # taken about a minute into the hang, on the log's clock
        assert datetime(2026, 11, 18, 9, 59) < ts < datetime(2026, 11, 18, 10, 1)
