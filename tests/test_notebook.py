"""notebooks/explore.ipynb runs top to bottom and asserts the sample incident's verdict (issue 5, item 2).

The notebook is stored without outputs; this test executes it in a fresh kernel of the current
interpreter, fails on any cell error (the notebook's story checks are plain asserts), and checks that
the per-rank progress plot was drawn.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "explore.ipynb"
CELL_TIMEOUT_S = 120


def _kernel_env(tmp_path: Path) -> dict[str, str]:
    """A 'python3' kernelspec that runs this interpreter and sees this checkout's package.

    The stock spec runs whatever ``python`` is first on PATH, which need not be the venv running the tests.
    """
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    src = str(REPO / "src")
    pythonpath = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python",
        "env": {"PYTHONPATH": pythonpath, "MPLBACKEND": "module://matplotlib_inline.backend_inline"},
    }))
    return {"JUPYTER_PATH": str(tmp_path / "jupyter")}


def _run(nb: nbformat.NotebookNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> nbformat.NotebookNode:
    for k, v in _kernel_env(tmp_path).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("HANGFORENSICS_INCIDENT", raising=False)     # the story checks run on the sample
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", allow_errors=False,
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    return client.execute()


def test_notebook_is_stored_without_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"cells {dirty} carry outputs: clear them before committing"


def test_notebook_runs_and_asserts_the_sample_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    ran = _run(nb, tmp_path, monkeypatch)
    code = [c for c in ran.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "a cell did not run"
    # the story checks are there and ran: a notebook with its asserts deleted would not test anything
    assert sum("assert" in c.source and "if STORY" in c.source for c in code) >= 6
    images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert images, "the per-rank progress plot produced no image"


def test_notebook_fails_when_the_verdict_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed verdict must fail the run: here the expected onset second is moved by one."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    target = '"2026-11-18 09:58:57"'
    cells = [c for c in nb.cells if target in c.source]
    assert len(cells) == 1
    cells[0].source = cells[0].source.replace(target, '"2026-11-18 09:58:58"')
    with pytest.raises(nbclient.exceptions.CellExecutionError, match="stall onset moved"):
        _run(nb, tmp_path, monkeypatch)
