/* The prompt cache: KV blocks indexed by the hash chain of their token
 * content (block i's key hashes block i's 32 tokens with block i-1's key),
 * so an equal prefix is found whatever request computed it. Besides full
 * blocks, the last, not-full block of every stored sequence is indexed
 * with the tokens it holds (the SSD tier keeps the newest one after each
 * prefix), so a prefix is found token by token:
 * after the last whole cached block, the longest common prefix with any
 * cached next block (full or not) is reused by copying its rows into a
 * fresh block of the caller (copy-on-write: a cached block is never
 * written). The cache holds one reference on every block it indexes; a
 * request that reuses whole blocks takes its own references, so nobody's
 * entry is consumed or trimmed by another's use. Entries whose block only
 * the cache holds are evicted in LRU order when the pool runs short or the
 * cache passes its bound. */
#ifndef HR_ENGINE_PCACHE_H
#define HR_ENGINE_PCACHE_H

#include "engine/ssd.h"
#include "model/kv.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct hr_pcache hr_pcache;

/* max_blocks bounds the blocks the cache keeps in RAM (0: no bound but the
 * pool). ssd (may be NULL) is the SSD tier: every indexed full block is
 * written there in the background, and a RAM miss of a full block is looked
 * up there. Entries idle for demote_idle seconds (0: never) leave RAM once
 * they are on SSD. NULL on allocation failure. */
hr_pcache *hr_pcache_new(hr_kv *kv, int max_blocks, hr_ssd *ssd, double demote_idle);
void hr_pcache_free(hr_pcache *pc); /* drops the cache's references */

/* seed: what else the KV depends on besides the tokens (a LoRA adapter's
 * fingerprint; 0: the base model). It seeds the hash chain, so sequences
 * of different seeds never share a block, in RAM or on the SSD tier. */

/* The longest cached prefix of tokens[0..n), in at most max_blocks blocks:
 * block ids go to blocks[], each with a new reference for the caller. The
 * whole cached blocks are shared; when the prefix ends inside a block, that
 * last block is a fresh one of the caller's (refcount 1) holding a copy of
 * the common rows (none is made when the pool has no block to spare).
 * tokens[n..known) (known >= n) are readable too: with them the SSD tier's
 * full block past n can give that copy (a prompt resent after a restart).
 * *n_tokens gets the prefix length (0..n). Returns the number of blocks. */
int hr_pcache_lookup(hr_pcache *pc, uint64_t seed, const int32_t *tokens, int n, int known,
                     int max_blocks, int32_t *blocks, int *n_tokens);

/* Index a sequence of n tokens whose KV is in blocks[] (blocks_for(n) of
 * them): its full blocks and its not-full tail. Blocks already indexed are
 * only touched (LRU); a cached tail that the new blocks extend is replaced. */
void hr_pcache_insert(hr_pcache *pc, uint64_t seed, const int32_t *tokens, int n,
                      const int32_t *blocks);

/* After hr_pcache_insert of a sequence whose first n_prompt tokens were its
 * prompt: when its generation filled the prompt's last, not-full block,
 * that block's file is named by tokens the same prompt sent again does not
 * have, so the SSD tier also gets the prompt's own rows of it as the tail
 * after its whole blocks (a restart then finds the whole prompt, and its
 * logits apply). Not indexed in RAM, where the full block serves; nothing
 * without the SSD tier or for a hybrid model. A full queue: it waits (its
 * block held) for hr_pcache_poll, 64 of them at most; a paused tier: it is
 * not kept. */
void hr_pcache_keep_prompt_tail(hr_pcache *pc, uint64_t seed, const int32_t *tokens,
                                int n_prompt, int n, const int32_t *blocks);

/* Indexed blocks and prompts' tails whose SSD write still waits for room in
 * the writer's queue (hr_pcache_poll queues them). */
int hr_pcache_pending(const hr_pcache *pc);

/* Hybrid models (recurrent layers): a prefix is reused only up to a block
 * boundary where the cache holds the layers' state (state_bytes of it, the
 * forward's hr_fwd_state_bytes). The states held take at most max_bytes (at
 * least two states): past it the least recently used entries drop theirs.
 * Set once, after hr_pcache_new. */
void hr_pcache_keep_states(hr_pcache *pc, size_t state_bytes, size_t max_bytes);

/* A recurrent state after the first pos tokens (pos a multiple of the
 * block), malloc'd: insert takes it over. */
typedef struct hr_pcache_state {
    int pos;
    void *data;
} hr_pcache_state;

/* hr_pcache_insert, the full block ending at each states[i].pos getting
 * that state (if it has none yet; the SSD tier writes it with the block).
 * Every states[i].data is taken (kept or freed) and set to NULL. */
void hr_pcache_insert_states(hr_pcache *pc, uint64_t seed, const int32_t *tokens, int n,
                             const int32_t *blocks, hr_pcache_state *states, int n_states);

/* hr_pcache_lookup for hybrid models: whole cached blocks only, up to the
 * last one that holds a state (*state: that state, valid until the next
 * call on pc; NULL and 0 blocks when none). */
int hr_pcache_lookup_state(hr_pcache *pc, uint64_t seed, const int32_t *tokens, int n,
                           int max_blocks, int32_t *blocks, int *n_tokens, const void **state);

/* Runs of blocks read back from the SSD tier left in flight (off by
 * default): a lookup that reads a run of blocks back (the first such run
 * while none is in flight) returns as soon as the files are opened, the
 * blocks indexed and handed out before they are in. The pool's gate
 * (model/kv.h) makes the forward wait for each layer of them; nothing else
 * may read them until hr_pcache_settle (the cache itself settles first
 * where it would: a partial copy of one of them, hr_pcache_free). Only for
 * callers that drop a step computed over a block that then fails
 * (hr_pcache_failed). */
void hr_pcache_overlap(hr_pcache *pc, bool on);
/* Runs started while on are read in whole files rather than a chunk of
 * layers at a time (faster on some disks): for a lookup whose request
 * computes nothing under the reads (its first token from the logits cache,
 * lcache.h). Off by default. */
void hr_pcache_whole_files(hr_pcache *pc, bool on);
/* A run in flight. */
bool hr_pcache_reading(const hr_pcache *pc);
/* Waits for the run in flight, if any, to end: the blocks from the first
 * that failed its checks on are unindexed (hr_pcache_failed). */
void hr_pcache_settle(hr_pcache *pc);
/* The blocks of runs settled since the last call that failed their checks
 * and are still held by somebody (a request that got them: what it
 * computed over them is wrong, and it must compute them again in blocks
 * of its own); valid until the next settle. Their number. */
int hr_pcache_failed(hr_pcache *pc, const int32_t **blocks);

/* Free up to n blocks by evicting LRU entries nobody else uses. Returns the
 * number of blocks returned to the pool. */
int hr_pcache_evict(hr_pcache *pc, int n);

int hr_pcache_blocks(const hr_pcache *pc); /* blocks indexed now (full or not) */

/* Once per engine step: release blocks whose SSD writes finished, demote
 * idle entries. now is hr_now(). */
void hr_pcache_poll(hr_pcache *pc, double now);

#endif
