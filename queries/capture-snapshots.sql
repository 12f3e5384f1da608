-- title: What repeated capture snapshots show per rank
-- description: For each capture bundle (hangforensics capture --repeat N), each rank's status across its
--   snapshots: stuck (same frames, state and wchan, CPU time flat) since when, driver_wait (state D),
--   spinning (same frames, CPU rising), moved (slow, not stuck), or one snapshot's state. Run analyze first.
-- inputs: snapshot_facts
SELECT engine, capture_id, rank, pid, status, unchanged AS snapshots_unchanged, since, span_s, state, wchan,
       syscall, round(cpu_delta_s, 2) AS cpu_delta_s, cpu_basis, frame, collective, call_site
FROM snapshot_facts
ORDER BY engine, capture_id, rank_num(rank, 'TP'), rank
