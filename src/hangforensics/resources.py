"""Where the project's data folders are: the source checkout's, else the copy installed in the package.

``rules/``, ``queries/`` and ``reports/templates/`` sit at the top of a checkout; a wheel carries them
as ``hangforensics/_data/<name>`` (pyproject.toml ``force-include``).
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent


def data_dir(checkout_path: str, pattern: str) -> Path | None:
    """The folder ``checkout_path`` (e.g. 'reports/templates') holding files matching ``pattern``."""
    for cand in (_HERE.parents[1] / checkout_path, _HERE / "_data" / Path(checkout_path).name):
        if cand.is_dir() and any(cand.glob(pattern)):
            return cand
    return None
