/* hfcache: the cache directory from the environment, repo ids and revisions,
 * and resolution of ORG/NAME[@REV] over a cache tree laid out here as
 * huggingface_hub lays it out. */
#include "support/tree.h"
#include "core/error.h"
#include "core/file.h"
#include "io/hfcache.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define C1 "0123456789abcdef0123456789abcdef01234567"
#define C2 "89abcdef0123456789abcdef0123456789abcdef"

static char root[64];

static void put(const char *rel, const char *text) {
    assert_int_equal(hr_test_put(root, rel, text), 0);
}

static void link_to(const char *rel, const char *target) {
    assert_int_equal(hr_test_link(root, rel, target), 0);
}

/* models--org--name: refs/main -> C1 (config.json + a nested file),
 * refs/refs/pr/1 -> C2, refs/bad (not a hash), refs/gone -> a missing
 * snapshot; models--org--gguf: one .gguf file and no config.json. */
static int setup(void **state) {
    (void)state;
    strcpy(root, "/tmp/hearth_hfc_XXXXXX");
    assert_non_null(mkdtemp(root));
    put("models--org--name/blobs/aaaa", "{\"model_type\": \"llama\"}");
    put("models--org--name/blobs/bbbb", "nested");
    put("models--org--name/refs/main", C1);
    put("models--org--name/refs/refs/pr/1", C2 "\n");
    put("models--org--name/refs/bad", "not-a-hash");
    put("models--org--name/refs/gone", "ffffffffffffffffffffffffffffffffffffffff");
    link_to("models--org--name/snapshots/" C1 "/config.json", "../../blobs/aaaa");
    link_to("models--org--name/snapshots/" C1 "/sub/x.txt", "../../../blobs/bbbb");
    link_to("models--org--name/snapshots/" C2 "/config.json", "../../blobs/aaaa");
    put("models--org--gguf/blobs/cccc", "GGUF");
    put("models--org--gguf/refs/main", C1);
    link_to("models--org--gguf/snapshots/" C1 "/m-Q4_0.gguf", "../../blobs/cccc");
    setenv("HF_HUB_CACHE", root, 1);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_cache_dir(void **state) {
    (void)state;
    char d[HR_HF_PATH_MAX];
    const char *names[] = {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"};
    for (int i = 0; i < 4; i++)
        unsetenv(names[i]);
    setenv("HOME", "/home/u", 1);
    assert_int_equal(hr_hf_cache_dir(d, sizeof d, NULL), 0);
    assert_string_equal(d, "/home/u/.cache/huggingface/hub");
    setenv("XDG_CACHE_HOME", "/x", 1);
    assert_int_equal(hr_hf_cache_dir(d, sizeof d, NULL), 0);
    assert_string_equal(d, "/x/huggingface/hub");
    setenv("HF_HOME", "~/hf", 1);
    assert_int_equal(hr_hf_cache_dir(d, sizeof d, NULL), 0);
    assert_string_equal(d, "/home/u/hf/hub");
    setenv("HUGGINGFACE_HUB_CACHE", "/legacy", 1);
    assert_int_equal(hr_hf_cache_dir(d, sizeof d, NULL), 0);
    assert_string_equal(d, "/legacy");
    setenv("HF_HUB_CACHE", "/new", 1);
    assert_int_equal(hr_hf_cache_dir(d, sizeof d, NULL), 0);
    assert_string_equal(d, "/new");
    setenv("HF_HUB_CACHE", "", 1); /* empty is unset */
    assert_int_equal(hr_hf_cache_dir(d, sizeof d, NULL), 0);
    assert_string_equal(d, "/legacy");
    char small[4];
    assert_int_equal(hr_hf_cache_dir(small, sizeof small, NULL), HR_ERANGE);
    for (int i = 0; i < 4; i++)
        unsetenv(names[i]);
    setenv("HF_HUB_CACHE", root, 1);
}

static void test_names(void **state) {
    (void)state;
    hr_error err;
    assert_int_equal(hr_hf_repo_check("mlx-community/Qwen3-4B-4bit", &err), 0);
    assert_int_equal(hr_hf_repo_check("a_b/c.d", &err), 0);
    const char *bad[] = {"gpt2", "a/b/c", "/a", "a/", "-a/b", "a/b.", "a--b/c", "a/..b",
                         "a/b c", "a/b\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(hr_hf_repo_check(bad[i], &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "not a repo id"));
    char longid[128];
    memset(longid, 'a', sizeof longid);
    longid[3] = '/';
    longid[100] = 0;
    assert_int_equal(hr_hf_repo_check(longid, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "96"));

    assert_int_equal(hr_hf_revision_check("main", &err), 0);
    assert_int_equal(hr_hf_revision_check("refs/pr/1", &err), 0);
    assert_int_equal(hr_hf_revision_check("v1.0+x", &err), 0);
    const char *badrev[] = {"", "../x", "a/../b", "/a", "a/", "a//b", ".hidden", "a b", "a\\b"};
    for (size_t i = 0; i < sizeof badrev / sizeof badrev[0]; i++)
        assert_int_equal(hr_hf_revision_check(badrev[i], &err), HR_EINVAL);
    assert_true(hr_hf_is_commit(C1));
    assert_false(hr_hf_is_commit("0123456789ABCDEF0123456789abcdef01234567"));
    assert_false(hr_hf_is_commit("main"));

    hr_hf_ref r;
    assert_int_equal(hr_hf_ref_parse(&r, "org/name", &err), 0);
    assert_string_equal(r.repo, "org/name");
    assert_string_equal(r.revision, "main");
    assert_int_equal(hr_hf_ref_parse(&r, "org/name@refs/pr/1", &err), 0);
    assert_string_equal(r.revision, "refs/pr/1");
    assert_int_equal(hr_hf_ref_parse(&r, "org/name@", &err), HR_EINVAL);
    assert_int_equal(hr_hf_ref_parse(&r, "org/name@../../x", &err), HR_EINVAL);

    char d[HR_HF_PATH_MAX];
    assert_int_equal(hr_hf_repo_dir(d, sizeof d, "/c", "org/name", &err), 0);
    assert_string_equal(d, "/c/models--org--name");
}

static void test_resolve(void **state) {
    (void)state;
    hr_error err;
    hr_hf_ref r;
    char snap[HR_HF_PATH_MAX], want[HR_HF_PATH_MAX], commit[41];
    assert_int_equal(hr_hf_ref_parse(&r, "org/name", &err), 0);
    assert_int_equal(hr_hf_snapshot(snap, sizeof snap, commit, root, &r, &err), 0);
    snprintf(want, sizeof want, "%s/models--org--name/snapshots/" C1, root);
    assert_string_equal(snap, want);
    assert_string_equal(commit, C1);
    /* a ref under refs/ with a trailing newline; a commit named directly */
    assert_int_equal(hr_hf_ref_parse(&r, "org/name@refs/pr/1", &err), 0);
    assert_int_equal(hr_hf_snapshot(snap, sizeof snap, commit, root, &r, &err), 0);
    assert_string_equal(commit, C2);
    assert_int_equal(hr_hf_ref_parse(&r, "org/name@" C2, &err), 0);
    assert_int_equal(hr_hf_snapshot(snap, sizeof snap, NULL, root, &r, &err), 0);
    /* errors */
    assert_int_equal(hr_hf_ref_parse(&r, "org/missing", &err), 0);
    assert_int_equal(hr_hf_snapshot(snap, sizeof snap, NULL, root, &r, &err), HR_ENOTFOUND);
    assert_non_null(strstr(err.msg, "hearth get org/missing"));
    assert_int_equal(hr_hf_ref_parse(&r, "org/name@v9", &err), 0);
    assert_int_equal(hr_hf_snapshot(snap, sizeof snap, NULL, root, &r, &err), HR_ENOTFOUND);
    assert_non_null(strstr(err.msg, "no revision 'v9'"));
    assert_int_equal(hr_hf_ref_parse(&r, "org/name@bad", &err), 0);
    assert_int_equal(hr_hf_snapshot(snap, sizeof snap, NULL, root, &r, &err), HR_EFORMAT);
    assert_non_null(strstr(err.msg, "not a commit hash"));
    assert_int_equal(hr_hf_ref_parse(&r, "org/name@gone", &err), 0);
    assert_int_equal(hr_hf_snapshot(snap, sizeof snap, NULL, root, &r, &err), HR_ENOTFOUND);
    assert_non_null(strstr(err.msg, "snapshot ffff"));
    /* 41 hex digits are a branch name, not a commit */
    assert_int_equal(hr_hf_ref_parse(&r, "org/name@" C2 "0", &err), 0);
    assert_int_equal(hr_hf_snapshot(snap, sizeof snap, NULL, root, &r, &err), HR_ENOTFOUND);
}

static void test_model_path(void **state) {
    (void)state;
    hr_error err;
    char p[HR_HF_PATH_MAX], want[HR_HF_PATH_MAX];
    assert_int_equal(hr_hf_model_path(p, sizeof p, "org/name", &err), 0);
    snprintf(want, sizeof want, "%s/models--org--name/snapshots/" C1, root);
    assert_string_equal(p, want);
    /* a snapshot with one GGUF file and no config.json is that file */
    assert_int_equal(hr_hf_model_path(p, sizeof p, "org/gguf", &err), 0);
    snprintf(want, sizeof want, "%s/models--org--gguf/snapshots/" C1 "/m-Q4_0.gguf", root);
    assert_string_equal(p, want);
    /* a path that exists is itself, even when it looks like a name */
    assert_int_equal(chdir(root), 0);
    assert_int_equal(hr_hf_model_path(p, sizeof p, "models--org--name/blobs", &err), 0);
    assert_string_equal(p, "models--org--name/blobs");
    /* not a name: unchanged, for the loader to report */
    assert_int_equal(hr_hf_model_path(p, sizeof p, "/nonexistent", &err), 0);
    assert_string_equal(p, "/nonexistent");
    assert_int_equal(hr_hf_model_path(p, sizeof p, "justaname", &err), 0);
    assert_string_equal(p, "justaname");
    assert_int_equal(hr_hf_model_path(p, sizeof p, "org/nothere", &err), HR_ENOTFOUND);
    assert_non_null(strstr(err.msg, "no model 'org/nothere'"));
    assert_null(strchr(err.msg, '\n'));

    assert_int_equal(hr_hf_repo_of_path(p, sizeof p, want), 0);
    assert_string_equal(p, "org/gguf");
    assert_int_equal(hr_hf_repo_of_path(p, sizeof p, "/c/models--a--b/snapshots/" C1), 0);
    assert_string_equal(p, "a/b");
    assert_int_equal(hr_hf_repo_of_path(p, sizeof p, "/c/models--a--b/blobs/x"), HR_ENOTFOUND);
    assert_int_equal(hr_hf_repo_of_path(p, sizeof p, "/m/hearth-demo"), HR_ENOTFOUND);
    assert_int_equal(hr_hf_repo_of_path(p, sizeof p, "/c/xmodels--a--b/snapshots/1"),
                     HR_ENOTFOUND);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_dir),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_model_path),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
