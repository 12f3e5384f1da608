-- title: Unparsed lines per file
-- description: Files with lines no parser recognised, most first, with the share of the file and the
--   first such line. A server log with many unparsed lines may be a format this release does not know.
-- inputs: sources, unparsed
WITH firsts AS (
    SELECT engine, path, min(line) AS first_line, arg_min(text, line) AS first_text
    FROM unparsed GROUP BY engine, path)
SELECT s.engine, s.path, s.kind, s.lines, s.unparsed_lines,
       round(100.0 * s.unparsed_lines / nullif(s.lines, 0), 1) AS unparsed_pct,
       f.first_line, f.first_text
FROM sources s LEFT JOIN firsts f ON f.engine = s.engine AND f.path = s.path
WHERE s.unparsed_lines > 0
ORDER BY s.unparsed_lines DESC, s.engine, s.path
