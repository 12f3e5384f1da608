"""Imported by the fork server of a pool that reads large logs (``parallel.worker_pool``): its workers are
forked with polars, pyarrow and the compiled scanner already loaded, where each spawned worker used to load
them itself (some 1 s of CPU per worker, numba's import and its cache the most of it)."""

import gc

from .worker import warm_up

warm_up()
# what is loaded stays out of the garbage collector's passes: a forked worker's collections then do not
# write to (and so copy) the pages it shares with the server
gc.freeze()
