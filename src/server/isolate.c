/* --isolate (isolate.h): the parent's supervisor and relay, and the child's
 * loop. The child is the same binary (`serve ... --engine-fd N`), so a
 * restart is a fresh process: nothing of the dead one's memory is trusted.
 *
 * Frames: u32 type, u32 id, u32 length, then length bytes.
 *   parent -> child  REQ     method NUL url NUL body
 *                    CANCEL  (the client left)
 *                    PING
 *   child -> parent  READY   (loaded; serving)
 *                    FAIL    text: why it could not load (then it exits)
 *                    REPLY   u32 status, u32 retry_after, content type NUL, body
 *                    STREAM  (an event stream begins)
 *                    DATA    stream bytes
 *                    END     u8 clean
 *                    PONG */
#include "server/isolate.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "server/drive.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>


#define PING_EVERY_S 1.0
#define BACKOFF_MIN_S 0.1
#define BACKOFF_MAX_S 10.0
#define STABLE_S 30.0       /* a child up this long resets the backoff */

/* ---- the parent ----------------------------------------------------------------------------- */

typedef struct pending {
    struct pending *next;
    uint32_t id;
    hr_outbox *box;
    char url[128];       /* the error's shape when the child dies */
    bool streaming;      /* the stream's head went out */
} pending;

struct hr_child {
    hr_server *s;
    char *const *argv;
    pthread_mutex_t mu;   /* everything below but wmu's writes */
    pthread_cond_t cv;
    pthread_mutex_t wmu;  /* writes to fd */
    pid_t pid;
    int fd;               /* -1 while no child serves */
    bool up, stopping, first_done;
    char down[256];       /* why it does not serve ("" when up) */
    char first_err[256];  /* the first child's failure, for hr__child_start */
    pending *reqs;
    uint32_t next_id;
    pthread_t thread;
};

static pid_t spawn(hr_child *ch, int *fd_out) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
        return -1;
    int n = 0;
    while (ch->argv[n])
        n++;
    char fdarg[16];
    snprintf(fdarg, sizeof fdarg, "%d", sv[1]);
    char **av = calloc((size_t)n + 3, sizeof *av);
    if (!av) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    for (int i = 0; i < n; i++)
        av[i] = ch->argv[i];
    av[n] = "--engine-fd";
    av[n + 1] = fdarg;
    pid_t pid = fork();
    if (pid == 0) { /* async-signal-safe calls only until exec */
        int fl = fcntl(sv[1], F_GETFD);
        fcntl(sv[1], F_SETFD, fl & ~FD_CLOEXEC);
        setpgid(0, 0); /* the terminal's Ctrl-C is the parent's to handle */
        sigset_t none;
        sigemptyset(&none);
        pthread_sigmask(SIG_SETMASK, &none, NULL);
        execv("/proc/self/exe", av);
        _exit(127);
    }
    free(av);
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        return -1;
    }
    /* a child stopped mid-frame (or too stopped to read) must not hold a
     * read or a write of ours past --engine-timeout */
    double t = ch->s->o.engine_timeout;
    struct timeval tv = {.tv_sec = (time_t)t, .tv_usec = (suseconds_t)((t - (double)(time_t)t) * 1e6)};
    setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(sv[0], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    *fd_out = sv[0];
    return pid;
}

/* Remove and return the request with id (mu held), or NULL. */
static pending *take(hr_child *ch, uint32_t id) {
    for (pending **p = &ch->reqs; *p; p = &(*p)->next)
        if ((*p)->id == id) {
            pending *r = *p;
            *p = r->next;
            return r;
        }
    return NULL;
}

static pending *find(hr_child *ch, uint32_t id) {
    for (pending *p = ch->reqs; p; p = p->next)
        if (p->id == id)
            return p;
    return NULL;
}

/* End a request the child will not answer: a 503 before the head, else a
 * last error event in its API's shape. */
static void fail_pending(hr_server *s, pending *p, const char *why) {
    if (!p->streaming) {
        hr_reply r = hr__error_reply(503, "server_error", NULL, "%s", why);
        hr__outbox_reply(p->box, hr__shaped(s, p->url, r));
    } else {
        bool anthropic = !strncmp(p->url, "/v1/messages", 12);
        json_t *e = anthropic ? json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
                                          "api_error", "message", why)
                              : json_pack("{s:{s:s,s:s,s:n,s:n}}", "error", "message", why,
                                          "type", "server_error", "param", "code");
        char *j = hr__dump(e);
        char ev[1024];
        int n = snprintf(ev, sizeof ev, "%sdata: %s\n\n", anthropic ? "event: error\n" : "",
                         j ? j : "{}");
        free(j);
        hr__outbox_write(p->box, ev, (size_t)n < sizeof ev ? (size_t)n : sizeof ev - 1, false);
        hr__outbox_end(p->box, true);
    }
    hr__outbox_release(p->box);
    free(p);
}

/* One frame from the child. */
static void on_frame(hr_child *ch, uint32_t type, uint32_t id, char *p, uint32_t len) {
    pthread_mutex_lock(&ch->mu);
    pending *r = type == F_REPLY || type == F_END ? take(ch, id) : find(ch, id);
    if (r && type == F_STREAM)
        r->streaming = true;
    pthread_mutex_unlock(&ch->mu);
    if (!r)
        return; /* a request already failed, or PONG */
    switch (type) {
    case F_REPLY: {
        uint32_t st = 500, ra = 0;
        size_t off = 8;
        if (len >= 8) {
            memcpy(&st, p, 4);
            memcpy(&ra, p + 4, 4);
        }
        const char *ctype = len > off ? p + off : "";
        size_t cl = strnlen(ctype, len > off ? len - off : 0);
        off += cl + 1;
        hr_reply rep = {.status = st, .retry_after = ra};
        if (cl && strcmp(ctype, "application/json")) {
            /* the types the routes use, as static strings */
            rep.ctype = !strncmp(ctype, "text/plain", 10) ? "text/plain; version=0.0.4; charset=utf-8"
                                                          : NULL;
        }
        rep.body = strndup(off <= len ? p + off : "", off <= len ? len - off : 0);
        hr__outbox_reply(r->box, rep);
        hr__outbox_release(r->box);
        free(r);
        break;
    }
    case F_STREAM:
        hr__outbox_stream(r->box);
        break;
    case F_DATA: /* the client left, or reads too slowly to keep up: stop it */
        if (hr__outbox_write(r->box, p, len, false) < 0)
            hr__frame_send(ch->fd, &ch->wmu, F_CANCEL, id, NULL, 0, NULL, 0, NULL, 0);
        break;
    case F_END:
        hr__outbox_end(r->box, len >= 1 && p[0]);
        hr__outbox_release(r->box);
        free(r);
        break;
    default:
        break;
    }
}

/* Serve one child until it dies or stalls; returns why it ended. */
static void relay(hr_child *ch, int fd, pid_t pid, bool *reaped, char *why, size_t n) {
    double last = hr_now(), ping = last;
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int k = poll(&pf, 1, 200);
        double now = hr_now();
        if (ch->stopping) {
            snprintf(why, n, "the server is stopping");
            return;
        }
        if (k > 0) {
            uint32_t type, id, len;
            char *p;
            int rc = hr__frame_recv(fd, &type, &id, &p, &len);
            if (rc == -2) {
                snprintf(why, n, "the engine process stopped answering mid-frame for %g s (--engine-timeout)",
                         ch->s->o.engine_timeout);
                return;
            }
            if (rc) {
                int st = 0;
                pid_t w = 0;
                for (int i = 0; i < 50 && (w = waitpid(pid, &st, WNOHANG)) == 0; i++)
                    usleep(10000); /* a dying child's status comes just after its EOF */
                *reaped = w == pid;
                if (w == pid && WIFSIGNALED(st))
                    snprintf(why, n, "the engine process died (signal %d)", WTERMSIG(st));
                else if (w == pid)
                    snprintf(why, n, "the engine process exited (status %d)", WEXITSTATUS(st));
                else
                    snprintf(why, n, "the engine process closed its connection");
                return;
            }
            last = now;
            on_frame(ch, type, id, p, len);
            free(p);
        }
        if (now - last > ch->s->o.engine_timeout) {
            snprintf(why, n, "the engine process stopped answering for %g s (--engine-timeout)",
                     ch->s->o.engine_timeout);
            return;
        }
        if (now - ping >= PING_EVERY_S) {
            ping = now;
            hr__frame_send(fd, &ch->wmu, F_PING, 0, NULL, 0, NULL, 0, NULL, 0);
        }
    }
}

/* Wait for the first frame of a new child: READY, or FAIL (its load error). */
static bool await_ready(hr_child *ch, int fd, char *why, size_t n) {
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int k = poll(&pf, 1, 200);
        if (ch->stopping) {
            snprintf(why, n, "the server is stopping");
            return false;
        }
        if (k <= 0)
            continue; /* loading a model takes what it takes */
        uint32_t type, id, len;
        char *p;
        if (hr__frame_recv(fd, &type, &id, &p, &len)) {
            snprintf(why, n, "the engine process exited while loading");
            return false;
        }
        bool ok = type == F_READY;
        if (!ok)
            snprintf(why, n, "%s", type == F_FAIL ? p : "the engine process spoke out of turn");
        free(p);
        return ok;
    }
}

static void sleep_unless_stopping(hr_child *ch, double s) {
    double until = hr_now() + s;
    while (!ch->stopping && hr_now() < until)
        usleep(20000);
}

static void *supervise(void *arg) {
    hr_child *ch = arg;
    double backoff = BACKOFF_MIN_S;
    while (!ch->stopping) {
        char why[256] = "";
        int fd = -1;
        bool reaped = false;
        pid_t pid = spawn(ch, &fd);
        if (pid < 0) {
            snprintf(why, sizeof why, "cannot start the engine process: %s", strerror(errno));
        } else if (await_ready(ch, fd, why, sizeof why)) {
            double t_up = hr_now();
            pthread_mutex_lock(&ch->mu);
            ch->fd = fd;
            ch->pid = pid;
            ch->up = ch->first_done = true;
            ch->down[0] = 0;
            pthread_cond_broadcast(&ch->cv);
            pthread_mutex_unlock(&ch->mu);
            hr_log(HR_LOG_INFO, "engine process %d serving", (int)pid);
            relay(ch, fd, pid, &reaped, why, sizeof why);
            if (hr_now() - t_up > STABLE_S)
                backoff = BACKOFF_MIN_S;
        }
        /* whatever was in flight ends now, with why (pid reaped below, unless
     * relay already did) */
        pthread_mutex_lock(&ch->mu);
        ch->up = false;
        ch->fd = -1;
        pending *list = ch->reqs;
        ch->reqs = NULL;
        if (!ch->first_done) { /* the first child failed: hr__child_start says why */
            snprintf(ch->first_err, sizeof ch->first_err, "%s", why);
            ch->first_done = ch->stopping = true;
        }
        snprintf(ch->down, sizeof ch->down, "%s; restarting in %.1f s", why, backoff);
        pthread_cond_broadcast(&ch->cv);
        pthread_mutex_unlock(&ch->mu);
        while (list) {
            pending *next = list->next;
            fail_pending(ch->s, list, why);
            list = next;
        }
        if (pid > 0 && !reaped && ch->stopping) { /* it sees its input end and exits */
            int st = 0;
            for (int i = 0; i < 300 && !reaped; i++) {
                reaped = waitpid(pid, &st, WNOHANG) == pid;
                if (!reaped)
                    usleep(10000);
            }
            if (reaped && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
                hr_log(HR_LOG_WARN, "the engine process ended with status %d", st);
        }
        if (pid > 0 && !reaped) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        if (fd >= 0) {
            pthread_mutex_lock(&ch->wmu); /* no writer is inside */
            close(fd);
            pthread_mutex_unlock(&ch->wmu);
        }
        if (ch->stopping)
            break;
        hr_log(HR_LOG_WARN, "%s; restarting in %.1f s", why, backoff);
        sleep_unless_stopping(ch, backoff);
        backoff = backoff * 2 < BACKOFF_MAX_S ? backoff * 2 : BACKOFF_MAX_S;
    }
    return NULL;
}

int hr__child_start(hr_server *s, char *const *argv, hr_error *err) {
    if (!argv || !argv[0])
        return hr_err(err, HR_EINVAL, "--isolate needs the command line to start the engine");
    hr_child *ch = calloc(1, sizeof *ch);
    if (!ch)
        return hr_err(err, HR_ENOMEM, "out of memory");
    ch->s = s;
    ch->argv = argv;
    ch->fd = -1;
    ch->next_id = 1;
    snprintf(ch->down, sizeof ch->down, "the engine process is starting");
    pthread_mutex_init(&ch->mu, NULL);
    pthread_mutex_init(&ch->wmu, NULL);
    pthread_cond_init(&ch->cv, NULL);
    if (pthread_create(&ch->thread, NULL, supervise, ch)) {
        free(ch);
        return hr_err(err, HR_EIO, "cannot start the engine's supervisor thread");
    }
    pthread_mutex_lock(&ch->mu);
    while (!ch->first_done)
        pthread_cond_wait(&ch->cv, &ch->mu);
    bool failed = ch->first_err[0] != 0;
    pthread_mutex_unlock(&ch->mu);
    if (failed) {
        int rc = hr_err(err, HR_EIO, "%s", ch->first_err);
        pthread_join(ch->thread, NULL);
        pthread_mutex_destroy(&ch->mu);
        pthread_mutex_destroy(&ch->wmu);
        pthread_cond_destroy(&ch->cv);
        free(ch);
        return rc;
    }
    s->child = ch;
    return 0;
}

void hr__child_stop(hr_child *ch) {
    if (!ch)
        return;
    pthread_mutex_lock(&ch->mu);
    ch->stopping = true;
    if (ch->fd >= 0) /* the child sees the end of its input and exits */
        shutdown(ch->fd, SHUT_RDWR);
    pthread_mutex_unlock(&ch->mu);
    pthread_join(ch->thread, NULL);
    pthread_mutex_destroy(&ch->mu);
    pthread_mutex_destroy(&ch->wmu);
    pthread_cond_destroy(&ch->cv);
    free(ch);
}

bool hr__child_submit(hr_child *ch, hr_outbox *b, const char *method, const char *url,
                      const char *body, size_t len) {
    pending *p = calloc(1, sizeof *p);
    if (!p)
        return false;
    p->box = b;
    snprintf(p->url, sizeof p->url, "%s", url);
    pthread_mutex_lock(&ch->mu);
    int fd = ch->fd;
    if (!ch->up || fd < 0) {
        pthread_mutex_unlock(&ch->mu);
        free(p);
        return false;
    }
    p->id = ch->next_id++;
    p->next = ch->reqs;
    ch->reqs = p;
    uint32_t id = p->id;
    pthread_mutex_unlock(&ch->mu);
    /* a failed write means the child is dying: the supervisor fails p */
    hr__frame_send(fd, &ch->wmu, F_REQ, id, method, strlen(method) + 1, url, strlen(url) + 1, body,
               len);
    return true;
}

void hr__child_cancel(hr_child *ch, hr_outbox *b) {
    pthread_mutex_lock(&ch->mu);
    uint32_t id = 0;
    for (pending *p = ch->reqs; p; p = p->next)
        if (p->box == b)
            id = p->id;
    int fd = ch->fd;
    pthread_mutex_unlock(&ch->mu);
    if (id && fd >= 0)
        hr__frame_send(fd, &ch->wmu, F_CANCEL, id, NULL, 0, NULL, 0, NULL, 0);
}

const char *hr__child_down(hr_child *ch) {
    /* read without the lock: a torn message is still a message, and
     * /health must never wait */
    return ch->up ? NULL : ch->down;
}

