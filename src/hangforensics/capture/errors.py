"""Typed errors of the capture stage; the CLI turns each into one line on stderr and exit 2."""

from __future__ import annotations

from ..errors import HangforensicsError, InputError


class CaptureError(HangforensicsError):
    """A capture that cannot start: bad arguments, no /proc, an output that cannot be written."""


class NoEngineError(CaptureError):
    """No process (or more than one engine) matched what the user asked to capture."""


class ManifestError(InputError):
    """A bundle's manifest.json exists but cannot be read: malformed, or a format this release does not
    know."""
