-- title: Runs of each server
-- description: Each engine's runs of its server (run analyze first): when each began and ended, what
--   began it (a start line, or a restart the evidence shows without one: the rank labels changed form,
--   or the logs resumed after a long silence), and the progress lines and stall it holds. Findings and
--   stalls are judged within one run.
-- inputs: runs, progress, stalls
SELECT r.engine, r.segment, r.start_ts, r.end_ts, COALESCE(r.started_by, 'first') AS started_by,
       count(p.ts) AS progress_lines, min(p.ts) AS first_progress, max(p.ts) AS last_progress,
       any_value(s.onset) AS stall_onset
FROM runs r
LEFT JOIN progress p ON p.engine = r.engine AND (r.start_ts IS NULL OR p.ts >= r.start_ts)
     AND (r.end_ts IS NULL OR p.ts < r.end_ts)
LEFT JOIN stalls s ON s.engine = r.engine AND s.segment = r.segment
GROUP BY ALL
ORDER BY r.engine, r.segment
