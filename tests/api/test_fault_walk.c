/* Allocation failure is an error, never a crash (issue 40): walk the
 * failing allocation N across one whole request through the public API
 * (chat template, tokenizer, grammar from a JSON Schema, the engine's
 * prefill and decode, sampler with logprobs, detokenizer, events; and a
 * forced tool call over a Pydantic schema: tool grammar, call parser), the
 * model's load excepted. For every N: no crash (and, under ASan, no leak),
 * the request either fails with a message or gives the right text, and the
 * next request gives the right text. HEARTH_FAULT_STRIDE=k tries every k-th
 * N (default: about 30 and 15 points, a few seconds; 1 walks all: 790
 * requests, 40 s on one core). */
#include "hearth.h"
#include "core/fault.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hr_llm *g_llm, *g_tllm;
static hr_session *g_sess, *g_tsess;
static char g_tmpl[65536];

/* The demo model; and again with Qwen3's chat template, which has a
 * tool-call format (for tool_choice "required"). */
static int setup(void **state) {
    (void)state;
    const char *root = getenv("HEARTH_ROOT");
    char model[4096], path[4200];
    snprintf(model, sizeof model, "%s/models/hearth-demo", root ? root : ".");
    snprintf(path, sizeof path, "%s/tests/fixtures/chat/templates/Qwen-Qwen3-0.6B.jinja",
             root ? root : ".");
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    g_tmpl[fread(g_tmpl, 1, sizeof g_tmpl - 1, f)] = 0;
    fclose(f);
    hr_error err = {0};
    hr_session_opts so = {.max_batch = 2, .n_ctx = 512};
    if (hr_llm_load(&g_llm, model, &(hr_llm_opts){.n_threads = 1}, &err) ||
        hr_session_new(&g_sess, g_llm, &so, &err) ||
        hr_llm_load(&g_tllm, model, &(hr_llm_opts){.n_threads = 1, .chat_template = g_tmpl},
                    &err) ||
        hr_session_new(&g_tsess, g_tllm, &so, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    hr_session_free(g_tsess);
    hr_llm_free(g_tllm);
    hr_session_free(g_sess);
    hr_llm_free(g_llm);
    return 0;
}

/* One request to its end; its text (and tool calls' names and arguments)
 * in text. 0, or the error's code. tools: a forced call (tool_choice
 * "required" over a Pydantic schema with $defs) instead of a JSON Schema. */
static int request(bool tools, char *text, size_t cap, hr_error *err) {
    hr_gen_params p;
    hr_gen_params_default(&p);
    p.messages_json = "[{\"role\": \"user\", \"content\": \"Name a colour.\"}]";
    if (tools) {
        p.tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"paint\", "
                       "\"parameters\": {\"$defs\": {\"C\": {\"type\": \"string\", \"maxLength\": 6}}, "
                       "\"type\": \"object\", \"properties\": {\"colour\": {\"$ref\": \"#/$defs/C\"}}, "
                       "\"required\": [\"colour\"], \"additionalProperties\": false}}}]";
        p.tool_choice = "required";
        p.max_tokens = 40;
    } else {
        p.json_schema = "{\"type\": \"object\", \"properties\": {\"colour\": {\"type\": "
                        "\"string\", \"maxLength\": 8}}, \"required\": [\"colour\"]}";
        p.max_tokens = 6;
        p.top_logprobs = 2;
    }
    p.temperature = 0;
    const char *stop[] = {"\n\n"};
    p.stop = stop;
    p.n_stop = 1;
    hr_gen *g = NULL;
    int rc = hr_gen_submit(&g, tools ? g_tsess : g_sess, &p, err);
    size_t len = 0;
    hr_gen_event ev;
    text[0] = 0;
    while (!rc && (rc = hr_gen_next(g, &ev, err)) == 1) {
        assert_true(len + ev.text_len < cap);
        memcpy(text + len, ev.text, ev.text_len);
        text[len += ev.text_len] = 0;
        for (int i = 0; i < ev.n_tool_events; i++) {
            const hr_gen_tool_event *t = &ev.tool_events[i];
            const char *piece = t->kind == HR_TOOL_CALL_START ? t->name
                                : t->kind == HR_TOOL_CALL_ARGS ? t->args
                                                               : "|";
            size_t pl = t->kind == HR_TOOL_CALL_ARGS ? t->args_len : strlen(piece);
            assert_true(len + pl < cap);
            memcpy(text + len, piece, pl);
            text[len += pl] = 0;
        }
        rc = 0;
        if (ev.finish != HR_GEN_RUNNING) {
            if (ev.finish == HR_GEN_ERROR)
                rc = HR_EIO;
            break;
        }
    }
    hr_gen_free(g);
    return rc < 0 ? rc : rc ? HR_EIO : 0;
}

static void walk(bool tools) {
    char want[512], got[512];
    hr_error err = {0};
    assert_int_equal(request(tools, want, sizeof want, &err), 0);
    hr_fault_set(HR_FAULT_ALLOC, 1L << 40); /* count, never fail */
    assert_int_equal(request(tools, got, sizeof got, &err), 0);
    long total = hr_fault_count(HR_FAULT_ALLOC);
    hr_fault_set(HR_FAULT_ALLOC, 0);
    assert_string_equal(got, want);
    const char *e = getenv("HEARTH_FAULT_STRIDE");
    long stride = e ? atol(e) : total / (tools ? 15 : 30) + 1; /* a few seconds */
    if (tools) /* the walk is about a call: the text must hold one */
        assert_non_null(strstr(want, "paint"));
    if (stride < 1)
        stride = 1;
    int failed = 0, survived = 0;
    for (long n = 1;; n += stride) {
        hr_error ferr = {0};
        hr_fault_set(HR_FAULT_ALLOC, n);
        int rc = request(tools, got, sizeof got, &ferr);
        bool fired = hr_fault_fired(HR_FAULT_ALLOC);
        hr_fault_set(HR_FAULT_ALLOC, 0);
        if (rc) {
            if (!ferr.msg[0])
                fail_msg("allocation %ld: request failed (%d) without a message", n, rc);
            failed++;
        } else {
            if (strcmp(got, want))
                fail_msg("allocation %ld: text '%s', want '%s'", n, got, want);
            survived += fired;
        }
        hr_error nerr = {0};
        if (request(tools, got, sizeof got, &nerr) || strcmp(got, want))
            fail_msg("after allocation %ld failed: the next request gave '%s' (%s)", n, got,
                     nerr.msg);
        if (!fired)
            break; /* past the request's last allocation */
    }
    fprintf(stderr, "fault walk (%s): %ld allocations per request, stride %ld: %d failed with an "
            "error, %d survived the failure\n", tools ? "tool call" : "schema", total, stride, failed, survived);
    assert_true(failed > 0);
}

static void test_alloc_walk(void **state) {
    (void)state;
    walk(false);
}

static void test_alloc_walk_tools(void **state) {
    (void)state;
    walk(true);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_walk),
        cmocka_unit_test(test_alloc_walk_tools),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
