/* The graph cache's policy (kernels/graphs.h): a shape is launched the
 * first time, captured the second, replayed after; a full cache gives the
 * least recently used slot to the next shape seen twice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels/graphs.h"

static hr_graph_act pick(hr_graph_cache *g, int T, int *slot, bool *evict) {
    hr_graph_key k = {.T = T, .n_out = T, .n_hidden = 0, .split = 0, .img = false};
    return hr_graph_cache_pick(g, &k, slot, evict);
}

static void test_launch_capture_replay(void **state) {
    (void)state;
    hr_graph_cache g;
    hr_graph_cache_init(&g);
    int s, s2;
    bool ev;
    assert_int_equal(pick(&g, 7, &s, &ev), HR_GRAPH_LAUNCH);
    assert_int_equal(pick(&g, 7, &s, &ev), HR_GRAPH_CAPTURE);
    assert_false(ev);
    assert_int_equal(pick(&g, 7, &s2, &ev), HR_GRAPH_REPLAY);
    assert_int_equal(s2, s);
    /* another field of the shape is another shape */
    hr_graph_key k = {.T = 7, .n_out = 7, .n_hidden = 0, .split = 1, .img = false};
    assert_int_equal(hr_graph_cache_pick(&g, &k, &s2, &ev), HR_GRAPH_LAUNCH);
    k.split = 0;
    k.img = true;
    assert_int_equal(hr_graph_cache_pick(&g, &k, &s2, &ev), HR_GRAPH_LAUNCH);
    assert_int_equal(hr_graph_cache_pick(&g, &k, &s2, &ev), HR_GRAPH_CAPTURE);
    assert_int_not_equal(s2, s);
}

static void test_full_evicts_least_recent(void **state) {
    (void)state;
    hr_graph_cache g;
    hr_graph_cache_init(&g);
    int s, slot_of[HR_GRAPH_SLOTS + 1];
    bool ev;
    for (int t = 1; t <= HR_GRAPH_SLOTS; t++) { /* every slot holds a graph */
        assert_int_equal(pick(&g, t, &s, &ev), HR_GRAPH_LAUNCH);
        assert_int_equal(pick(&g, t, &s, &ev), HR_GRAPH_CAPTURE);
        assert_false(ev);
        slot_of[t] = s;
    }
    for (int t = 2; t <= HR_GRAPH_SLOTS; t++) /* all but shape 1 used since */
        assert_int_equal(pick(&g, t, &s, &ev), HR_GRAPH_REPLAY);
    assert_int_equal(pick(&g, 1000, &s, &ev), HR_GRAPH_LAUNCH);
    assert_int_equal(pick(&g, 1000, &s, &ev), HR_GRAPH_CAPTURE);
    assert_true(ev); /* shape 1's graph makes room */
    assert_int_equal(s, slot_of[1]);
    assert_int_equal(pick(&g, 1000, &s, &ev), HR_GRAPH_REPLAY);
    assert_int_equal(pick(&g, 1, &s, &ev), HR_GRAPH_LAUNCH); /* seen anew */
    assert_int_equal(pick(&g, 2, &s, &ev), HR_GRAPH_REPLAY);
}

static void test_seen_once_is_forgotten(void **state) {
    (void)state;
    hr_graph_cache g;
    hr_graph_cache_init(&g);
    int s;
    bool ev;
    assert_int_equal(pick(&g, 1, &s, &ev), HR_GRAPH_LAUNCH);
    for (int t = 2; t <= HR_GRAPH_SEEN + 1; t++) /* 64 other one-off shapes */
        assert_int_equal(pick(&g, t, &s, &ev), HR_GRAPH_LAUNCH);
    assert_int_equal(pick(&g, 1, &s, &ev), HR_GRAPH_LAUNCH); /* the oldest went */
    assert_int_equal(pick(&g, HR_GRAPH_SEEN + 1, &s, &ev), HR_GRAPH_CAPTURE);
}

static void test_drop(void **state) {
    (void)state;
    hr_graph_cache g;
    hr_graph_cache_init(&g);
    int s;
    bool ev;
    pick(&g, 5, &s, &ev);
    assert_int_equal(pick(&g, 5, &s, &ev), HR_GRAPH_CAPTURE);
    hr_graph_cache_drop(&g, s); /* the capture failed */
    assert_int_equal(pick(&g, 5, &s, &ev), HR_GRAPH_LAUNCH);
    assert_int_equal(pick(&g, 5, &s, &ev), HR_GRAPH_CAPTURE);
    assert_false(ev);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_launch_capture_replay),
        cmocka_unit_test(test_full_evicts_least_recent),
        cmocka_unit_test(test_seen_once_is_forgotten),
        cmocka_unit_test(test_drop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
