/* A bounded map from 64-bit keys (prefix chunk hashes) to small integers
 * (replicas), least recently used out first. Not thread-safe: the router
 * holds its lock around every call. */
#ifndef HR_ROUTE_LRU_H
#define HR_ROUTE_LRU_H

#include <stdint.h>

typedef struct hr_lru hr_lru;

/* cap entries at most (>= 1); NULL when out of memory. */
hr_lru *hr_lru_new(int cap);
void hr_lru_free(hr_lru *m);
/* The value of key (now the most recently used), or -1. */
int hr_lru_get(hr_lru *m, uint64_t key);
/* Set key to val (the most recently used); the least recently used entry
 * goes when the map is full. */
void hr_lru_put(hr_lru *m, uint64_t key, int val);
int hr_lru_size(const hr_lru *m);

#endif
