/* Learning-rate schedules (train/schedule.h) against mlx's formulas
 * written out here in double (mlx.optimizers.schedulers, mlx_lm's
 * build_schedule with warmup), their config errors, and the training
 * state file (train/state.h): a round trip and its refusals. */
#include "core/error.h"
#include "core/file.h"
#include "model/model.h"
#include "train/config.h"
#include "train/lora_params.h"
#include "train/schedule.h"
#include "train/state.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static hr_sched parse(const char *json) {
    json_error_t je;
    json_t *o = json_loads(json, 0, &je);
    assert_non_null(o);
    hr_sched s;
    hr_error err = {0};
    if (hr_sched_parse(&s, o, "t.yaml", &err))
        fail_msg("%s: %s", json, err.msg);
    json_decref(o);
    return s;
}

static void near(float got, double want) {
    if (fabs(got - want) > 1e-6 * fabs(want) + 1e-8) /* float32, as mlx computes */
        fail_msg("lr %.9g, want %.9g", got, want);
}

static void test_values(void **st) {
    (void)st;
    const double PI = 3.14159265358979323846;
    hr_sched c = parse("{\"name\": \"cosine_decay\", \"arguments\": [0.1, 200]}");
    for (long t = 0; t < 260; t += 13)
        near(hr_sched_lr(&c, t), 0.5 * (1 + cos(PI * (t < 200 ? t : 200) / 200)) * 0.1);
    c = parse("{\"name\": \"cosine_decay\", \"arguments\": [1e-2, 6, 1e-3]}");
    near(hr_sched_lr(&c, 1), 1e-3 + 0.5 * (1 + cos(PI / 6)) * 9e-3);
    near(hr_sched_lr(&c, 99), 1e-3);
    hr_sched l = parse("{\"name\": \"linear_schedule\", \"arguments\": [0, 0.1, 100]}");
    near(hr_sched_lr(&l, 0), 0);
    near(hr_sched_lr(&l, 50), 0.05);
    near(hr_sched_lr(&l, 101), 0.1);
    hr_sched e = parse("{\"name\": \"exponential_decay\", \"arguments\": [0.1, 0.9]}");
    near(hr_sched_lr(&e, 5), 0.1 * pow(0.9, 5)); /* mlx's docstring: 0.06561 after 4 */
    hr_sched s = parse("{\"name\": \"step_decay\", \"arguments\": [0.1, 0.9, 10]}");
    near(hr_sched_lr(&s, 21), 0.081);
    near(hr_sched_lr(&s, 9), 0.1);
    /* warmup: join_schedules([linear(w0, init, W), sched], [W + 1]) */
    hr_sched w = parse("{\"name\": \"cosine_decay\", \"warmup\": 10, \"warmup_init\": 1e-3, "
                       "\"arguments\": [0.1, 200]}");
    near(hr_sched_lr(&w, 0), 1e-3);
    near(hr_sched_lr(&w, 5), 1e-3 + 5 * (0.1 - 1e-3) / 10);
    near(hr_sched_lr(&w, 10), 0.1);
    near(hr_sched_lr(&w, 11), 0.1);                                  /* cosine step 0 */
    near(hr_sched_lr(&w, 12), 0.5 * (1 + cos(PI / 200)) * 0.1);      /* cosine step 1 */
    hr_sched k;
    hr_sched_constant(&k, 3e-4);
    near(hr_sched_lr(&k, 12345), 3e-4);
    assert_null(hr_sched_json(&k));
    json_t *j = hr_sched_json(&w);
    assert_int_equal(json_integer_value(json_object_get(j, "warmup")), 10);
    json_decref(j);
}

static void test_errors(void **st) {
    (void)st;
    const char *bad[][2] = {
        {"{\"name\": \"cosine_annealing\", \"arguments\": [1]}", "not supported yet"},
        {"{\"name\": \"cosine_decay\", \"arguments\": [1]}", "takes 2 to 3"},
        {"{\"name\": \"cosine_decay\", \"arguments\": [1, 0]}", "step count"},
        {"{\"name\": \"linear_schedule\", \"arguments\": [1, \"x\", 3]}", "arguments[1]"},
        {"{\"name\": \"cosine_decay\", \"arguments\": [1, 5], \"warmup\": -1}", "warmup"},
        {"{\"arguments\": [1, 5]}", "name"},
        {"[1]", "mapping"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *o = json_loads(bad[i][0], 0, NULL);
        hr_sched s;
        hr_error err = {0};
        assert_true(hr_sched_parse(&s, o, "t.yaml", &err) < 0);
        if (!strstr(err.msg, bad[i][1]))
            fail_msg("%s: %s", bad[i][0], err.msg);
        json_decref(o);
    }
    /* through a YAML config, and grad_accumulation_steps */
    hr_train_cfg c;
    hr_train_cfg_default(&c);
    const char *y = "lr_schedule:\n  name: cosine_decay\n  warmup: 3\n  arguments: [1e-5, 100]\n"
                    "grad_accumulation_steps: 4\nloss: orpo\nbeta: 0.25\n";
    hr_error err = {0};
    assert_int_equal(hr_train_cfg_parse(&c, "t.yaml", y, strlen(y), &err), 0);
    assert_true(c.has_sched && c.sched.warmup == 3 && c.grad_accum == 4 && c.beta == 0.25);
    near(hr_sched_lr(&c.sched, 3), 1e-5);
    hr_train_cfg_deinit(&c);
    hr_train_cfg_default(&c);
    y = "grad_accumulation_steps: 0\n";
    assert_int_equal(hr_train_cfg_parse(&c, "t.yaml", y, strlen(y), &err), HR_EINVAL);
    y = "loss: ppo\n";
    assert_int_equal(hr_train_cfg_parse(&c, "t.yaml", y, strlen(y), &err), HR_EUNSUPPORTED);
    hr_train_cfg_deinit(&c);
}

static void test_state(void **st) {
    (void)st;
    char p[64];
    assert_int_equal(hr_train_state_path(p, sizeof p, "a/0000005_adapters.safetensors"), 0);
    assert_string_equal(p, "a/0000005_optimizer_state.safetensors");
    assert_int_equal(hr_train_state_path(p, sizeof p, "a/mine.safetensors"), 1);
    const char *root = getenv("HEARTH_ROOT");
    char d[4096];
    snprintf(d, sizeof d, "%s/tests/fixtures/models/llama", root ? root : ".");
    hr_model *m;
    hr_error err = {0};
    hr_model_opts o = {.quant_act = "f32"};
    assert_int_equal(hr_model_open_with(&m, d, &o, &err), 0);
    hr_lora_cfg cfg = {.rank = 2, .scale = 1, .num_layers = 1};
    for (int s = 0; s < HR_LORA_SLOTS; s++)
        cfg.keys[s] = true;
    hr_lora_set *a, *b;
    assert_int_equal(hr_lora_set_new(&a, m, &cfg, 1, &err), 0);
    assert_int_equal(hr_lora_set_new(&b, m, &cfg, 2, &err), 0);
    for (size_t i = 0; i < a->n; i++) {
        a->m1[i] = (float)i * 0.5f;
        a->m2[i] = (float)i + 0.25f;
        a->g[i] = -(float)i;
    }
    int perm[5] = {3, 1, 4, 0, 2}, perm2[5];
    hr_train_state s = {.iter = 17, .updates = 8, .n_batches = 5, .pos = 2, .perm = perm};
    hr_rng_seed(&s.rng, 99);
    hr_rng_next(&s.rng);
    char path[128];
    snprintf(path, sizeof path, "/tmp/hearth_test_schedule_%d.safetensors", (int)getpid());
    assert_int_equal(hr_train_state_save(path, a, &s, &err), 0);
    hr_train_state t = {.n_batches = 5, .perm = perm2};
    assert_int_equal(hr_train_state_load(path, b, &t, &err), 0);
    assert_memory_equal(a->m1, b->m1, a->n * sizeof(float));
    assert_memory_equal(a->m2, b->m2, a->n * sizeof(float));
    assert_memory_equal(a->g, b->g, a->n * sizeof(float));
    assert_memory_equal(perm, perm2, sizeof perm);
    assert_memory_equal(&s.rng, &t.rng, sizeof s.rng);
    assert_true(t.iter == 17 && t.updates == 8 && t.pos == 2);
    /* the in-memory entry point (the fuzzed one), on the same bytes, and
     * on the committed fuzz seed (tests/fuzz/corpus/fuzz_train_data/state) */
    char *img;
    size_t img_n;
    assert_int_equal(hr_file_read(path, &img, &img_n, &err), 0);
    float *xs = malloc(3 * a->n * sizeof *xs);
    float *const xm[3] = {xs, xs + a->n, xs + 2 * a->n};
    hr_train_state v = {.n_batches = 5, .perm = perm2};
    assert_int_equal(hr_train_state_parse(img, img_n, "mem", xm, a->n, &v, &err), 0);
    assert_true(v.iter == 17);
    assert_memory_equal(xm[1], a->m2, a->n * sizeof(float));
    free(img);
    snprintf(d, sizeof d, "%s/tests/fuzz/corpus/fuzz_train_data/state", root ? root : ".");
    assert_int_equal(hr_file_read(d, &img, &img_n, &err), 0);
    int sp[3];
    v = (hr_train_state){.n_batches = 3, .perm = sp};
    if (hr_train_state_parse(img + 1, img_n - 1, "seed", xm, 8, &v, &err))
        fail_msg("the fuzz seed: %s", err.msg);
    assert_true(v.iter == 5 && v.updates == 2 && v.pos == 1 && sp[0] == 2 && xs[0] == 0.5f);
    free(img);
    free(xs);
    /* another batch count, another set size: refused by name */
    hr_train_state u = {.n_batches = 4, .perm = perm2};
    assert_int_equal(hr_train_state_load(path, b, &u, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "'perm'"));
    hr_lora_set *c;
    cfg.rank = 3;
    assert_int_equal(hr_lora_set_new(&c, m, &cfg, 2, &err), 0);
    assert_int_equal(hr_train_state_load(path, c, &t, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "not this run's"));
    /* a malformed one: a permutation entry out of range */
    perm[0] = 7;
    assert_int_equal(hr_train_state_save(path, a, &s, &err), 0);
    assert_int_equal(hr_train_state_load(path, b, &t, &err), HR_EFORMAT);
    /* gradient accumulation's division */
    b->g[1] = 3.0f;
    hr_lora_set_div_grad(b, 3.0f);
    assert_true(b->g[1] == 1.0f);
    unlink(path);
    hr_lora_set_free(a);
    hr_lora_set_free(b);
    hr_lora_set_free(c);
    hr_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
