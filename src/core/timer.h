#ifndef HR_CORE_TIMER_H
#define HR_CORE_TIMER_H

#include <time.h>

/* Monotonic seconds. */
static inline double hr_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds of CPU time of the calling thread (time spent descheduled on a
 * busy machine does not count). */
static inline double hr_thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
