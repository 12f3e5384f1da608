-- title: Memory-check / leak reports by context
-- description: Leak reports grouped by engine, the context they were printed in (idle, busy, watchdog)
--   and their form, with the ranks, the time span and the pool shortfall. Only an idle report can be
--   a real leak; a busy or watchdog one counts the in-flight batch's own pages.
-- inputs: leak_reports
SELECT engine, context, form, count(*) AS reports,
       list_sort(list(DISTINCT rank)) AS ranks,
       min(ts) AS first_ts, max(ts) AS last_ts,
       max(shortfall) AS max_shortfall, max(in_flight_batch_size) AS in_flight_batch_size,
       max(leaked_full_pages) AS max_leaked_full_pages, max(leaked_mamba_pages) AS max_leaked_mamba_pages,
       CASE WHEN context = 'idle' THEN 'real leak suspect'
            ELSE 'in-flight pages, not a leak' END AS reading
FROM leak_reports
GROUP BY engine, context, form
ORDER BY engine, context = 'idle' DESC, context, form
