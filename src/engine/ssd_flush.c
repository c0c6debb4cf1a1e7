/* The engine's side of the SSD tier's writes: the loop's polls (the
 * writer's finished blocks given back, the writes that found its queue full
 * queued again), and at a graceful stop the drain of those still waiting,
 * so that a server stopped right after a long prompt keeps all of it on
 * disk. Engine thread (and hr_engine_free, after it). */
#include "core/log.h"
#include "core/timer.h"
#include "engine/engine_int.h"

#include <time.h>

int hr__ssd_poll(hr_engine *e, double now) {
    if (e->pcache)
        hr_pcache_poll(e->pcache, now);
    if (e->pcq)
        hr_pcache_poll(e->pcq, now);
    return hr_pcache_pending(e->pcache) + hr_pcache_pending(e->pcq) + hr_lcache_poll(e->lcache);
}

/* paused after a write error (its writes wait for the retry, or are lost) */
static bool paused(const hr_ssd *s) {
    hr_ssd_state st = {0};
    if (s)
        hr_ssd_status(s, &st);
    return st.paused;
}

/* The writes still waiting for room in a queue: a long prompt indexes more
 * blocks at once than the queue holds (QUEUE, ssd_int.h), its logits after
 * them. Queued as the writer makes room, until none is left, a tier pauses
 * after an error, or nothing moves for 10 s. */
void hr__ssd_drain(hr_engine *e) {
    int left = -1;
    double since = hr_now();
    for (;;) {
        int n = hr__ssd_poll(e, 0);
        if (n == 0 || paused(e->ssd) || paused(e->ssdq))
            return;
        if (n != left) {
            left = n;
            since = hr_now();
        } else if (hr_now() - since > 10) {
            hr_log(HR_LOG_WARN, "SSD cache: %d writes not done at the stop", n);
            return;
        }
        nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
    }
}
