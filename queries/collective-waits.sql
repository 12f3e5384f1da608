-- title: Which collective each rank waits in
-- description: Per capture of stack dumps, the innermost collective (all_reduce, broadcast, ...) each
--   rank's main thread is in, and the first caller that is not a wrapper. Ranks of one group in
--   different collectives or call sites are desynchronised. Run analyze first.
-- inputs: rank_collectives
SELECT engine, capture, min(ts) AS first_ts, collective, call_site, thread_state,
       list_sort(list(rank)) AS ranks, count(*) AS n_ranks
FROM rank_collectives
GROUP BY engine, capture, collective, call_site, thread_state
ORDER BY engine, capture, n_ranks DESC, collective
