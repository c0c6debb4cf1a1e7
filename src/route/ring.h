/* A consistent-hash ring over replicas (by name, so that routers given the
 * same replicas in any order place a key alike): each replica has vnodes
 * points on a 64-bit circle; a key goes to the first point clockwise whose
 * replica is eligible. Immutable once built; at most 64 replicas. */
#ifndef HR_ROUTE_RING_H
#define HR_ROUTE_RING_H

#include <stdint.h>

#define HR_RING_MAX 64

typedef struct hr_ring hr_ring;

/* NULL when out of memory or n is not in [1, HR_RING_MAX]. */
hr_ring *hr_ring_new(const char *const *names, int n, int vnodes);
void hr_ring_free(hr_ring *r);
/* The replica of key among those whose bit is set in eligible, or -1 when
 * none is. */
int hr_ring_pick(const hr_ring *r, uint64_t key, uint64_t eligible);

#endif
