-- title: Ranks grouped by stack class
-- description: For each capture (stack dumps of one engine taken within 5 minutes), the sets of ranks
--   whose main threads share the whole stack, with its innermost frames (innermost first). One class
--   holding every rank is a shared deadlock; a small odd class is the suspect. Run analyze first.
-- inputs: rank_classes
WITH RECURSIVE walk AS (
    SELECT engine, capture, class_id AS leaf_id, depth AS leaf_depth, class_id, parent_id, depth, frame
    FROM rank_classes WHERE is_leaf
    UNION ALL
    SELECT w.engine, w.capture, w.leaf_id, w.leaf_depth, c.class_id, c.parent_id, c.depth, c.frame
    FROM walk w JOIN rank_classes c
      ON c.engine = w.engine AND c.capture = w.capture AND c.class_id = w.parent_id),
innermost AS (
    SELECT engine, capture, leaf_id, string_agg(frame, ' <- ' ORDER BY depth DESC) AS innermost_frames
    FROM walk WHERE depth > leaf_depth - 5
    GROUP BY ALL)
SELECT c.engine, c.capture, c.ts, c.label AS ranks, len(c.ranks) AS n_ranks, c.frame AS leaf_frame,
       i.innermost_frames
FROM rank_classes c JOIN innermost i
  ON i.engine = c.engine AND i.capture = c.capture AND i.leaf_id = c.class_id
WHERE c.is_leaf
ORDER BY c.engine, c.capture, n_ranks DESC, ranks
