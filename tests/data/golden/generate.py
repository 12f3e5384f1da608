"""Golden snapshots of every view for the test corpora, built with the current code.

    python tests/data/golden/generate.py          # rewrite tests/data/golden/*.parquet

Each corpus is copied to a temporary folder with every file's mtime set to one fixed local time (a
standalone dump is dated by its mtime, year-less lines take their year from it, and a file written
moments ago counts as live), ingested in one process, analysed with every rule on one DuckDB thread; then every view and
table (except the physical ``t_*`` tables behind the clocked views, ``meta`` and ``scans``) is read
in a canonical order (``ORDER BY ALL``) without the columns that depend on the machine or the moment
(``VOLATILE``).  One Parquet file per view holds the rows of all corpora, a ``corpus`` column first.
``tests/test_golden.py`` re-ingests and compares exactly: values, order and Arrow types.  Regenerate
only on purpose, for a change of output that is a fix, and say why in the commit message.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "src"))

from hangforensics.analysis.findings import run_rules  # noqa: E402
from hangforensics.ingest.pipeline import ingest_paths  # noqa: E402
from hangforensics.store import Store  # noqa: E402

DATA = REPO / "tests" / "data"
# corpus name -> (folders ingested into one database, mode)
CORPORA: dict[str, tuple[list[Path], str]] = {
    "variants": ([DATA / "variants" / "fleet"], "fleet"),
    "stack_variants": ([DATA / "stack_variants" / "fleet"], "fleet"),
    "hostile": ([DATA / "hostile" / "fleet"], "fleet"),
    "releases": (sorted(p for p in (DATA / "releases").iterdir() if p.is_dir()), "engine"),
    "vllm": ([DATA / "vllm"], "engine"),
    "seed": ([REPO / "examples" / "seed-incident"], "engine"),
    "envelopes": ([DATA / "envelopes"], "engine"),
    "collectives": ([*sorted((DATA / "collectives" / "fr").iterdir()), DATA / "collectives" / "ras"], "engine"),
    "fragments": ([DATA / "fragments"], "engine"),
    "families": ([DATA / "families" / "fleet"], "fleet"),
    # generated (bench/generate.py, seeded): a batch-heavy log over several read chunks
    "big": ([], "engine"),
}
BIG_MB = 9.0
# Columns that differ between two ingests of the same evidence: where and when it was read.
VOLATILE = {"sources": {"abs_path", "ingested_at", "mtime"}}
SKIPPED = {"meta", "scans"}
# Every file of a corpus gets this modification time (local time: the parsers read it as local).
FIXED_MTIME = datetime(2026, 6, 1, 12, 0, 0).timestamp()


def stage(folders: list[Path], into: Path) -> list[Path]:
    """Copies of ``folders`` under ``into`` (their names kept: they name the engines), mtimes fixed."""
    out = []
    for src in folders:
        dst = into / src.name
        shutil.copytree(src, dst, symlinks=True)
        for root, dirs, files in os.walk(dst):
            for name in files + dirs:
                p = Path(root) / name
                if not p.is_symlink():
                    os.utime(p, (FIXED_MTIME, FIXED_MTIME))
        out.append(dst)
    return out


def views(store: Store) -> list[str]:
    rows = store.query("SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                       "ORDER BY table_name")
    return [r["table_name"] for r in rows if not r["table_name"].startswith("t_") and r["table_name"] not in SKIPPED]


def read_view(store: Store, name: str) -> pa.Table:
    cols = [r[0] for r in store.con.execute(f'DESCRIBE "{name}"').fetchall()]
    keep = [c for c in cols if c not in VOLATILE.get(name, set())]
    sel = ", ".join(f'"{c}"' for c in keep)
    return store.con.sql(f'SELECT {sel} FROM "{name}" ORDER BY ALL').to_arrow_table()


def write_big(folder: Path) -> Path:
    """The generated corpus: one engine holding a batch-heavy log of BIG_MB (bench/generate.py)."""
    spec = importlib.util.spec_from_file_location("bench_generate", REPO / "bench" / "generate.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    folder.mkdir(parents=True)
    gen.write_big(folder / "server.log", BIG_MB)
    os.utime(folder / "server.log", (FIXED_MTIME, FIXED_MTIME))
    return folder


def staged(name: str, tmp: Path) -> list[Path]:
    """The folders of corpus ``name``, ready to ingest under ``tmp``."""
    folders, _ = CORPORA[name]
    return [write_big(tmp / "bench-big")] if name == "big" else stage(folders, tmp)


def snapshot_corpus(name: str, jobs: int = 1) -> dict[str, pa.Table]:
    """Every view of one corpus, ingested (``jobs`` parser processes) and analysed with the current code."""
    with tempfile.TemporaryDirectory(prefix="hf-golden-") as tmp, Store(":memory:") as st:
        # some rules aggregate lists and text without an order (ranks, evidence): one DuckDB thread makes
        # that order the order rows were loaded in, so the snapshot is stable from run to run
        st.con.execute("SET threads = 1")
        for p in staged(name, Path(tmp)):
            ingest_paths(st, [p], mode=CORPORA[name][1], jobs=jobs)
        run_rules(st)
        return {v: read_view(st, v) for v in views(st)}


def snapshot() -> dict[str, pa.Table]:
    """Every view, the rows of all corpora in one table per view, a ``corpus`` column first."""
    parts: dict[str, list[pa.Table]] = {}
    for name in CORPORA:
        for view, t in snapshot_corpus(name).items():
            parts.setdefault(view, []).append(
                t.add_column(0, "corpus", pa.array([name] * t.num_rows, pa.string())))
    return {v: pa.concat_tables(ts) for v, ts in parts.items()}


def main() -> None:
    for old in HERE.glob("*.parquet"):
        old.unlink()
    for view, t in snapshot().items():
        pq.write_table(t, HERE / f"{view}.parquet", compression="zstd", compression_level=19)
        print(f"{view}: {t.num_rows} rows")


if __name__ == "__main__":
    main()
