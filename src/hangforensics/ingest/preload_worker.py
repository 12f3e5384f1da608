"""Imported by the fork server of a pool that reads no plain server log (``parallel.worker_pool``): its workers
are forked with the parsers loaded; the server dies with the ingest that started it (``die_with_parent``)."""

from . import worker  # noqa: F401
from .fork_server import die_with_parent

die_with_parent()
