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

#endif
