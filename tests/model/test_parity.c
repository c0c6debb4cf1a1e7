/* Parity with Hugging Face transformers (float32, eager attention): every
 * fixture under tests/fixtures/models/<case>/ (made by tools/refgen) holds a
 * tiny random-weight model and, for three prompts, the oracle's greedy
 * tokens and top-10 logprobs per step.
 *
 * The test teacher-forces the oracle's tokens, so one step's near-tie cannot
 * derail the rest, and checks at every step: (1) our argmax is the oracle's
 * token, unless the oracle's top-2 margin is below NEAR_TIE; (2) every one
 * of the oracle's top-10 logprobs matches ours within the case's tolerance:
 * 1e-4 absolute for float32 weights and for bfloat16 weights (the oracle
 * computes in float32 from the same bf16-rounded weights).
 *
 * Dynamic NTK RoPE rescales every cached key at every step past
 * max_position_embeddings; hearth, like transformers' own KV-cached
 * generation, keeps the cached keys (docs/numerics.md). There the oracle
 * (a full forward per step) is matched exactly on the prefill step of each
 * prompt and while the sequence is within max_position_embeddings; later
 * steps are counted apart, not asserted.
 *
 * On another backend (--device), a family that backend refuses at load
 * ("not supported yet on cuda: ...": experts, sinks, DeltaNet) is skipped,
 * saying so. */
#include "core/error.h"
#include "support/kl.h"
#include "support/runner.h"
#include "model/model.h"
#include "sample/sampler.h"

#include "../device_arg.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NEAR_TIE 1e-3
#define TOL 1e-4

static char g_root[4096];
static const char *g_device; /* --device NAME: the backend under test */

static void run_case(void **state) {
    const char *name = *state;
    char dir[8192], ref_path[8300];
    snprintf(dir, sizeof dir, "%s/%s", g_root, name);
    snprintf(ref_path, sizeof ref_path, "%s/ref.json", dir);
    json_error_t je;
    json_t *ref = json_load_file(ref_path, 0, &je);
    assert_non_null(ref);

    hr_error err = {0};
    hr_model *m = NULL;
    int rc = hr_model_open_on(&m, dir, g_device, &err);
    if (rc == HR_EUNSUPPORTED && m == NULL && g_device && strcmp(g_device, "cpu") &&
        strstr(err.msg, "not supported yet on ")) { /* a family only the CPU runs yet */
        printf("parity %-5s %-22s skipped: %s\n", g_device, name, err.msg);
        json_decref(ref);
        skip();
    }
    if (rc)
        fail_msg("%s: %s", name, err.msg);
    hr_runner *r = NULL;
    hr_runner_opts ro = {.n_threads = 2, .n_ctx = 256, .prefill_chunk = 64};
    assert_int_equal(hr_runner_new(&r, m, &ro, &err), 0);
    int V = m->hp.n_vocab;
    float *logits = malloc((size_t)V * sizeof *logits);

    json_t *cases = json_object_get(ref, "cases");
    int steps = 0, agree = 0, near_ties = 0, not_comparable = 0;
    bool dynamic = m->hp.rope.type == HR_ROPE_DYNAMIC;
    double worst = 0;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c);
        json_t *pt = json_object_get(cs, "prompt_tokens");
        json_t *gt = json_object_get(cs, "greedy_tokens");
        json_t *st = json_object_get(cs, "steps");
        int np = (int)json_array_size(pt);
        int32_t *prompt = malloc((size_t)np * sizeof *prompt);
        for (int i = 0; i < np; i++)
            prompt[i] = (int32_t)json_integer_value(json_array_get(pt, (size_t)i));
        hr_runner_reset(r);
        rc = hr_runner_eval(r, prompt, np, logits, &err);
        if (rc)
            fail_msg("%s: %s", name, err.msg);
        free(prompt);
        for (size_t s = 0; s < json_array_size(gt); s++) {
            int32_t want = (int32_t)json_integer_value(json_array_get(gt, s));
            json_t *step = json_array_get(st, s);
            double margin = json_number_value(json_object_get(step, "margin"));
            int32_t got = hr_argmax(logits, V);
            if (dynamic && s > 0 && np + (int)s > m->hp.max_pos) {
                not_comparable++;
                rc = hr_runner_eval(r, &want, 1, logits, &err);
                assert_int_equal(rc, 0);
                continue;
            }
            steps++;
            if (got == want)
                agree++;
            else if (margin < NEAR_TIE)
                near_ties++;
            else
                fail_msg("%s prompt %zu step %zu: argmax %d, oracle %d (margin %g)",
                         name, c, s, got, want, margin);
            double l = hr_logsumexp_f64(logits, V);
            json_t *top = json_object_get(step, "top");
            for (size_t k = 0; k < json_array_size(top); k++) {
                json_t *e = json_array_get(top, k);
                int id = (int)json_integer_value(json_array_get(e, 0));
                double lp = json_number_value(json_array_get(e, 1));
                double d = fabs((logits[id] - l) - lp);
                worst = d > worst ? d : worst;
                if (d > TOL)
                    fail_msg("%s prompt %zu step %zu: logprob of %d is %.7f, oracle "
                             "%.7f", name, c, s, id, logits[id] - l, lp);
            }
            rc = hr_runner_eval(r, &want, 1, logits, &err);
            if (rc)
                fail_msg("%s: %s", name, err.msg);
        }
    }
    printf("parity %-5s %-22s %3d/%3d greedy steps match (%d near-ties), max |dlogprob| %.2e",
           m->be->name, name, agree, steps, near_ties, worst);
    if (not_comparable)
        printf(" (%d dynamic-NTK steps past max_pos not compared)", not_comparable);
    printf("\n");
    free(logits);
    hr_runner_free(r);
    hr_model_free(m);
    json_decref(ref);
}

static int cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* test_parity [--device NAME]: the fixtures on another backend (ctest's
 * test_parity_cuda). A GPU that is not there skips, saying why. */
int main(int argc, char **argv) {
    if (!hr_test_device(argc, argv, &g_device))
        return 0;
    const char *root = getenv("HEARTH_ROOT");
    snprintf(g_root, sizeof g_root, "%s/tests/fixtures/models", root ? root : ".");
    DIR *d = opendir(g_root);
    if (!d) {
        fprintf(stderr, "no fixtures at %s\n", g_root);
        return 1;
    }
    char *names[256];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256)
        if (e->d_name[0] != '.')
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof *names, cmp);
    struct CMUnitTest *tests = calloc(n, sizeof *tests);
    for (size_t i = 0; i < n; i++) {
        tests[i].name = names[i];
        tests[i].test_func = run_case;
        tests[i].initial_state = names[i];
    }
    int rc = _cmocka_run_group_tests("parity", tests, n, NULL, NULL);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(tests);
    return rc;
}
