-- title: Last progress per engine and rank
-- description: When each rank last made forward progress (a Prefill/Decode batch line, or a vLLM
--   stats line whose throughput moved), what it was running then, and how long the engine's
--   evidence goes on after it. The rank whose progress ends first is the one to look at.
-- inputs: progress, events, http_requests
WITH last AS (
    SELECT *, count(*) OVER (PARTITION BY engine, rank) AS progress_lines
    FROM progress
    QUALIFY row_number() OVER (PARTITION BY engine, rank ORDER BY ts DESC, line DESC) = 1),
evidence_end AS (
    SELECT engine, max(ts) AS evidence_end FROM (
        SELECT engine, ts FROM events
        UNION ALL SELECT engine, ts FROM http_requests
        UNION ALL SELECT engine, ts FROM progress)
    GROUP BY engine)
SELECT l.engine, l.rank, l.ts AS last_progress, l.batch_kind, l.running_req, l.queue_req,
       date_diff('second', l.ts, e.evidence_end) AS silent_s,   -- seconds of evidence after it
       l.progress_lines, l.path || ':' || l.line AS at
FROM last l JOIN evidence_end e USING (engine)
ORDER BY l.engine, rank_num(l.rank, 'DP') NULLS FIRST, rank_num(l.rank, 'TP') NULLS FIRST, l.rank
