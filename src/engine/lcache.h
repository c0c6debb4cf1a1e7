/* The logits cache: the last position's logits of prompts whose prefill
 * completed, keyed by the prompt's tokens (and the cache seed: an
 * adapter's fingerprint). A request whose whole prompt is in the prompt
 * cache and whose logits are here samples its first token from them: no
 * forward at all, where otherwise the prompt's last token is computed
 * again over the whole context (a chat app's "regenerate", an agent's
 * retry, a conversation re-sent after a restart). The logits are the
 * original prefill's own, so the first token is the one an uncached
 * request gets, bit for bit.
 *
 * RAM: the LCACHE_ENTRIES most recent, least recently used first out. With
 * the SSD tier, the entries of long enough prompts are written there too
 * (ssd.h: "<key>.lg" files) and a RAM miss is looked up there. Engine
 * thread only. */
#ifndef HR_ENGINE_LCACHE_H
#define HR_ENGINE_LCACHE_H

#include "engine/ssd.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct hr_lcache hr_lcache;

/* n_vocab floats an entry; ssd may be NULL; only prompts of ssd_min
 * tokens or more go to it (so that a file of logits is no larger than the
 * KV it accompanies: short prompts' logits stay in RAM). NULL on
 * allocation failure. */
hr_lcache *hr_lcache_new(int n_vocab, hr_ssd *ssd, int ssd_min);
void hr_lcache_free(hr_lcache *lc);

/* Keep the logits after tokens[0..n) (copied). Allocation failure only means
 * it is not kept; a full SSD queue, that its file is queued by a later
 * hr_lcache_poll (while the entry is in RAM). */
void hr_lcache_put(hr_lcache *lc, uint64_t seed, const int32_t *tokens, int n,
                   const float *logits);
/* Queue the files that found the SSD writer's queue full (or the tier
 * paused), while there is room; the number still waiting. */
int hr_lcache_poll(hr_lcache *lc);
/* The logits after tokens[0..n) into out (n_vocab floats): true on a hit. */
bool hr_lcache_get(hr_lcache *lc, uint64_t seed, const int32_t *tokens, int n, float *out);

#endif
