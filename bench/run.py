"""The benchmark, in one run: grep floor, ingest throughput and peak RSS at two sizes, fleet scan and rescan
(local process pool and a single-node Ray), report rendering per incident.

    python bench/run.py                     # 200 MB and 400 MB logs; fleets of 100, 1000 and 5000 engines
    python bench/run.py --big-mb 2000       # add the 2 GB log (peak RSS target: under 1 GB)
    python bench/run.py --sizes ""          # the fleet scans only
    python bench/run.py --sizes 445 --runs 3 --fleets ""        # the single-log figure: 3 paired runs
    python bench/run.py --fleets 300x1 --executors local,ray    # local against Ray
    python bench/run.py --sizes 445 --fleets "" --mixed       # a fleet of every evidence kind beside one log
    python bench/run.py --sizes 445 --fleets "" --mixed-forms # ... its busy logs through collectors, Ray, vLLM
    python bench/run.py --sizes 445 --fleets "" --mixed-dense # ... every engine a busy log beside its evidence
    python bench/run.py --sizes 445 --fleets "" --mixed --fresh-copy   # ... and a copy of it made just before
    python bench/run.py --sizes 445 --fleets "" --other 0.03  # a log with 3 % other messages, as real ones
    python bench/run.py --sizes 445 --fleets "" --envelopes kubectl,cri   # ... and that log behind collectors
    python bench/run.py --sizes 100 --fleets "" --envelopes ray,ms,compose,ansi,docker-json --vllm 100
    python bench/run.py --sizes 100 --fleets "" --envelopes journald-short --vllm 100 --job 30
                                            # a log in each form of evidence (generate.py's ENVELOPES), and vLLM's

Ingest runs are paired with ``grep -c batch`` on the same file (page cache warm) and the medians reported,
with the ratio's median; peak memory is given for the whole tree (the sum of RSS, which counts the pages of
shared libraries once per process, and the sum of PSS, which counts them once) and for its largest process.

Each measured command runs in its own process; peak RSS is the sum over it and its worker
processes, sampled every 50 ms (and at least what wait4() reports).  Data is generated
under bench/data/ (deterministic, reused when present).  Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
HF = [sys.executable, "-m", "hangforensics"]


def _tree_rss_kb(pid: int, pss: bool = False) -> tuple[int, int]:
    """Resident memory of a process and its descendants (parser workers run beside the main process): the
    total and the largest single process.  ``pss``: proportional set sizes instead (a page shared by n
    processes, such as the pages of polars' or numba's libraries, counts 1/n in each: their sum is the
    memory the processes hold together; reading them costs the kernel more, so it is sampled less often)."""
    total, largest, todo = 0, 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup" if pss else f"/proc/{p}/status") as f:
                key = "Pss:" if pss else "VmRSS:"
                rss = next((int(x.split()[1]) for x in f if x.startswith(key)), 0)
            total += rss
            largest = max(largest, rss)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total, largest


LAST: dict[str, float] = {}     # the last measure()'s largest-process peak, tree PSS peak (MB) and CPU seconds


def measure(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB of the whole process tree, sampled every 50 ms) of one command; the
    largest single process's peak and the tree's CPU seconds in ``LAST``."""
    t = time.perf_counter()
    # stdout to a pipe, not /dev/null: GNU grep stops at the first match when it writes to /dev/null
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = [0, 0, 0]
    stop = threading.Event()

    def sample() -> None:
        k = 0
        while not stop.is_set():
            total, largest = _tree_rss_kb(proc.pid)
            peak[0], peak[1] = max(peak[0], total), max(peak[1], largest)
            if k % 5 == 0:
                peak[2] = max(peak[2], _tree_rss_kb(proc.pid, pss=True)[0])
            k += 1
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    stop.set()
    sampler.join()
    wall = time.perf_counter() - t
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"benchmark command failed: {' '.join(cmd)}\n{err}")
    LAST["largest"] = max(peak[1], usage.ru_maxrss) / 1024
    LAST["pss"] = peak[2] / 1024
    LAST["cpu"] = usage.ru_utime + usage.ru_stime         # with the workers it waited for
    return wall, max(peak[0], usage.ru_maxrss) / 1024


def best(cmd: list[str], n: int = 3) -> tuple[float, float]:
    runs = [measure(cmd) for _ in range(n)]
    return min(r[0] for r in runs), max(r[1] for r in runs)


def ensure_big(mb: int, other: float = 0.0) -> Path:
    """The generated single log of ``mb`` MB (``other``: that share of its lines other messages)."""
    path = DATA / (f"big{mb}.log" if not other else f"big{mb}-other{other:g}.log")
    if not path.exists():
        subprocess.run([sys.executable, str(HERE / "generate.py"), "big", str(path), "--mb", str(mb),
                        "--other", str(other)], check=True)
    return path


def ensure_wrapped(log: Path, envelope: str) -> Path:
    """``log`` behind a collector's prefix (generate.py wrap)."""
    path = log.with_name(f"{log.stem}.{envelope}.log")
    if not path.exists():
        subprocess.run([sys.executable, str(HERE / "generate.py"), "wrap", str(log), str(path), "--envelope",
                        envelope], check=True)
    return path


def ensure_vllm(mb: int) -> Path:
    """A busy vLLM API server's log of ``mb`` MB (generate.py vllm)."""
    path = DATA / f"vllm{mb}.log"
    if not path.exists():
        subprocess.run([sys.executable, str(HERE / "generate.py"), "vllm", str(path), "--mb", str(mb)], check=True)
    return path


def ensure_job(mb: int) -> Path:
    """A torch.distributed job's step log of ``mb`` MB (generate.py job)."""
    path = DATA / f"job{mb}.log"
    if not path.exists():
        subprocess.run([sys.executable, str(HERE / "generate.py"), "job", str(path), "--mb", str(mb)], check=True)
    return path


def ensure_fleet(engines: int, mb: float) -> Path:
    path = DATA / f"fleet{engines}x{mb:g}"
    if not path.exists():
        subprocess.run([sys.executable, str(HERE / "generate.py"), "fleet", str(path), "--engines", str(engines),
                        "--mb-per-engine", str(mb)], check=True)
    return path


def fleet_scans(fleet: Path, fleet_mb: float, engines: int, mode: str, tmp: Path, runs: int = 1,
                note: str = "") -> list[tuple]:
    """A full scan (the median of ``runs``, each into a new database) and unchanged rescans of the fleet with
    one executor (a Ray scan starts a single-node Ray of its own, as cron would run it); the rescan budget is
    2 % of the full scan or 2 s, the larger.  The scan's own phase times (``scans.ingest_s``, ``analyze_s``)
    give the analysis per engine."""
    db, out, js = tmp / f"fleet-{engines}-{mode}.duckdb", tmp / f"out-{engines}-{mode}", tmp / f"scan-{engines}-{mode}.json"
    cmd = [*HF, "scan", str(fleet), "--db", str(db), "--out", str(out), "--json", str(js), "--executor", mode]
    full, paired = [], []
    for k in range(runs):
        if k:                                   # a first scan again: the database and reports of the last gone
            db.unlink()
            shutil.rmtree(out)
        # the single log ingested just before each scan: the ratio of their MB/s pair by pair (the VM's speed
        # drifts by 10 % or more within minutes; a ratio of medians taken minutes apart drifts with it)
        t_log = _single_log_ingest(tmp) if SINGLE_LOG else None
        full.append((*measure(cmd), LAST["largest"], LAST["pss"], LAST["cpu"], _phases(db)))
        if t_log is not None:
            paired.append(fleet_mb / full[-1][0] / (SINGLE_LOG[0][1] / t_log))
    t_full, rss_full, largest, pss, cpu, phases = sorted(full, key=lambda r: r[0])[len(full) // 2]
    FLEETS.append({"engines": engines, "mb": fleet_mb, "mode": mode, "scan": t_full, **phases})
    rows = [(f"scan {engines} engines, {fleet_mb:.0f} MB, --executor {mode}{note}", t_full, rss_full,
             f"{fleet_mb / t_full:.1f} MB/s; ingest {phases['ingest_s']:.1f} s, analysis {phases['analyze_s']:.2f} s "
             f"(**{1000 * phases['analyze_s'] / engines:.1f} ms per engine**), reports {phases['report_s']:.1f} s; "
             f"largest process {largest:.0f} MB; all processes {pss:.0f} MB PSS; CPU {cpu:.1f} s"
             + (f"; median of {runs}: {', '.join(f'{r[0]:.2f}' for r in full)} s" if runs > 1 else "")
             + (f"; **{statistics.median(paired):.2f} of the single log's MB/s** (each scan against the log ingested "
                f"just before it: {', '.join(f'{r:.2f}' for r in paired)})" if paired else ""))]
    t_re, rss_re = best(cmd)
    budget = max(0.02 * t_full, 2.0)
    rows.append((f"rescan, nothing changed, --executor {mode}{note}", t_re, rss_re,
                 f"{100 * t_re / t_full:.1f} % of the full scan; budget {budget:.1f} s: "
                 f"{'met' if t_re <= budget else 'MISSED'}"))
    if mode == "ray":
        local = tmp / f"scan-{engines}-local.json"
        same = js.read_text() == local.read_text() if local.exists() else None
        rows[0] = (*rows[0][:3], rows[0][3] + {True: "; findings identical to local", False: "; FINDINGS DIFFER",
                                               None: ""}[same])
        code = ("import time; t = time.perf_counter(); from hangforensics.fleet.ray_executor import ray_connection\n"
                "with ray_connection() as ray: ray.get(ray.remote(lambda: 0).remote()); up = time.perf_counter() - t\n"
                "print(up, time.perf_counter() - t - up)")
        t_ray, rss_ray = measure([sys.executable, "-c", code])
        up, down = (float(x) for x in subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                     check=True).stdout.split())
        rows.append(("start and stop a single-node Ray, one task", t_ray, rss_ray,
                     f"import + start + first task {up:.1f} s, shutdown {down:.1f} s (second run)"))
    return rows


FLEETS: list[dict] = []     # each full scan's figures, for the slope
SINGLE_LOG: list[tuple[Path, float]] = []   # the first plain single log and its MB: what a fleet scan is paired with


def _single_log_ingest(tmp: Path) -> float:
    """The seconds of one ingest of the single log into a new database (the reference a fleet scan is paired with)."""
    db = tmp / "paired-log.duckdb"
    t, _ = measure([*HF, "ingest", str(SINGLE_LOG[0][0]), "--db", str(db)])
    db.unlink()
    return t


def _phases(db: Path) -> dict[str, float]:
    """The first scan's phase seconds, as the scan recorded them."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        row = con.execute("SELECT ingest_s, analyze_s, report_s FROM scans ORDER BY scan_id LIMIT 1").fetchone()
    finally:
        con.close()
    return dict(zip(("ingest_s", "analyze_s", "report_s"), (float(x or 0) for x in row), strict=True))


def slope_rows() -> list[tuple]:
    """How the scan grows with the fleet: seconds per extra engine between the smallest and the largest fleet
    of one executor (a constant per-engine cost is a flat line; a cost per engine that grows with the fleet,
    a query per engine over whole tables, is not)."""
    rows = []
    for mode in dict.fromkeys(f["mode"] for f in FLEETS):
        runs = sorted((f for f in FLEETS if f["mode"] == mode), key=lambda f: f["engines"])
        if len(runs) < 2:
            continue
        a, b = runs[0], runs[-1]
        n = b["engines"] - a["engines"]
        per = [f"{1000 * (b[k] - a[k]) / n:.1f} ms" for k in ("scan", "ingest_s", "analyze_s")]
        mbs = ", ".join(f"{f['engines']}: {f['mb'] / f['scan']:.1f}" for f in runs)
        rows.append((f"slope {a['engines']} -> {b['engines']} engines, --executor {mode}", 0.0, 0.0,
                     f"per extra engine: scan {per[0]}, ingest {per[1]}, analysis {per[2]}; MB/s by fleet: {mbs}"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description="hangforensics benchmark")
    ap.add_argument("--sizes", default="200,400", help="MB sizes of the single-log ingest runs")
    ap.add_argument("--big-mb", type=int, default=0, help="also ingest a log of this many MB (peak RSS check)")
    ap.add_argument("--fleets", default="100x1,1000x0.5,5000x0.2",
                    help="generated fleets to scan, ENGINESxMB_PER_ENGINE, comma-separated ('' : none)")
    ap.add_argument("--fleet-dir", action="append", default=[], type=Path,
                    help="also scan this fleet folder (an engine per subfolder: real evidence of every kind)")
    ap.add_argument("--mixed", action="store_true",
                    help="also scan a fleet of every evidence kind (generate.py mixed: ~216 engines, ~300 MB)")
    ap.add_argument("--mixed-dense", action="store_true",
                    help="also scan a fleet whose every engine logs busily beside evidence of every kind "
                         "(generate.py mixed --dense: 216 engines, ~370 MB)")
    ap.add_argument("--mixed-forms", action="store_true",
                    help="also scan that fleet with its busy logs in generate.py's FORMS (mixed --forms)")
    ap.add_argument("--fresh-copy", action="store_true",
                    help="also scan a copy of each fleet folder made just before (every file written minutes ago: "
                         "live, as a fleet copied or unpacked for the scan is)")
    ap.add_argument("--executors", default="local", help="scan the first fleet with each of these executors "
                    "(local, ray); the others with the first")
    ap.add_argument("--runs", type=int, default=3, help="paired grep / ingest runs per size (medians reported)")
    ap.add_argument("--envelopes", default="",
                    help="also ingest each single log in these forms (generate.py's ENVELOPES: collectors' prefixes "
                         "kubectl, cri, syslog, journald, journald-short, docker-json, compose; ray, ansi, ms)")
    ap.add_argument("--vllm", type=int, default=0,
                    help="also ingest a busy vLLM API server's log of this many MB (generate.py vllm), paired with "
                         "grep -c POST")
    ap.add_argument("--job", type=int, default=0,
                    help="also ingest a torch.distributed job's step log of this many MB (generate.py job), paired "
                         "with grep -c step")
    ap.add_argument("--other", type=float, default=0.0,
                    help="share of the single logs' lines that are other messages, as a real server log holds "
                         "(generate.py big --other; 0: nearly all batch and access lines)")
    a = ap.parse_args()
    DATA.mkdir(exist_ok=True)
    sizes = [int(x) for x in a.sizes.split(",") if x] + ([a.big_mb] if a.big_mb else [])
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="hf-bench-"))
    try:
        logs = [(mb, ensure_big(mb, a.other), "") for mb in sizes]
        logs += [(mb, ensure_wrapped(log, env), env) for mb, log, _ in list(logs) for env in a.envelopes.split(",") if env]
        if a.vllm:
            logs.append((a.vllm, ensure_vllm(a.vllm), "vllm"))
        if a.job:
            logs.append((a.job, ensure_job(a.job), "job"))
        for mb, log, envelope in logs:
            real_mb = log.stat().st_size / 1e6
            db = tmp / f"ingest{mb}.duckdb"
            runs = []
            for _ in range(a.runs if mb <= 1000 else 1):      # paired: grep, then ingest, on the same cache
                word = {"vllm": "POST", "job": "step"}.get(envelope, "batch")
                g, _ = measure(["grep", "-c", word, str(log)])
                t, rss = measure([*HF, "ingest", str(log), "--db", str(db)])
                runs.append((g, t, rss, LAST["largest"], LAST["cpu"], LAST["pss"]))
                db.unlink()
            g, t, rss, largest, cpu, pss = (statistics.median(r[k] for r in runs) for k in range(6))
            if not envelope and not SINGLE_LOG:
                SINGLE_LOG.append((log, real_mb))
            ratio = statistics.median(r[1] / r[0] for r in runs)
            label = f"ingest {real_mb:.0f} MB log" + (f" ({100 * a.other:g} % other messages)" if a.other else "") \
                + ({"vllm": " of vLLM (relayed by Ray)", "job": " of a torch job's steps"}.get(envelope)
                   or (f" behind {envelope}" if envelope else ""))
            rows.append((label, t, rss,
                         f"{real_mb / t:.1f} MB/s; grep -c {word} {g:.2f} s ({ratio:.1f}x grep, median of "
                         f"{len(runs)} paired: {', '.join(f'{r[1] / r[0]:.1f}' for r in runs)}); "
                         f"largest process {largest:.0f} MB; all processes {pss:.0f} MB PSS; CPU {cpu:.1f} s"))
        fleets = [(int(e), float(m)) for e, m in (f.split("x") for f in a.fleets.split(",") if f)]
        modes = a.executors.split(",")
        for k, (engines, mb_each) in enumerate(fleets):
            fleet = ensure_fleet(engines, mb_each)
            fleet_mb = sum(p.stat().st_size for p in fleet.rglob("*") if p.is_file()) / 1e6
            for mode in (modes if k == 0 else modes[:1]):
                rows += fleet_scans(fleet, fleet_mb, engines, mode, tmp)
        for wanted, name, extra in ((a.mixed, "mixed", []), (a.mixed_forms, "mixed-forms", ["--forms"]),
                                    (a.mixed_dense, "mixed-dense", ["--dense"])):
            mixed = DATA / name
            if wanted and not mixed.exists():
                subprocess.run([sys.executable, str(HERE / "generate.py"), "mixed", str(mixed), *extra], check=True)
            if wanted:
                a.fleet_dir.append(mixed)
        for folder in a.fleet_dir:
            engines = sum(1 for p in folder.iterdir() if p.is_dir())
            fleet_mb = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6
            # (the fleets set against the single log: as many full scans as single-log runs, the median)
            rows += fleet_scans(folder, fleet_mb, engines, modes[0], tmp, runs=a.runs)
            FLEETS.pop()                  # not a generated fleet: no point of the slope
            if a.fresh_copy:
                # the same fleet copied just before its scan (new modification times): every file is live
                copy = tmp / f"fresh-{folder.name}"
                shutil.copytree(folder, copy, copy_function=shutil.copyfile)
                rows += fleet_scans(copy, fleet_mb, engines, modes[0], tmp, runs=a.runs,
                                    note=" (copied just before: every file live)")
                FLEETS.pop()
                shutil.rmtree(copy)
        rows += slope_rows()
        if fleets:
            db = tmp / f"fleet-{fleets[0][0]}-{modes[0]}.duckdb"
            out = tmp / f"out-{fleets[0][0]}-{modes[0]}"
            n_inc = len(list((out / "incidents").glob("*.html")))
            code = ("import sys,time;from hangforensics.store import Store;from hangforensics.report.html import render_incident;"
                    f"st=Store({str(db)!r});inc=st.query('SELECT * FROM incidents');t=time.perf_counter();"
                    "[render_incident(st,i) for i in inc];print((time.perf_counter()-t)/max(len(inc),1))")
            per = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
            rows.append((f"render one incident report ({n_inc} incidents)", per, 0.0, "mean per incident"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nhangforensics benchmark on {os.cpu_count()} cores ({sys.version.split()[0]})\n")
    print("| run | seconds | peak RSS of the tree (MB) | note |\n| --- | ---: | ---: | --- |")
    for name, secs, rss, note in rows:
        print(f"| {name} | {secs:.2f} | {rss:.0f} | {note} |")


if __name__ == "__main__":
    main()
