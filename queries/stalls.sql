-- title: Stalls per engine
-- description: Each run of a server that stopped making forward progress with work pending (run
--   analyze first): the onset (last progress), how long the evidence stays silent, why work was
--   pending, and where the last batch line is.
-- inputs: stalls
SELECT engine, segment, onset, evidence_end, round(silent_s / 60.0, 1) AS silent_min, ranks, pending,
       path || ':' || line AS last_batch_line
FROM stalls
ORDER BY onset, engine
