-- title: Findings, most severe first
-- description: What the rules found (run analyze first): severity, rule, engine, when, which ranks,
--   the one-line title and where the first piece of evidence is.
-- inputs: findings
SELECT severity, rule, engine, ts, ts_end, ranks, signature, title,
       evidence[1].file || ':' || evidence[1].line AS first_evidence
FROM findings
ORDER BY CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, engine, ts NULLS LAST, rule
