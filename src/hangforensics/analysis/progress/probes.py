"""Liveness probes, recognised by behaviour: one client asking the same GET path at a steady interval,
whatever the path (/health, /v1/models, /get_model_info, a load balancer's own).  A well-known probe
path asked by any client counts too (several load balancers probing at once are not one steady series).
"""

from __future__ import annotations

from ...store import Store

# Paths that are probes whoever asks them.
PROBE_PATHS = ("/health", "/health_generate", "/ping", "/healthz", "/readiness", "/liveness", "/readyz", "/livez")
# Requests that are not work for the scheduler (when they are not probes, they still are not pending work).
NON_WORK_PATHS = PROBE_PATHS + ("/metrics", "/get_model_info", "/get_server_info", "/server_info",
                                "/v1/models", "/flush_cache", "/get_load", "/version", "/model_info")
# Steady GETs that are not liveness checks: a metrics scrape says nothing about the engine's health.
NOT_PROBES = ("/metrics",)
MIN_REQUESTS = 4                # a series: at least this many requests ...
MAX_INTERVAL_S = 900.0          # ... at most this far apart on the median ...
STEADY_SPREAD = 0.35            # ... with an interquartile range of at most this fraction of the median (+ 2 s)


def rebuild(store: Store, engines: list[str]) -> None:
    """Fill ``probes`` for ``engines``: one row per (engine, client, method, path) series."""
    store.con.execute("DELETE FROM probes WHERE list_contains(?, engine)", [engines])
    store.con.execute(f"""
        INSERT INTO probes
        WITH r AS (
            SELECT engine, regexp_replace(COALESCE(client, ''), ':\\d+$', '') AS client, method, path, ts
            FROM http_requests
            WHERE list_contains($1, engine) AND ts IS NOT NULL AND method IN ('GET', 'HEAD')
              AND NOT list_contains($3, split_part(path, '?', 1))),
        g AS (
            SELECT *, epoch(ts) - epoch(lag(ts) OVER (PARTITION BY engine, client, method, path ORDER BY ts)) AS gap
            FROM r),
        s AS (
            SELECT engine, client, method, path, count(*) AS n, median(gap) AS interval_s,
                   quantile_cont(gap, 0.75) - quantile_cont(gap, 0.25) AS spread, min(ts) AS first_ts,
                   max(ts) AS last_ts
            FROM g GROUP BY ALL)
        SELECT engine, client, method, path, n, interval_s, first_ts, last_ts,
               CASE WHEN n >= {MIN_REQUESTS} AND interval_s BETWEEN 0.2 AND {MAX_INTERVAL_S}
                         AND spread <= {STEADY_SPREAD} * interval_s + 2 THEN 'behaviour' ELSE 'path' END AS basis
        FROM s
        WHERE (n >= {MIN_REQUESTS} AND interval_s BETWEEN 0.2 AND {MAX_INTERVAL_S}
               AND spread <= {STEADY_SPREAD} * interval_s + 2)
           OR list_contains($2, path)""", [engines, list(PROBE_PATHS), list(NOT_PROBES)])
