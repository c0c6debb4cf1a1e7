/* The router's placement pieces: the hash ring (spread, stability when a
 * replica leaves, independence of the replicas' order, eligibility), the
 * bounded LRU table (values, recency, eviction), and a request's prefix
 * chunks (a later turn extends an earlier one's chunks; the conversation's
 * key ignores what follows the first user message; bad bodies refused). */
#include "route/lru.h"
#include "route/prefix.h"
#include "route/ring.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- ring ---- */

static const char *const names[4] = {"http://127.0.0.1:8001", "http://127.0.0.1:8002",
                                     "http://127.0.0.1:8003", "http://127.0.0.1:8004"};

static void test_ring_spread(void **state) {
    (void)state;
    hr_ring *r = hr_ring_new(names, 4, 64);
    assert_non_null(r);
    int count[4] = {0};
    for (uint64_t k = 0; k < 4000; k++)
        count[hr_ring_pick(r, XXH3_64bits(&k, sizeof k), 0xf)]++;
    for (int i = 0; i < 4; i++) /* 1000 each in expectation: no replica starved or flooded */
        assert_true(count[i] > 600 && count[i] < 1400);
    assert_int_equal(hr_ring_pick(r, 1, 0), -1);
    for (uint64_t k = 0; k < 100; k++)
        assert_int_equal(hr_ring_pick(r, k * 0x9e3779b97f4a7c15ull, 0x4), 2);
    hr_ring_free(r);
}

static void test_ring_stable(void **state) {
    (void)state;
    hr_ring *r = hr_ring_new(names, 4, 64);
    const char *rev[4] = {names[3], names[2], names[1], names[0]};
    hr_ring *q = hr_ring_new(rev, 4, 64);
    int moved = 0;
    for (uint64_t k = 0; k < 2000; k++) {
        uint64_t key = XXH3_64bits(&k, sizeof k);
        int a = hr_ring_pick(r, key, 0xf), b = hr_ring_pick(q, key, 0xf);
        assert_int_equal(3 - b, a); /* the same replica, whatever order they were given in */
        int c = hr_ring_pick(r, key, 0xf & ~0x2); /* replica 1 out */
        if (a != 1)
            assert_int_equal(c, a); /* only replica 1's keys move */
        else
            moved++;
        assert_int_not_equal(c, 1);
    }
    assert_true(moved > 0);
    hr_ring_free(r);
    hr_ring_free(q);
    assert_null(hr_ring_new(names, 0, 64));
    hr_ring_free(NULL);
}

/* ---- lru ---- */

static void test_lru(void **state) {
    (void)state;
    hr_lru *m = hr_lru_new(3);
    assert_non_null(m);
    assert_int_equal(hr_lru_get(m, 1), -1);
    hr_lru_put(m, 1, 10);
    hr_lru_put(m, 2, 20);
    hr_lru_put(m, 3, 30);
    assert_int_equal(hr_lru_get(m, 1), 10); /* 1 is now the most recent: 2 goes next */
    hr_lru_put(m, 4, 40);
    assert_int_equal(hr_lru_size(m), 3);
    assert_int_equal(hr_lru_get(m, 2), -1);
    assert_int_equal(hr_lru_get(m, 3), 30);
    assert_int_equal(hr_lru_get(m, 4), 40);
    hr_lru_put(m, 1, 11); /* update in place */
    assert_int_equal(hr_lru_size(m), 3);
    assert_int_equal(hr_lru_get(m, 1), 11);
    for (uint64_t k = 100; k < 10000; k++) /* many evictions through one small table */
        hr_lru_put(m, k, (int)k);
    assert_int_equal(hr_lru_get(m, 9999), 9999);
    assert_int_equal(hr_lru_get(m, 9997), 9997);
    assert_int_equal(hr_lru_get(m, 9996), -1);
    assert_null(hr_lru_new(0));
    hr_lru_free(m);
    hr_lru_free(NULL);
}

/* ---- prefix ---- */

static char *chat(int turns, const char *first) {
    static char buf[8192];
    int n = snprintf(buf, sizeof buf,
                     "{\"model\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": "
                     "\"%0200d\"}, {\"role\": \"user\", \"content\": \"%s\"}",
                     0, first);
    for (int t = 1; t < turns; t++)
        n += snprintf(buf + n, sizeof buf - (size_t)n,
                      ", {\"content\": \"answer %d with some words in it\", \"role\": "
                      "\"assistant\"}, {\"role\": \"user\", \"content\": \"turn %d asks more\"}",
                      t, t);
    snprintf(buf + n, sizeof buf - (size_t)n, "]}");
    return buf;
}

static void test_prefix_turns(void **state) {
    (void)state;
    hr_prefix *a = malloc(sizeof *a), *b = malloc(sizeof *b), *c = malloc(sizeof *c);
    const char *u = "/v1/chat/completions";
    char *s = chat(1, "first question");
    assert_true(hr_prefix_of(u, s, strlen(s), 32, a));
    s = chat(4, "first question");
    assert_true(hr_prefix_of(u, s, strlen(s), 32, b));
    assert_true(a->n_chunks > 6 && b->n_chunks > a->n_chunks);
    for (int i = 0; i < a->n_chunks; i++) /* the later turn's chunks extend the first's */
        assert_true(a->chunk[i] == b->chunk[i]);
    assert_true(a->conv_key == b->conv_key && a->conv_chunk == b->conv_chunk);
    assert_string_equal(b->model, "m");
    s = chat(4, "another question");
    assert_true(hr_prefix_of(u, s, strlen(s), 32, c));
    assert_true(c->conv_key != b->conv_key);
    assert_true(c->chunk[0] == b->chunk[0]); /* the shared system prompt */
    int k = c->conv_chunk;
    assert_true(c->chunk[k] != b->chunk[k]);
    /* key order inside a message does not matter; the route's fields do */
    const char *x = "{\"messages\": [{\"role\": \"user\", \"content\": \"hello there, a prompt of some length\"}]}";
    const char *y = "{\"messages\": [{\"content\": \"hello there, a prompt of some length\", \"role\": \"user\"}]}";
    assert_true(hr_prefix_of(u, x, strlen(x), 16, a) && hr_prefix_of(u, y, strlen(y), 16, b));
    assert_int_equal(a->n_chunks, b->n_chunks);
    assert_true(a->conv_key == b->conv_key && a->chunk[2] == b->chunk[2]);
    free(a);
    free(b);
    free(c);
}

static void test_prefix_routes(void **state) {
    (void)state;
    hr_prefix *p = malloc(sizeof *p);
    const char *comp = "{\"prompt\": \"0123456789abcdefghijklmnopqrstuvwxyz\"}";
    assert_true(hr_prefix_of("/v1/completions", comp, strlen(comp), 16, p));
    assert_int_equal(p->conv_chunk, 0);
    assert_true(p->n_chunks >= 2);
    const char *resp = "{\"input\": \"hi\", \"previous_response_id\": \"resp_abc\"}";
    assert_true(hr_prefix_of("/v1/responses", resp, strlen(resp), 16, p));
    assert_string_equal(p->prev_id, "resp_abc");
    const char *msgs = "{\"system\": \"be brief\", \"messages\": []}";
    assert_true(hr_prefix_of("/v1/messages", msgs, strlen(msgs), 16, p));
    assert_false(hr_prefix_of("/v1/chat/completions", "{nope", 5, 16, p));
    assert_false(hr_prefix_of("/v1/chat/completions", "[1]", 3, 16, p));
    assert_false(hr_prefix_of("/v1/chat/completions", "", 0, 16, p));
    free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_spread),   cmocka_unit_test(test_ring_stable),
        cmocka_unit_test(test_lru),           cmocka_unit_test(test_prefix_turns),
        cmocka_unit_test(test_prefix_routes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
