-- title: Engines whose /health stayed 200 during a stall
-- description: For each stall (run analyze first), the liveness probes (/health, /health_generate,
--   /ping, ...) answered after forward progress stopped: how many said 200, how many failed, and for
--   how long the probe was blind. A load balancer trusting such a probe kept routing to a dead replica.
-- inputs: stalls, http_requests
SELECT s.engine, s.segment, s.onset,
       count(*) FILTER (WHERE h.status = 200) AS probes_200,
       count(*) FILTER (WHERE h.status <> 200) AS probes_failed,
       min(h.ts) FILTER (WHERE h.status = 200) AS first_200,
       max(h.ts) FILTER (WHERE h.status = 200) AS last_200,
       round(date_diff('second', min(h.ts) FILTER (WHERE h.status = 200),
                       max(h.ts) FILTER (WHERE h.status = 200)) / 60.0, 1) AS blind_min,
       string_agg(DISTINCT h.path, ', ') AS probe_paths
FROM stalls s
JOIN http_requests h ON h.engine = s.engine AND h.ts > s.onset AND h.ts <= s.evidence_end
WHERE h.path IN ('/health', '/health_generate', '/ping', '/healthz', '/readiness', '/liveness')
GROUP BY s.engine, s.segment, s.onset
HAVING count(*) FILTER (WHERE h.status = 200) > 0
ORDER BY blind_min DESC, s.engine
