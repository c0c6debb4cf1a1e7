/* hearth route: a prefix-aware router in front of hearth servers
 * (docs/routing.md). The HTTP side and its limits are serve's. */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/log.h"
#include "route/router.h"
#include "server/server.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char usage[] =
    "usage: hearth route --replicas URL,URL,... [--host H] [--port P] [--policy prefix|round-robin] "
    "[--load-bound N] [--health-interval S] ...";

int hr_cmd_route(int argc, char **argv) {
    const char *replicas = NULL, *host = "127.0.0.1", *policy = "prefix", *log_level = NULL,
               *admin_token = NULL, *origins = "*";
    long port = 8080, load_bound = 4, chunk = 128, entries = 65536, vnodes = 64;
    long max_conns = 0, max_requests = 0, max_body_mb = 16;
    double health = 1, connect_timeout = 2, timeout = 0, drain_timeout = -1;
    int admin_remote = 0;
    const hr_opt opts[] = {
        {"replicas", HR_OPT_STR, &replicas, "the hearth servers: http://HOST:PORT,... (1 to 64)"},
        {"host", HR_OPT_STR, &host, "address to listen on (default 127.0.0.1)"},
        {"port", HR_OPT_INT, &port, "port (default 8080; 0 = any free port)"},
        {"policy", HR_OPT_STR, &policy, "prefix (default: the replica holding the longest prefix) or round-robin"},
        {"load-bound", HR_OPT_INT, &load_bound, "requests a chosen replica may run beyond the least busy one before the least busy one is taken (default 4)"},
        {"chunk-bytes", HR_OPT_INT, &chunk, "bytes of the canonical prompt per prefix chunk (default 128)"},
        {"table-entries", HR_OPT_INT, &entries, "prefix chunks remembered, least recently used out first (default 65536)"},
        {"vnodes", HR_OPT_INT, &vnodes, "points per replica on the hash ring (default 64)"},
        {"health-interval", HR_OPT_FLOAT, &health, "seconds between two polls of each replica's /health (default 1)"},
        {"connect-timeout", HR_OPT_FLOAT, &connect_timeout, "seconds to connect to a replica (default 2)"},
        {"allowed-origins", HR_OPT_STR, &origins, "CORS origins (default *)"},
        {"max-body-mb", HR_OPT_INT, &max_body_mb, "largest request body in MiB (default 16)"},
        {"max-connections", HR_OPT_INT, &max_conns, "open connections at most (default 4096)"},
        {"timeout", HR_OPT_FLOAT, &timeout, "seconds for a whole request to arrive, and for an idle connection (default 30)"},
        {"max-requests", HR_OPT_INT, &max_requests, "generation requests forwarded at once at most; beyond, 429 (default 256)"},
        {"drain-timeout", HR_OPT_FLOAT, &drain_timeout, "seconds a drain (SIGTERM, POST /admin/drain) waits for running requests (default 30)"},
        {"admin-token", HR_OPT_STR, &admin_token, "Bearer token the admin routes (/admin/*) require"},
        {"admin-remote", HR_OPT_FLAG, &admin_remote, "admin routes answer clients off loopback too"},
        {"log-level", HR_OPT_STR, &log_level, "DEBUG, INFO, WARNING, ERROR or CRITICAL"},
    };
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0], usage, &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    hr_log_set_level(HR_LOG_INFO);
    if (log_level) {
        int lv = hr_log_parse_level(log_level);
        if (lv < 0)
            return hr_cli_fail(&(hr_error){.msg = "--log-level must be DEBUG, INFO, WARNING, ERROR or CRITICAL"});
        hr_log_set_level((hr_log_level)lv);
    }
    if (!replicas || !replicas[0])
        return hr_cli_fail(&(hr_error){.msg = "--replicas: give the servers, http://HOST:PORT,..."});
    hr_route_policy pol;
    if (!strcmp(policy, "prefix"))
        pol = HR_ROUTE_PREFIX;
    else if (!strcmp(policy, "round-robin"))
        pol = HR_ROUTE_ROUND_ROBIN;
    else
        return hr_cli_fail(&(hr_error){.msg = "--policy must be prefix or round-robin"});
    if (port < 0 || port > 65535 || load_bound < 1 || load_bound > 100000 || chunk < 16 ||
        chunk > 65536 || entries < 1 || entries > 100000000 || vnodes < 1 || vnodes > 4096 ||
        health <= 0 || connect_timeout <= 0 || max_body_mb < 1 || max_conns < 0 ||
        max_conns > 1000000 || timeout < 0 || max_requests < 0 || max_requests > 100000)
        return hr_cli_fail(&(hr_error){.msg = "a numeric flag is out of range (see --help)"});
    /* the replicas: a comma list */
    char *list = strdup(replicas);
    const char *urls[64];
    int n = 0;
    for (char *save = NULL, *t = list ? strtok_r(list, ",", &save) : NULL; t;
         t = strtok_r(NULL, ",", &save)) {
        if (n == 64) {
            free(list);
            return hr_cli_fail(&(hr_error){.msg = "--replicas: 64 at most"});
        }
        urls[n++] = t;
    }
    hr_router_opts ro = {.replicas = urls, .n_replicas = n, .policy = pol,
                         .chunk_bytes = (size_t)chunk, .table_entries = (int)entries,
                         .vnodes = (int)vnodes, .load_bound = (int)load_bound,
                         .health_interval = health, .connect_timeout = connect_timeout};
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    hr_router *r = NULL;
    if ((rc = hr_router_new(&r, &ro, &err))) {
        free(list);
        return hr_cli_fail(&err);
    }
    hr_server_opts so = {.host = host, .port = (int)port, .allowed_origins = origins,
                         .max_body = (size_t)max_body_mb << 20,
                         .max_connections = (int)max_conns, .timeout = timeout,
                         .max_requests = (int)max_requests, .request_timeout = 0,
                         .drain_timeout = drain_timeout, .admin_token = admin_token,
                         .admin_remote = admin_remote, .engine_fd = -1,
                         .front = hr_router_front(r)};
    hr_server *s = NULL;
    if ((rc = hr_server_new(&s, &so, &err))) {
        hr_router_free(r);
        free(list);
        return hr_cli_fail(&err);
    }
    hr_router_set_server(r, s);
    if ((rc = hr_server_start(s, &err))) {
        hr_server_free(s);
        hr_router_free(r);
        free(list);
        return hr_cli_fail(&err);
    }
    const char *lb = strchr(host, ':') && host[0] != '[' ? "[" : "";
    const char *rb = lb[0] ? "]" : "";
    hr_log(HR_LOG_INFO, "routing to %d replicas (%d healthy), policy %s", n, hr_router_healthy(r),
           policy);
    fprintf(stderr, "hearth: listening on http://%s%s%s:%d\n", lb, host, rb, hr_server_port(s));
    int sig = -1;
    struct timespec tick = {.tv_nsec = 100000000L};
    while (sig < 0 && !hr_server_draining(s))
        sig = sigtimedwait(&set, NULL, &tick);
    if (sig == SIGTERM || sig < 0) {
        hr_log(HR_LOG_INFO, "%s: draining", sig < 0 ? "POST /admin/drain" : "SIGTERM");
        hr_server_drain(s);
    }
    hr_server_stop(s);
    hr_server_free(s);
    hr_router_free(r);
    free(list);
    return 0;
}
