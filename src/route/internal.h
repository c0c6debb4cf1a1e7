/* Shared by the router's files; not an API. */
#ifndef HR_ROUTE_INTERNAL_H
#define HR_ROUTE_INTERNAL_H

#include "route/lru.h"
#include "route/prefix.h"
#include "route/ring.h"
#include "route/router.h"
#include "route/upstream.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define HR_ROUTE_MAX_MODELS 32

typedef struct hr_replica {
    char url[512];             /* base, no trailing slash */
    _Atomic int up;            /* /health answered 200 (and no forward failed since) */
    _Atomic int in_flight;     /* requests forwarded and not finished */
    _Atomic long routed;       /* generation requests sent here */
    _Atomic long failed;       /* forwards that got no answer */
    pthread_mutex_t mu;        /* guards what follows */
    char models[HR_ROUTE_MAX_MODELS][128]; /* its /v1/models ids */
    int n_models;
    char why[160];             /* why it is down */
} hr_replica;

/* How a generation request's replica was chosen (for /stats, /metrics). */
typedef enum hr_route_how {
    HR_HOW_PREFIX,  /* a known prefix */
    HR_HOW_RING,    /* a new conversation: the ring */
    HR_HOW_LOAD,    /* the choice was too busy: the least busy */
    HR_HOW_RR,      /* --policy round-robin */
    HR_HOW_STICKY,  /* previous_response_id: the replica that stored it */
    HR_HOW_N
} hr_route_how;

struct hr_router {
    hr_router_opts o;
    hr_replica *rep;
    int n;
    hr_ring *ring;
    pthread_mutex_t mu;        /* guards table */
    hr_lru *table;             /* chunk hash (or response id hash) -> replica */
    hr_front front;
    hr_server *server;
    _Atomic unsigned rr;
    _Atomic long how[HR_HOW_N];
    _Atomic long retries, no_replica, broken;
    double t_start;
    /* the health checker */
    pthread_t checker;
    bool checker_on, stop;
    pthread_mutex_t cmu;
    pthread_cond_t cv;
};

/* info.c: the router's own routes (GET /health, /v1/models, /stats,
 * /metrics); false when url is none of them. */
bool hr__route_info(hr_router *r, hr_outbox *box, const hr_front_req *rq);
/* Whether replica i serves model ("" : any model). */
bool hr__replica_serves(hr_replica *p, const char *model);

#endif
