-- title: Per process group: do the ranks agree on their collectives
-- description: Each process group's collective records (ProcessGroupNCCL timeouts, Flight Recorder dumps,
--   NCCL RAS counts, desync reports) compared one source at a time: desync (the odd ranks), absent (a
--   member missing or dead), agree, or split (a tie: nobody named). Run analyze first.
-- inputs: collective_verdicts
SELECT engine, source, pg, verdict, ranks, majority_ranks, seq, op, ts, detail
FROM collective_verdicts
ORDER BY engine, verdict IN ('agree', 'split', 'undecided'), source, pg
