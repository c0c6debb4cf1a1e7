/* LD_PRELOAD shim for tests/e2e/server.sh: the main thread's
 * epoll_ctl(EPOLL_CTL_DEL) waits 100 ms first. libmicrohttpd's
 * MHD_quiesce_daemon removes the listening socket from each worker's epoll
 * set from the main thread while a worker woken by a connection may remove
 * it too; the loser's ENOENT aborts the process. The delay makes the main
 * thread lose every time a worker wakes meanwhile, so a shutdown path that
 * quiesces fails the test instead of once in a few hundred stops. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev) {
    int (*real)(int, int, int, struct epoll_event *) =
        (int (*)(int, int, int, struct epoll_event *))dlsym(RTLD_NEXT, "epoll_ctl");
    if (op == EPOLL_CTL_DEL && syscall(SYS_gettid) == getpid()) {
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
    return real(epfd, op, fd, ev);
}
