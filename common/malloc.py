"""Keeping freed memory for reuse: the CPU allocator setting a training loop wants.

torch's CPU tensors come from the C library's malloc. glibc's malloc maps each block above its mmap threshold
(128 KB, raised towards the largest block freed so far, at most 32 MB) straight from the kernel and unmaps it when
freed, and hands the top of its heap back once more than twice that threshold lies free there. A training step
frees its activations and allocates them again at once, so every step's tensors land on freshly mapped pages,
which the kernel zero-fills at the first write, one page fault per 4 KB: over a thousand per step at fast-cpu's
size, seconds of system time per run (docs/speed.md, "The process", has the counts). With both thresholds raised the
freed blocks stay in the process for the next step's tensors of the same sizes: no faults after the first steps.
jemalloc or tcmalloc, preloaded, do the same (PyTorch's CPU tuning guide); this needs nothing installed. Peak memory
does not change; memory freed after the peak goes back to the system at exit rather than at once.
"""
import ctypes
import ctypes.util
import functools

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters, from glibc's malloc.h
MMAP_THRESHOLD = 32 << 20  # glibc's largest: a block above it is still mapped and unmapped on its own
TRIM_THRESHOLD = 1 << 30  # free memory kept at the heap's top before any goes back to the kernel


def glibc():
    """The C library, if it is glibc (Linux); else None (macOS, musl: no mallopt, or one that ignores these)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.gnu_get_libc_version  # noqa: B018 -- only glibc has it
        return libc
    except (OSError, AttributeError, TypeError):
        return None


@functools.cache
def keep_freed_memory() -> bool:
    """Raises both thresholds (once per process). Returns False, changing nothing, where the C library is not glibc."""
    libc = glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
