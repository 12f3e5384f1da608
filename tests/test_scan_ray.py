"""scan --executor ray: the same database as a local scan, retried and reported task failures, an unchanged
rescan that schedules nothing, staging partitioned by engine and day and left clean.

One single-node Ray serves the whole session (``ray_cluster`` in conftest).  Staging is tested as a plain
path, a ``file://`` URI and ``s3://`` on moto's S3 server bound to loopback (``gs://`` and real S3 need a
network this machine does not have; pyarrow's code for them is what the ``s3://`` test runs, less the
endpoint).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import DATA, EXAMPLES, REPO, LogWriter, small_fleet

from hangforensics.fleet import staging as stg
from hangforensics.fleet.ray_executor import RayExecutor
from hangforensics.fleet.scan import scan
from hangforensics.ingest import load, parallel
from hangforensics.ingest.jobs import CHECKPOINT, FileJob, batch_to_arrow, with_result
from hangforensics.ingest.parse import parse_file
from hangforensics.store import Store

FLEETS = {"variants": DATA / "variants" / "fleet", "examples": EXAMPLES / "fleet"}
NOT_COMPARED = {"scans": "started_at, finished_at", "sources": "ingested_at, abs_path"}   # times, temp paths


@pytest.fixture(scope="module")
def by_value(ray_cluster):
    """Ray workers cannot import this test module: its injected parsers travel by value."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray_cluster
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def differences(db_a: Path, db_b: Path) -> dict[str, tuple[int, int, int]]:
    """Every table and view whose rows differ: (rows in a, rows only in a, rows only in b), multisets."""
    con = duckdb.connect()
    con.execute(f"ATTACH '{db_a}' AS a (READ_ONLY)")
    con.execute(f"ATTACH '{db_b}' AS b (READ_ONLY)")
    names = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables WHERE table_catalog = 'a' "
                                       "AND table_schema = 'main' ORDER BY 1").fetchall()]
    assert {"sources", "events", "batches", "http_requests", "stacks", "frames", "leak_reports", "unparsed",
            "collectives", "findings", "engine_summaries"} <= set(names)
    out = {}
    for name in names:
        if name in ("scans", "meta"):
            continue
        ex = f"EXCLUDE ({NOT_COMPARED[name]})" if name in NOT_COMPARED else ""
        only = [con.execute(f"SELECT count(*) FROM (SELECT * {ex} FROM {x}.{name} EXCEPT ALL "
                            f"SELECT * {ex} FROM {y}.{name})").fetchone()[0] for x, y in (("a", "b"), ("b", "a"))]
        total = con.execute(f"SELECT count(*) FROM a.{name}").fetchone()[0]
        if only != [0, 0]:
            out[name] = (total, *only)
    con.close()
    return out


def local_and_ray(fleet: Path, tmp_path: Path, ex: RayExecutor):
    local = scan(fleet, tmp_path / "local.duckdb", jobs=1)
    on_ray = scan(fleet, tmp_path / "ray.duckdb", executor=ex)
    return local, on_ray


@pytest.mark.parametrize("name", FLEETS)
def test_a_ray_scan_equals_a_local_scan(name: str, tmp_path: Path, ray_cluster):
    fleet = FLEETS[name]
    if not fleet.is_dir():
        assert not os.environ.get("CI"), f"{fleet} missing in CI"
        pytest.skip("../shared is not beside the repository")
    ex = RayExecutor(staging=str(tmp_path / "staging"))
    local, on_ray = local_and_ray(fleet, tmp_path, ex)
    assert on_ray.ingest.files_read == local.ingest.files_read > 0
    assert json.dumps(on_ray.document, sort_keys=True) == json.dumps(local.document, sort_keys=True)
    assert differences(tmp_path / "local.duckdb", tmp_path / "ray.duckdb") == {}
    # one task per engine (each fleet's engines are far below GROUP_BYTES), every batch staged then loaded
    with Store(tmp_path / "ray.duckdb") as st:
        parsed = st.scalar("SELECT count(DISTINCT engine) FROM sources WHERE status NOT LIKE 'duplicate%' "
                           "AND kind <> 'unreadable'")
    assert ex.tasks == on_ray.ingest.parse_tasks == parsed
    assert ex.staged_files > 0
    assert stg.staged_files(str(tmp_path / "staging")) == []


def test_an_unchanged_rescan_schedules_no_task(tmp_path: Path, ray_cluster):
    fleet = small_fleet(tmp_path)
    staging = tmp_path / "staging"
    first = scan(fleet, tmp_path / "db.duckdb", executor=RayExecutor(staging=str(staging)))
    assert first.ingest.parse_tasks == 2 and first.ingest.files_read == 2
    again = RayExecutor(staging=str(staging))
    res = scan(fleet, tmp_path / "db.duckdb", executor=again)
    assert (res.ingest.files_read, res.ingest.parse_tasks, again.tasks, again.staged_files) == (0, 0, 0, 0)
    assert not staging.exists() or stg.staged_files(str(staging)) == []
    # a grown log: one task, reading from the stored offset only
    log = fleet / "gpu2-healthy" / "server.log"
    extra = LogWriter(start="2026-05-01 11:10:00").traffic(0, 4).lines
    with log.open("a") as f:
        f.write("\n".join(extra) + "\n")
    grown = RayExecutor(staging=str(staging))
    res = scan(fleet, tmp_path / "db.duckdb", executor=grown)
    assert (res.ingest.files_read, grown.tasks, res.analyzed) == (1, 1, ["gpu2-healthy"])
    assert res.ingest.bytes_read == len(("\n".join(extra) + "\n").encode())


def _crash_once(marker: str, target: str, job: FileJob):
    """A parser whose worker process dies the first time it meets ``target``."""
    if job.rel_path == target:
        with open(marker, "a") as f:
            f.write("x")
        if os.path.getsize(marker) == 1:
            os._exit(1)
    return parse_file(job)


def _always_fails(marker: str, target: str, job: FileJob):
    if job.rel_path == target:
        with open(marker, "a") as f:
            f.write("x")
        raise RuntimeError("injected parser bug")
    return parse_file(job)


def test_a_dead_worker_is_retried_and_nothing_is_lost(tmp_path: Path, by_value):
    fleet = small_fleet(tmp_path)
    marker = tmp_path / "attempts"
    ex = RayExecutor(staging=str(tmp_path / "staging"),
                     parse=functools.partial(_crash_once, str(marker), "gpu1-stalled/server.log"))
    local, on_ray = local_and_ray(fleet, tmp_path, ex)
    assert marker.read_text() == "xx"                        # died once, retried once
    assert on_ray.ingest.failed == []
    assert differences(tmp_path / "local.duckdb", tmp_path / "ray.duckdb") == {}


def test_a_file_that_keeps_failing_is_reported_and_its_neighbours_are_loaded(tmp_path: Path, by_value):
    fleet = small_fleet(tmp_path)
    LogWriter(start="2026-05-01 12:00:00").traffic(0, 30).write(fleet / "gpu1-stalled", "server.log.1")
    marker = tmp_path / "attempts"
    target = "gpu1-stalled/server.log"
    ex = RayExecutor(staging=str(tmp_path / "staging"), max_retries=1,
                     parse=functools.partial(_always_fails, str(marker), target))
    res = scan(fleet, tmp_path / "db.duckdb", executor=ex)
    # the engine's task: 2 attempts; then the file alone: 2 more; its neighbour is rerun alone and loads
    assert marker.read_text() == "xxxx"
    assert ex.tasks == 2 + 2
    assert len(res.ingest.failed) == 1 and res.ingest.failed[0].startswith(target)
    with Store(tmp_path / "db.duckdb") as st:
        rows = {r["path"]: r for r in st.query("SELECT path, status, lines FROM sources")}
        assert rows[target]["status"] == ("error: parse task failed on Ray after 2 attempt(s) (engine gpu1-stalled, "
                                          f"file {target}): RuntimeError: injected parser bug")
        assert rows["gpu1-stalled/server.log.1"]["status"] == "ok" and rows["gpu1-stalled/server.log.1"]["lines"] > 0
        assert rows["gpu2-healthy/server.log"]["status"] == "ok"
        assert st.scalar("SELECT count(*) FROM batches WHERE path = ?", [target]) == 0
    assert stg.staged_files(str(tmp_path / "staging")) == []
    # the next night the file is read again (no silent loss), here with a parser that works
    again = scan(fleet, tmp_path / "db.duckdb", executor=RayExecutor(staging=str(tmp_path / "staging")))
    assert again.ingest.files_read == 1 and again.ingest.failed == []
    with Store(tmp_path / "db.duckdb") as st:
        assert st.scalar("SELECT status FROM sources WHERE path = ?", [target]) == "ok"
        assert st.scalar("SELECT count(*) FROM batches WHERE path = ?", [target]) > 0


def test_a_large_log_is_parsed_in_byte_ranges_with_partial_commits(tmp_path: Path, ray_cluster, monkeypatch):
    fleet = tmp_path / "fleet"
    (fleet / "big").mkdir(parents=True)
    subprocess.run([sys.executable, str(REPO / "bench" / "generate.py"), "big", str(fleet / "big" / "server.log"),
                    "--mb", "4"], check=True)
    local = scan(fleet, tmp_path / "local.duckdb", jobs=1)
    monkeypatch.setattr(parallel, "SPLIT_MIN_BYTES", 1024 * 1024)
    monkeypatch.setattr(load, "COMMIT_BYTES", 512 * 1024)           # partial commits between ranges
    ex = RayExecutor(staging=str(tmp_path / "staging"))
    on_ray = scan(fleet, tmp_path / "ray.duckdb", executor=ex)
    assert ex.tasks >= 4                                             # one task per byte range
    assert on_ray.ingest.lines == local.ingest.lines
    assert differences(tmp_path / "local.duckdb", tmp_path / "ray.duckdb") == {}


def test_cli_on_an_existing_cluster_leaves_it_running(tmp_path: Path, ray_cluster):
    import ray

    fleet = small_fleet(tmp_path)
    db, uri = tmp_path / "db.duckdb", f"file://{tmp_path / 'staging'}"
    cmd = [sys.executable, "-m", "hangforensics", "scan", str(fleet), "--db", str(db), "--executor", "ray",
           "--staging", uri]
    first = subprocess.run([*cmd, "--ray-address", ray_cluster], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "2 file(s) read" in first.stderr
    assert ray.get(ray.remote(lambda: 41 + 1).remote()) == 42            # the cluster outlives the scan
    assert stg.staged_files(uri) == []
    scan(fleet, tmp_path / "local.duckdb", jobs=1)
    assert differences(tmp_path / "local.duckdb", db) == {}
    # unchanged: nothing is parsed, so not even an unreachable cluster is contacted
    again = subprocess.run([*cmd, "--ray-address", "127.0.0.1:1"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "0 file(s) read" in again.stderr, again.stderr
    (fleet / "gpu2-healthy" / "server.log").write_text("[2026-05-01 11:00:00] new content\n")
    bad = subprocess.run([*cmd, "--ray-address", "127.0.0.1:1"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.strip() == "hangforensics: error: cannot reach the Ray cluster at 127.0.0.1:1: Connection refused"


def test_an_object_store_staging_on_a_loopback_s3_server(tmp_path: Path, ray_cluster):
    """s3:// staging against moto's S3 server on 127.0.0.1 (the real pyarrow S3 filesystem, in every task)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        _, port = server.get_host_and_port()
        uri = (f"s3://test:test@hf-staging/nightly?endpoint_override=127.0.0.1:{port}&scheme=http"
               f"&region=us-east-1&allow_bucket_creation=true")
        fs, _ = stg.open_staging(uri)
        fs.create_dir("hf-staging")
        fleet = small_fleet(tmp_path)
        ex = RayExecutor(staging=uri)
        local, on_ray = local_and_ray(fleet, tmp_path, ex)
        assert ex.staged_files > 0 and on_ray.ingest.failed == []
        assert stg.staged_files(uri) == []
        assert differences(tmp_path / "local.duckdb", tmp_path / "ray.duckdb") == {}
    finally:
        server.stop()


@pytest.mark.parametrize(("args", "message"), [
    (["--executor", "ray", "--ray-address", "127.0.0.1:6379"], "--ray-address needs --staging"),
    (["--staging", "/tmp/x"], "--ray-address and --staging go with --executor ray"),
    (["--executor", "spark"], "--executor must be local or ray"),
    (["--executor", "ray", "--staging", "nosuchfs://bucket/x"], "cannot use staging location nosuchfs://bucket/x"),
])
def test_cli_option_errors_are_one_line(args: list[str], message: str, tmp_path: Path):
    p = subprocess.run([sys.executable, "-m", "hangforensics", "scan", str(small_fleet(tmp_path)), "--db",
                        str(tmp_path / "db.duckdb"), *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and message in p.stderr, p.stderr


def test_without_ray_installed_one_line_says_how_to_get_it(tmp_path: Path):
    code = ("import sys; sys.modules['ray'] = None; from hangforensics.cli import main; "
            "sys.argv = ['hangforensics', *sys.argv[1:]]; main()")
    p = subprocess.run([sys.executable, "-c", code, "scan", str(small_fleet(tmp_path)), "--db",
                        str(tmp_path / "db.duckdb"), "--executor", "ray"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip() == ("hangforensics: error: --executor ray needs Ray: install hangforensics[ray] "
                                "(pip install 'hangforensics[ray]')")
    assert not (tmp_path / "db.duckdb").exists()                     # refused before anything was written


def _midnight_log(folder: Path) -> Path:
    w = LogWriter(start="2026-05-01 23:59:50")
    w.startup().traffic(0, 20).raw("a line no parser knows")
    return w.write(folder) / "server.log"


@pytest.mark.parametrize("form", ["path", "file-uri"])
def test_staging_partitions_by_engine_and_day_and_replays_the_batches(form: str, tmp_path: Path):
    log = _midnight_log(tmp_path / "eng")
    engine = "lhr2 dsv3/pd=19"                                 # characters a partition path must quote
    job = FileJob(engine, log, "eng/server.log", "server_log", 0, 1, log.stat().st_mtime)
    uri = str(tmp_path / "staging") if form == "path" else f"file://{tmp_path / 'staging'}"
    fs, base = stg.open_staging(uri)
    part = stg.stage_file(fs, base, "scan-7", 3, 0, job)
    files = stg.staged_files(uri)
    root = f"{base}/scan-7/engine=lhr2%20dsv3%2Fpd%3D19"
    assert {f.rsplit("/", 1)[0] for f in files} == {f"{root}/day=2026-05-01", f"{root}/day=2026-05-02",
                                                    f"{root}/day=unknown"}
    assert all(Path(f).name.split("-")[1:3] == ["f3", "p0"] and f.endswith(".parquet") for f in files)
    assert any("/day=unknown/unparsed-" in f for f in files)
    # replayed: the very batches parse_file yields, in order, rows in order (a batch cut at midnight too)
    direct: list = []
    want = [(t, batch_to_arrow(r) if t != CHECKPOINT else r) for t, r in with_result(parse_file(job), direct)]
    got_outcome: list = []
    got = list(with_result(stg.read_staged(fs, part), got_outcome))
    assert [t for t, _ in got] == [t for t, _ in want]
    for (t, a), (_, b) in zip(got, want, strict=True):
        assert a == b if t == CHECKPOINT else a.equals(b), t
    assert got_outcome[0] == direct[0]
    assert stg.staged_files(uri) == []                          # read once, then gone


def test_a_batch_over_two_days_keeps_its_row_order(tmp_path: Path):
    day = 86400 * 10**6                        # microseconds, as the parsers' timestamps (Parquet has no seconds)
    table = pa.table({"ts": pa.array([day - 1, day + 1, None, day - 2], pa.timestamp("us")), "n": [0, 1, 2, 3]})
    pieces = stg.split_by_day(table)
    assert [d for d, _ in pieces] == ["1970-01-01", "1970-01-02", "unknown"]
    assert [p.column("n").to_pylist() for _, p in pieces] == [[0, 3], [1], [2]]
    fs, base = stg.open_staging(str(tmp_path))
    paths = []
    for d, piece in pieces:
        paths.append(f"{base}/{d}.parquet")
        with fs.open_output_stream(paths[-1]) as out:
            pq.write_table(piece, out)
    assert stg.read_batch(fs, paths).equals(table)
