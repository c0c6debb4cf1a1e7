/* hfscan: reading a cache tree laid out here (revisions, refs, blobs,
 * partial files, a copy instead of a link, a broken link), and gc's plan:
 * what it keeps, what it removes, in which order, and applying it. */
#include "support/tree.h"
#include "core/error.h"
#include "core/file.h"
#include "io/hfcache.h"
#include "io/hfscan.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define C "cccccccccccccccccccccccccccccccccccccccc"

static char root[64];

static void put(const char *rel, const char *text) {
    assert_int_equal(hr_test_put(root, rel, text), 0);
}

static void link_to(const char *rel, const char *target) {
    assert_int_equal(hr_test_link(root, rel, target), 0);
}

#define R "models--o--m/"

/* o/m: A (main, v1) links b1 and b2 (one nested); B (no ref) links b2 and
 * b3; C (no ref) has a copied file and a broken link. b4 is linked by none;
 * "p.incomplete" is a partial download; refs/gone names a missing snapshot.
 * o/solo: only a revision no ref names. A dataset is ignored. .no_exist
 * records missing files of A, B and C. */
static void lay_out(void) {
    strcpy(root, "/tmp/hearth_hfs_XXXXXX");
    assert_non_null(mkdtemp(root));
    put(R "blobs/b1", "1");
    put(R "blobs/b2", "22");
    put(R "blobs/b3", "333");
    put(R "blobs/b4", "4444");
    put(R "blobs/p.incomplete", "55555");
    put(R "refs/main", A);
    put(R "refs/v1", A "\n");
    put(R "refs/gone", "dddddddddddddddddddddddddddddddddddddddd");
    link_to(R "snapshots/" A "/x", "../../blobs/b1");
    link_to(R "snapshots/" A "/d/y", "../../../blobs/b2");
    link_to(R "snapshots/" B "/y", "../../blobs/b2");
    link_to(R "snapshots/" B "/z", "../../blobs/b3");
    put(R "snapshots/" C "/copy", "666666");
    link_to(R "snapshots/" C "/broken", "../../blobs/nope");
    put("models--o--solo/blobs/s1", "7");
    link_to("models--o--solo/snapshots/" A "/w", "../../blobs/s1");
    put("datasets--o--d/blobs/q", "8");
    put(R ".no_exist/" A "/gone.bin", "");  /* huggingface_hub's missing-file records */
    put(R ".no_exist/" B "/gone.bin", "");
    put(R ".no_exist/" C "/sub/gone.bin", "");
}

static void drop(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

static const hr_hf_rev *rev(const hr_hf_repo *r, const char *commit) {
    for (int i = 0; i < r->n_revs; i++)
        if (!strcmp(r->revs[i].commit, commit))
            return &r->revs[i];
    fail_msg("no revision %s", commit);
    return NULL;
}

static void test_scan(void **state) {
    (void)state;
    lay_out();
    hr_hf_scan *s;
    assert_int_equal(hr_hf_scan_open(&s, root, NULL), 0);
    assert_int_equal(s->n_repos, 2);
    const hr_hf_repo *r = &s->repos[0];
    assert_string_equal(r->id, "o/m");
    assert_string_equal(s->repos[1].id, "o/solo");
    assert_int_equal(r->n_blobs, 4);
    assert_int_equal(r->bytes, 1 + 2 + 3 + 4);
    assert_int_equal(r->n_partial, 1);
    assert_string_equal(r->partial[0].name, "p");
    assert_int_equal(r->n_dangling, 1);
    assert_string_equal(r->dangling[0], "gone");
    assert_int_equal(r->n_revs, 3);
    const hr_hf_rev *a = rev(r, A), *b = rev(r, B), *c = rev(r, C);
    assert_int_equal(a->n_refs, 2);
    assert_string_equal(a->refs[0], "main");
    assert_string_equal(a->refs[1], "v1");
    assert_int_equal(a->n_files, 2);
    assert_int_equal(a->bytes, 3);
    assert_int_equal(b->n_refs, 0);
    assert_int_equal(b->bytes, 5);
    assert_int_equal(c->n_files, 2);
    assert_int_equal(c->n_broken, 1);
    assert_int_equal(c->bytes, 6);
    hr_hf_scan_free(s);
    hr_hf_scan_free(NULL);
    /* a cache that is not there is empty */
    assert_int_equal(hr_hf_scan_open(&s, "/nonexistent/hub", NULL), 0);
    assert_int_equal(s->n_repos, 0);
    hr_hf_scan_free(s);
    drop();
}

static void test_gc(void **state) {
    (void)state;
    lay_out();
    hr_hf_scan *s;
    hr_hf_gc_item *items;
    int n;
    assert_int_equal(hr_hf_scan_open(&s, root, NULL), 0);
    assert_int_equal(hr_hf_gc_plan(s, "o/m", &items, &n, NULL), 0);
    /* snapshots B and C and their .no_exist records, ref gone, blobs b3 and
     * b4 (b2 is A's too), p */
    assert_int_equal(n, 8);
    assert_int_equal(items[0].kind, HR_HF_GC_SNAPSHOT);
    assert_int_equal(items[1].kind, HR_HF_GC_SNAPSHOT);
    assert_true(!strcmp(items[0].name, B) || !strcmp(items[1].name, B));
    assert_true(!strcmp(items[0].name, C) || !strcmp(items[1].name, C));
    for (int i = 2; i < 4; i++) {
        assert_int_equal(items[i].kind, HR_HF_GC_NO_EXIST);
        assert_true(!strcmp(items[i].name, B) || !strcmp(items[i].name, C));
        assert_non_null(strstr(items[i].path, R ".no_exist/"));
    }
    assert_string_not_equal(items[2].name, items[3].name);
    assert_int_equal(items[4].kind, HR_HF_GC_REF);
    assert_string_equal(items[4].name, "gone");
    assert_int_equal(items[5].kind, HR_HF_GC_BLOB);
    assert_string_equal(items[5].name, "b3");
    assert_int_equal(items[5].bytes, 3);
    assert_string_equal(items[6].name, "b4");
    assert_int_equal(items[7].kind, HR_HF_GC_PARTIAL);
    assert_int_equal(items[7].bytes, 5);
    assert_non_null(strstr(items[7].path, "blobs/p.incomplete"));
    assert_int_equal(hr_hf_gc_apply(items, n, NULL), 0);
    hr_hf_gc_free(items, n);
    hr_hf_scan_free(s);

    /* after: only A and what it uses; o/solo keeps its newest (only) revision */
    assert_int_equal(hr_hf_scan_open(&s, root, NULL), 0);
    const hr_hf_repo *r = &s->repos[0];
    assert_int_equal(r->n_revs, 1);
    assert_string_equal(r->revs[0].commit, A);
    assert_int_equal(r->n_blobs, 2);
    assert_int_equal(r->n_partial + r->n_dangling, 0);
    assert_int_equal(hr_hf_gc_plan(s, NULL, &items, &n, NULL), 0);
    assert_int_equal(n, 0);
    hr_hf_gc_free(items, n);
    hr_hf_scan_free(s);
    char p[HR_HF_PATH_MAX];
    snprintf(p, sizeof p, "%s/datasets--o--d/blobs/q", root);
    assert_true(hr_file_exists(p));
    snprintf(p, sizeof p, "%s/" R ".no_exist/" A "/gone.bin", root); /* A's record stays */
    assert_true(hr_file_exists(p));
    snprintf(p, sizeof p, "%s/" R ".no_exist/" B, root);
    assert_false(hr_dir_exists(p));
    drop();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scan),
        cmocka_unit_test(test_gc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
