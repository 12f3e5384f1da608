"""Ingest the same evidence through the compiled scanner and through the general parser alone, and compare
every loaded table row for row (sources without its timing columns).

    python bench/scanner_parity.py PATH... [--mode fleet|engine|auto] [--work DIR] [--keep]

Each PATH is ingested twice, in a fresh DuckDB file each time: with HANGFORENSICS_SCAN_MIN_BYTES=0 (every
plain server log through ``sglang_fast``) and with it at 1<<40 (the general parser reads every line).  Prints
each table's rows that only one side has (a few of them) and exits 1 when any table differs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

TABLES = ("events", "batches", "http_requests", "vllm_stats", "stacks", "frames", "leak_reports", "gpu_samples",
          "collective_records", "process_samples", "unparsed")
CLOCKED = {"events", "batches", "http_requests", "stacks", "leak_reports", "gpu_samples", "vllm_stats"}
SOURCE_KEYED = {"batches", "http_requests", "vllm_stats"}     # stored with a source_id: compared through the view
# sources' columns that say when (or by whom) a file was read, not what it holds
SOURCES_SKIP = ("source_id", "ingested_at")


def ingest(paths: list[str], db: Path, scan_min: int, mode: str) -> None:
    env = dict(os.environ, HANGFORENSICS_SCAN_MIN_BYTES=str(scan_min))
    cmd = [sys.executable, "-m", "hangforensics", "ingest", *paths, "--db", str(db)]
    if mode != "auto":
        cmd.append(f"--{mode}")
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)


def differences(scan_db: Path, general_db: Path, show: int = 5) -> int:
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute(f"ATTACH '{scan_db}' AS s (READ_ONLY)")
    con.execute(f"ATTACH '{general_db}' AS g (READ_ONLY)")
    bad = 0
    for name in (*TABLES, "sources"):
        # rows as stored (file times), but a source-keyed table's with its engine and path (ids differ by load order)
        table = name if name in SOURCE_KEYED or name not in CLOCKED else f"t_{name}"
        cols = [r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_catalog = 'g' AND table_name = ? "
            "ORDER BY ordinal_position", [table]).fetchall()]
        if not cols:
            continue
        if name == "sources":
            cols = [c for c in cols if c not in SOURCES_SKIP]
        sel = ", ".join(f'"{c}"' for c in cols)
        n = [con.execute(f"SELECT count(*) FROM {d}.{table}").fetchone()[0] for d in ("s", "g")]
        only = {}
        for a, b in (("s", "g"), ("g", "s")):
            q = f"SELECT {sel} FROM {a}.{table} EXCEPT ALL SELECT {sel} FROM {b}.{table}"
            only[a] = (con.execute(f"SELECT count(*) FROM ({q})").fetchone()[0],
                       con.execute(f"{q} ORDER BY ALL LIMIT {show}").fetchall())
        if only["s"][0] or only["g"][0]:
            bad += 1
            print(f"== {name}: scanner {n[0]} rows, general {n[1]} rows; only scanner {only['s'][0]}, "
                  f"only general {only['g'][0]}  ({', '.join(cols)})")
            for side, label in (("s", "scanner"), ("g", "general")):
                for row in only[side][1]:
                    print(f"   {label}: {tuple(str(v)[:200] for v in row)}")
        else:
            print(f"   {name}: {n[0]} rows, same")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--mode", default="auto", choices=("auto", "fleet", "engine"))
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the two databases")
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="scanner-parity-"))
    work.mkdir(parents=True, exist_ok=True)
    dbs = work / "scan.duckdb", work / "general.duckdb"
    for db in dbs:
        db.unlink(missing_ok=True)
    ingest(a.paths, dbs[0], 0, a.mode)
    ingest(a.paths, dbs[1], 1 << 40, a.mode)
    bad = differences(*dbs)
    print(f"{bad} table(s) differ" if bad else "every table the same", f"({work})" if a.keep else "")
    if not a.keep and a.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
