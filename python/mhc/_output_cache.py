"""Reuse of large output buffers between calls of the Python face.

On virtual machines the first touch of fresh memory is slow (a page fault and a
zeroed 4 KiB page each, 1.8-14 us): at T=4096, N=4, D=4096 the 128 MiB grad_x of a
fresh torch.empty costs half as much again as the backward itself. Outputs of at
least MIN_BYTES therefore live in anonymous private mappings that go back to a
cache when the last tensor (or view) using them is gone, and the next call of the
same size takes them from there, already faulted in, as a GPU caching allocator
does. Memory is never shared between live tensors: a buffer is handed out again
only after Python has dropped every reference to it (a weakref finalizer on the
memoryview that the tensor's storage keeps).

The cache keeps at most `capacity` bytes of idle buffers (default 2 GiB, or
MHC_OUTPUT_CACHE_MB); set_output_cache(0) turns it off and releases what it holds.
"""
import functools
import mmap
import os
import threading
import weakref

import torch

MIN_BYTES = 1 << 20
_PAGE = mmap.PAGESIZE


@functools.lru_cache(maxsize=None)
def _element_size(dtype):
    return torch.empty((), dtype=dtype).element_size()


def _default_capacity():
    value = os.environ.get("MHC_OUTPUT_CACHE_MB")
    if value is None:
        return 2 << 30
    try:
        return max(0, int(value)) << 20
    except ValueError:
        raise ValueError(f"MHC_OUTPUT_CACHE_MB: expected a whole number of MiB, got {value!r}") from None


class OutputCache:
    def __init__(self, capacity):
        self._lock = threading.Lock()
        self._capacity = capacity
        self._idle = {}        # size in bytes -> [mmap]
        self._idle_bytes = 0
        self.hits = 0          # buffers handed out again (for tests and curiosity)

    def set_capacity(self, nbytes):
        with self._lock:
            self._capacity = nbytes
            released = self._shrink_locked()
        for m in released:
            m.close()

    def capacity(self):
        return self._capacity

    def idle_bytes(self):
        return self._idle_bytes

    def empty(self, shape, dtype):
        """An uninitialised contiguous tensor, from the cache when it is large enough."""
        numel = 1
        for extent in shape:
            numel *= extent
        nbytes = numel * _element_size(dtype)
        if nbytes < MIN_BYTES or self._capacity == 0:
            return torch.empty(shape, dtype=dtype)
        size = (nbytes + _PAGE - 1) // _PAGE * _PAGE
        with self._lock:
            idle = self._idle.get(size)
            buffer = idle.pop() if idle else None
            if buffer is not None:
                self._idle_bytes -= size
                self.hits += 1
        if buffer is None:
            try:
                buffer = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            except (OSError, OverflowError, ValueError):
                return torch.empty(shape, dtype=dtype)  # torch reports what it cannot allocate
            if hasattr(mmap, "MADV_HUGEPAGE"):
                buffer.madvise(mmap.MADV_HUGEPAGE)
        view = memoryview(buffer)
        # The storage keeps `view` alive; when it goes, so does the last use of the buffer.
        weakref.finalize(view, self._give_back, buffer, size)
        return torch.frombuffer(view, dtype=dtype, count=numel).view(shape)

    def _give_back(self, buffer, size):
        with self._lock:
            if self._idle_bytes + size <= self._capacity:
                self._idle.setdefault(size, []).append(buffer)
                self._idle_bytes += size
                return
        buffer.close()

    def _shrink_locked(self):
        released = []
        for size in sorted(self._idle, reverse=True):
            idle = self._idle[size]
            while idle and self._idle_bytes > self._capacity:
                released.append(idle.pop())
                self._idle_bytes -= size
        self._idle = {size: idle for size, idle in self._idle.items() if idle}
        return released


cache = OutputCache(_default_capacity())


def set_output_cache(nbytes):
    """Bytes of idle output buffers kept for reuse (0: none, and release them)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise TypeError(f"nbytes: expected an int, got {type(nbytes).__name__}")
    if nbytes < 0:
        raise ValueError(f"nbytes: expected a byte count >= 0, got {nbytes}")
    cache.set_capacity(nbytes)


def get_output_cache():
    """(capacity, idle bytes held) of the output cache."""
    return cache.capacity(), cache.idle_bytes()
