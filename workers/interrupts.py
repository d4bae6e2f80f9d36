"""Asynchronous exceptions into executor threads: how a timed-out or cancelled lambda is stopped.

CPython raises an exception set with PyThreadState_SetAsyncExc the next time the target
thread runs Python bytecode. A lambda blocked in one long C call (time.sleep, a socket read
without a timeout) sees it only when that call returns; the worker's grace period covers that.
"""

from __future__ import annotations

import ctypes

from tasks_core.context import AttemptStopped

# Two pointers to the one function, typed differently: one raises, one (with NULL) clears.
_raise = ctypes.pythonapi["PyThreadState_SetAsyncExc"]
_raise.argtypes = (ctypes.c_ulong, ctypes.py_object)
_raise.restype = ctypes.c_int
_clear = ctypes.pythonapi["PyThreadState_SetAsyncExc"]
_clear.argtypes = (ctypes.c_ulong, ctypes.c_void_p)
_clear.restype = ctypes.c_int


#: The thread of an attempt that runs on no thread of its own (an async lambda's coroutine, on
#: the worker's event loop): interrupts of it reach no thread, its runner stops it instead
#: (workers.async_executor). Never passed to CPython: a thread state not yet bound to its
#: thread has the id 0.
NO_THREAD = 0


def interrupt(thread_id: int, reason: type[AttemptStopped]) -> bool:
    """Raise `reason` (TimeLimitExceeded, TaskCancelled) in the thread `thread_id`; whether
    such a thread exists."""
    return thread_id != NO_THREAD and _raise(thread_id, reason) == 1


def cancel(thread_id: int) -> None:
    """Withdraw an interrupt of `thread_id` that has not been raised yet."""
    if thread_id != NO_THREAD:
        _clear(thread_id, None)
