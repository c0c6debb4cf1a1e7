/* --isolate's frames (isolate.h): a whole frame round-trips; a peer that
 * stops mid-frame ends the read at the socket's timeout (-2) instead of
 * holding it forever; a send that cannot finish shuts the stream down. */
#include "server/isolate.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void pair(int sv[2], long timeout_us) {
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    struct timeval tv = {.tv_sec = 0, .tv_usec = timeout_us};
    setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(sv[0], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void test_round_trip(void **state) {
    (void)state;
    int sv[2];
    pair(sv, 200000);
    assert_int_equal(hr__frame_send(sv[1], &mu, F_DATA, 7, "ab", 2, NULL, 0, "cde", 3), 0);
    uint32_t type, id, len;
    char *p;
    assert_int_equal(hr__frame_recv(sv[0], &type, &id, &p, &len), 0);
    assert_int_equal(type, F_DATA);
    assert_int_equal(id, 7);
    assert_int_equal(len, 5);
    assert_string_equal(p, "abcde");
    free(p);
    close(sv[0]);
    close(sv[1]);
}

static void test_stopped_mid_frame(void **state) {
    (void)state;
    int sv[2];
    pair(sv, 200000);
    uint32_t h[3] = {F_DATA, 1, 100}; /* a header promising 100 bytes, then 10 */
    assert_int_equal(write(sv[1], h, sizeof h), (ssize_t)sizeof h);
    assert_int_equal(write(sv[1], "0123456789", 10), 10);
    uint32_t type, id, len;
    char *p = NULL;
    double t0 = now();
    assert_int_equal(hr__frame_recv(sv[0], &type, &id, &p, &len), -2);
    double dt = now() - t0;
    assert_true(dt >= 0.15 && dt < 2);
    assert_null(p);
    close(sv[1]); /* gone, not stopped: -1 */
    assert_int_equal(hr__frame_recv(sv[0], &type, &id, &p, &len), -1);
    close(sv[0]);
}

static void test_send_timeout_shuts_down(void **state) {
    (void)state;
    int sv[2];
    pair(sv, 100000);
    size_t n = 1 << 24; /* far past the socket buffer: the peer never reads */
    char *big = calloc(1, n);
    assert_non_null(big);
    assert_int_equal(hr__frame_send(sv[0], &mu, F_DATA, 2, big, n, NULL, 0, NULL, 0), -1);
    free(big);
    /* the half-written frame is the last thing the peer sees */
    uint32_t type, id, len;
    char *p = NULL;
    assert_int_equal(hr__frame_recv(sv[1], &type, &id, &p, &len), -1);
    assert_int_equal(hr__frame_send(sv[0], &mu, F_PING, 0, NULL, 0, NULL, 0, NULL, 0), -1);
    close(sv[0]);
    close(sv[1]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_stopped_mid_frame),
        cmocka_unit_test(test_send_timeout_shuts_down),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
