/* The prompt cache: full KV blocks indexed by the hash chain of their token
 * content (block i's key hashes block i's 32 tokens with block i-1's key),
 * so an equal prefix is found whatever request computed it. The cache holds
 * one reference on every block it indexes; a request that reuses a prefix
 * takes its own references, so nobody's entry is consumed or trimmed by
 * another's use. Entries whose block only the cache holds are evicted in
 * LRU order when the pool runs short or the cache passes its bound. */
#ifndef HR_ENGINE_PCACHE_H
#define HR_ENGINE_PCACHE_H

#include "model/kv.h"

#include <stdint.h>

typedef struct hr_pcache hr_pcache;

/* max_blocks bounds the blocks the cache keeps (0: no bound but the pool).
 * NULL on allocation failure. */
hr_pcache *hr_pcache_new(hr_kv *kv, int max_blocks);
void hr_pcache_free(hr_pcache *pc); /* drops the cache's references */

/* The longest cached prefix of tokens[0..n), in whole blocks, at most
 * max_blocks: block ids go to blocks[], each with a new reference for the
 * caller. Returns the number of blocks. */
int hr_pcache_lookup(hr_pcache *pc, const int32_t *tokens, int n, int max_blocks,
                     int32_t *blocks);

/* Index the first n_blocks full blocks of a sequence (tokens[0..32*n_blocks),
 * KV in blocks[]). Blocks already indexed are only touched (LRU). */
void hr_pcache_insert(hr_pcache *pc, const int32_t *tokens, int n_blocks,
                      const int32_t *blocks);

/* Free up to n blocks by evicting LRU entries nobody else uses. Returns the
 * number of blocks returned to the pool. */
int hr_pcache_evict(hr_pcache *pc, int n);

int hr_pcache_blocks(const hr_pcache *pc); /* blocks indexed now */

#endif
