"""Imported by the fork server of a pool that reads plain server logs (``parallel.worker_pool``): its workers are
forked with polars, pyarrow and the compiled scanner already loaded, where each spawned worker used to load
them itself (some 1 s of CPU per worker, numba's import and its cache the most of it)."""

import ctypes
import gc

from .fork_server import die_with_parent
from .worker import warm_up


def _keep_freed_memory() -> None:
    """glibc's malloc keeps the memory freed by one chunk's arrays for the next, in its heap: by default each
    array of more than a few MB is mapped afresh and unmapped when freed, and the kernel faults in and
    zeroes its pages every time.  The workers' arrays are the same few sizes chunk after chunk, so their
    peak memory barely moves (measured on a 445 MB log, paired: 0.4 s less wall time, 0.9 s less CPU; the
    largest process 412 MB either way, all processes' PSS 908 -> 930 MB)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:                     # not glibc: its defaults then
        return
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    libc.mallopt(m_mmap_threshold, 1 << 30)
    libc.mallopt(m_trim_threshold, (1 << 31) - 1)
    libc.mallopt(m_top_pad, 128 << 20)


die_with_parent()
_keep_freed_memory()
warm_up()
# what is loaded stays out of the garbage collector's passes: a forked worker's collections then do not
# write to (and so copy) the pages it shares with the server
gc.freeze()
