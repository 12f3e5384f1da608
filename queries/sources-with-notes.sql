-- title: Files that were odd or not understood
-- description: Ingested files with a note (binary, truncated, ...), an unusual status (vanished, error)
--   or a kind no parser handles (unknown, unreadable): evidence that may be missing from the analysis.
-- inputs: sources
SELECT engine, path, kind, status, note, bytes, lines, unparsed_lines
FROM sources
WHERE note IS NOT NULL OR coalesce(status, 'ok') <> 'ok' OR kind IN ('unknown', 'unreadable')
ORDER BY engine, path
