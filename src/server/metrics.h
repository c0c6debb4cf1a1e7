/* Counters the server keeps for /metrics beside the engine's: replies by
 * route and status, and latency histograms of the generations. Lock-free
 * (atomics), zero-initialized, written from any HTTP thread. */
#ifndef HR_SERVER_METRICS_H
#define HR_SERVER_METRICS_H

#include <stdatomic.h>

#define HR_METRIC_ROUTES 13 /* the served paths and "other" (metrics.c) */
#define HR_METRIC_CODES 8   /* the statuses the server sends and "other" */
#define HR_METRIC_BUCKETS 14

typedef struct hr_histogram {
    _Atomic long count[HR_METRIC_BUCKETS]; /* per bucket (not cumulative); last: +Inf */
    _Atomic long long sum_ns;
    _Atomic long n;
} hr_histogram;

typedef struct hr_metrics {
    _Atomic long http[HR_METRIC_ROUTES][HR_METRIC_CODES];
    hr_histogram ttft; /* submit to the first token, as the HTTP thread receives it */
    hr_histogram itl;  /* between two tokens of a request, likewise */
} hr_metrics;

/* One reply to url with status. */
void hr__metrics_http(hr_metrics *m, const char *url, unsigned status);
/* One time to first token / inter-token latency, in seconds. */
void hr__metrics_ttft(hr_metrics *m, double s);
void hr__metrics_itl(hr_metrics *m, double s);

#endif
