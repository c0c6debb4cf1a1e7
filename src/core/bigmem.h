/* Big, long-lived buffers that are read end to end many times a second
 * (the repacked weights, the KV pool): anonymous mappings aligned to 2 MiB
 * and advised onto transparent huge pages. A 4 KiB page costs a TLB miss
 * every 64 cache lines of a stream; on a 2-vCPU Xeon a plain read of 1 GiB
 * ran at 14.0 GB/s on 4 KiB pages and 15.5 GB/s on 2 MiB ones. Where the
 * kernel says no (THP off, no free huge page) the memory is the same,
 * only slower. Memory comes zeroed and is committed as it is first touched. */
#ifndef HR_CORE_BIGMEM_H
#define HR_CORE_BIGMEM_H

#include <stddef.h>

/* bytes (> 0) of zeroed memory, 2 MiB-aligned; NULL when out of memory */
void *hr_big_alloc(size_t bytes);
/* p from hr_big_alloc(bytes), or NULL */
void hr_big_free(void *p, size_t bytes);

/* Bytes the system can give without swapping (MemAvailable; free pages
 * where /proc/meminfo does not say); 0 when unknown. */
size_t hr_mem_available(void);

/* Committing a page costs its zeroing, and in a virtual machine often a
 * fault of the host too (1.5 GB first touched in 2.1 s here, 0.23 s when
 * the host had backed it before): paid by whoever touches it first. A
 * populator makes pages resident ahead, on a thread of its own, without
 * changing a byte (an atomic add of 0 a page: a write fault, safe beside
 * the owner's writes; not MADV_POPULATE_WRITE, whose call holds the
 * process's mmap lock while it zeroes, so that every malloc growing the
 * heap meanwhile waited on this idle-priority thread: a 12k-token prompt
 * took 60-140 ms to tokenize beside it instead of 1, docs/kv-quant.md):
 * n_arrays arrays of n_units units, array i's unit u at base[i] + u *
 * unit[i], populated unit range by unit range across the arrays, front to
 * back (the KV pool's layers, its first blocks first: they are handed out
 * first). Only speed depends on it: NULL when it cannot start. */
typedef struct hr_populator hr_populator;
hr_populator *hr_populate_start(void *const *base, const size_t *unit, int n_arrays,
                                size_t n_units);
/* Stops it (between two ranges) and waits for the thread; NULL is a no-op. */
void hr_populate_stop(hr_populator *p);

#endif
