/* hearth route: an OpenAI-compatible front over N hearth servers
 * (replicas), docs/routing.md. Each generation request goes to the replica
 * whose prompt cache most likely holds its longest prefix (the last
 * replica that served a request sharing the most whole chunks of it, when
 * that covers its conversation's first user message; else its
 * conversation's place on a consistent-hash ring), unless that replica is
 * more than load_bound requests busier than the least busy one; a replica
 * must be healthy (its /health polled) and serve the request's model (its
 * /v1/models). A replica that fails before the first byte is replaced by
 * another, once. The HTTP side is the server's (server/front.h). */
#ifndef HR_ROUTE_ROUTER_H
#define HR_ROUTE_ROUTER_H

#include "server/front.h"
#include "server/server.h"

typedef struct hr_router hr_router;

typedef enum hr_route_policy {
    HR_ROUTE_PREFIX,      /* the prefix-aware placement above */
    HR_ROUTE_ROUND_ROBIN, /* the next healthy replica (a baseline for benchmarks) */
} hr_route_policy;

typedef struct hr_router_opts {
    const char *const *replicas; /* base URLs, "http://host:port" (a trailing / is cut) */
    int n_replicas;              /* 1..64 */
    hr_route_policy policy;
    size_t chunk_bytes;          /* prefix chunk; 0: 128 */
    int table_entries;           /* chunk hashes remembered; 0: 65536 */
    int vnodes;                  /* ring points per replica; 0: 64 */
    int load_bound;              /* in-flight excess over the least busy; 0: 4 */
    double health_interval;      /* s between /health polls; 0: 1 */
    double connect_timeout;      /* s; 0: 2 */
} hr_router_opts;

/* The router and its health checker (running at once: every replica is
 * polled before this returns). */
int hr_router_new(hr_router **out, const hr_router_opts *o, hr_error *err);
/* The front the HTTP server hands requests to (hr_server_opts.front);
 * server: that server (for its drain state), set before it starts. */
const hr_front *hr_router_front(hr_router *r);
void hr_router_set_server(hr_router *r, hr_server *s);
/* Replicas healthy now. */
int hr_router_healthy(hr_router *r);
void hr_router_free(hr_router *r);

#endif
