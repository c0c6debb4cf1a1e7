/* Tool calls: detection on the real templates, parsing of each format's
 * output (several calls, content around them, look-alike text, malformed
 * and unterminated calls, unicode), the same result for every chunking,
 * the call schema, and a round trip through each real template. */
#include "chat/chat.h"
#include "chat/toolcall.h"
#include "grammar/grammar.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------- */

static json_t *js(const char *s) {
    json_error_t je;
    json_t *j = json_loads(s, JSON_DECODE_ANY, &je);
    if (!j)
        fail_msg("bad JSON in test: %s: %s", je.text, s);
    return j;
}

static char *slurp(const char *rel) {
    const char *root = getenv("HEARTH_ROOT");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root ? root : ".", rel);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    return s;
}

/* What a whole output parses to: the content, and the calls as
 * [{"name": ..., "arguments": <parsed>}]. */
typedef struct result {
    char *content;
    size_t len;
    json_t *calls;
} result;

static void result_free(result *r) {
    free(r->content);
    json_decref(r->calls);
}

/* "call_" + 24 alphanumerics, or 9 alphanumerics for Mistral's formats */
static void check_id(const char *id) {
    size_t n = strlen(id), from = 0;
    if (n != 9) {
        assert_int_equal(n, 29);
        assert_memory_equal(id, "call_", 5);
        from = 5;
    }
    for (size_t i = from; i < n; i++)
        assert_true((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
                    (id[i] >= '0' && id[i] <= '9'));
}

typedef struct collector {
    result r;
    size_t cap;
    char *args;
    size_t nargs;
    int open;
} collector;

static void collect(collector *c, const hr_tool_events *ev) {
    for (size_t e = 0; e < ev->n; e++) {
        const hr_tool_event *v = &ev->ev[e];
        switch (v->kind) {
        case HR_TOOL_EV_CONTENT:
            assert_true(v->len > 0);
            assert_true(c->r.len + v->len <= c->cap);
            assert_int_equal(strlen(v->text), v->len);
            memcpy(c->r.content + c->r.len, v->text, v->len);
            c->r.len += v->len;
            break;
        case HR_TOOL_EV_CALL_START:
            assert_int_equal(c->open, -1);
            assert_int_equal(v->index, (int)json_array_size(c->r.calls));
            check_id(v->id);
            c->open = v->index;
            json_array_append_new(c->r.calls, json_pack("{s:s}", "name", v->name));
            c->nargs = 0;
            break;
        case HR_TOOL_EV_CALL_ARGS:
            assert_int_equal(v->index, c->open);
            c->args = realloc(c->args, c->nargs + v->len + 1);
            memcpy(c->args + c->nargs, v->text, v->len);
            c->nargs += v->len;
            c->args[c->nargs] = 0;
            break;
        case HR_TOOL_EV_CALL_END: {
            assert_int_equal(v->index, c->open);
            json_t *a = js(c->nargs ? c->args : "null");
            assert_true(json_is_object(a));
            json_object_set_new(json_array_get(c->r.calls, (size_t)c->open), "arguments", a);
            c->open = -1;
            break;
        }
        }
    }
}

/* Feed text in pieces of `chunk` bytes (0: all at once), then finish. */
static result run_chunked(const hr_tool_format *f, const json_t *tools, const char *text,
                          size_t n, size_t chunk) {
    hr_tool_parser *p;
    hr_error err;
    hr_tool_parser_opts o = {.tools = tools, .seed = 42};
    assert_int_equal(hr_tool_parser_new(&p, f, &o, &err), 0);
    collector c = {{calloc(1, n + 1), 0, json_array()}, n, NULL, 0, -1};
    hr_tool_events ev = {0};
    size_t step = chunk ? chunk : n;
    for (size_t i = 0; i < n; i += step) {
        hr_tool_events_reset(&ev);
        assert_int_equal(hr_tool_parser_push(p, text + i, n - i < step ? n - i : step, &ev), 0);
        collect(&c, &ev);
    }
    hr_tool_events_reset(&ev);
    assert_int_equal(hr_tool_parser_finish(p, &ev), 0);
    collect(&c, &ev);
    assert_int_equal(c.open, -1);
    assert_int_equal(hr_tool_parser_calls(p), (int)json_array_size(c.r.calls));
    assert_int_equal(hr_tool_parser_push(p, "x", 1, &ev), HR_EINVAL); /* after finish */
    free(c.args);
    hr_tool_events_free(&ev);
    hr_tool_parser_free(p);
    return c.r;
}

/* Parse text whole, then in every chunk size, expecting the same result;
 * then compare with the expected content and calls. */
static void expect(const char *fmt, const json_t *tools, const char *text, const char *content,
                   const char *calls) {
    const hr_tool_format *f = hr_tool_format_by_name(fmt);
    if (!f)
        fail_msg("no format %s", fmt);
    size_t n = strlen(text);
    result whole = run_chunked(f, tools, text, n, 0);
    for (size_t c = 1; c <= n; c++) {
        result r = run_chunked(f, tools, text, n, c);
        if (r.len != whole.len || memcmp(r.content, whole.content, r.len) ||
            !json_equal(r.calls, whole.calls))
            fail_msg("%s: chunk size %zu differs on: %s", fmt, c, text);
        result_free(&r);
    }
    if (strcmp(whole.content, content))
        fail_msg("%s: content\n  got: [%s]\n want: [%s]", fmt, whole.content, content);
    json_t *want = js(calls);
    if (!json_equal(want, whole.calls)) {
        char *got = json_dumps(whole.calls, 0);
        fail_msg("%s: calls\n  got: %s\n want: %s", fmt, got, calls);
    }
    json_decref(want);
    result_free(&whole);
}

#define NO_CALLS "[]"
#define WEATHER "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}]"

static const char *const tool_list =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
    "\"days\":{\"type\":\"integer\"}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"description\":\"Time\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"tz\":{\"type\":\"string\"}}}}}]";

/* ---- detection ------------------------------------------------------------------ */

static const struct {
    const char *file, *format; /* NULL: no tool calls we parse */
} templates[] = {
    {"Apertus-8B-Instruct", "apertus"},
    {"Apriel-1.6-15b-Thinker-fixed", "tool_calls_json"},
    {"Bielik-11B-v3.0-Instruct", "hermes"},
    {"ByteDance-Seed-OSS", "seed_oss"},
    {"Cohere2MoE", "command_r7b"},
    {"CohereForAI-c4ai-command-r-plus-tool_use", NULL},
    {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", "command_r7b"},
    {"GLM-4.6", "glm"},
    {"GLM-4.7-Flash", "glm"},
    {"GigaChat3-10B-A1.8B", NULL},
    {"GigaChat3.1-10B-A1.8B", "gigachat"},
    {"HuggingFaceTB-SmolLM3-3B", NULL}, /* this copy has no xml_tools section */
    {"Kimi-K2-Instruct", "kimi_k2"},
    {"Kimi-K2-Thinking", "kimi_k2"},
    {"Kimi-K3", NULL},
    {"LFM2-8B-A1B", NULL},
    {"LFM2.5-8B-A1B", NULL},
    {"LFM2.5-Instruct", NULL},
    {"MiMo-VL", "hermes"},
    {"MiniMax-M1", "tool_calls_json"},
    {"MiniMax-M2", "minimax_m2"},
    {"MiniMax-M3", NULL},
    {"Mistral-Small-3.2-24B-Instruct-2506", "mistral_args"},
    {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "qwen3_coder"},
    {"NVIDIA-Nemotron-Nano-v2", "nemotron_v2"},
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "hermes"},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "hermes"},
    {"Qwen-QwQ-32B", "hermes"},
    {"Qwen-Qwen2.5-7B-Instruct", "hermes"},
    {"Qwen-Qwen3-0.6B", "hermes"},
    {"Qwen3-Coder", "qwen3_coder"},
    {"Qwen3.5-4B", "qwen3_coder"},
    {"Reka-Edge", "hermes"},
    {"StepFun3.5-Flash", "qwen3_coder"},
    {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "deepseek_r1"},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek_r1"},
    {"deepseek-ai-DeepSeek-V3.1", "deepseek_v31"},
    {"deepseek-ai-DeepSeek-V3.2", "deepseek_v32"},
    {"deepseek-ai-DeepSeek-V4-Flash-0731", "deepseek_v4"},
    {"deepseek-ai-DeepSeek-V4", "deepseek_v4"},
    {"fireworks-ai-llama-3-firefunction-v2", "firefunction"},
    {"google-gemma-2-2b-it", NULL},
    {"google-gemma-4-31B-it-interleaved", "gemma4"},
    {"google-gemma-4-31B-it", "gemma4"},
    {"ibm-granite-granite-3.3-2B-Instruct", "granite"},
    {"ibm-granite-granite-4.0", "hermes"},
    {"ibm-granite-granite-4.1", "hermes"},
    {"llama-cpp-deepseek-r1", "deepseek_r1"},
    {"llama-cpp-rwkv-world", NULL},
    {"meetkai-functionary-medium-v3.1", "functionary_v31"},
    {"meetkai-functionary-medium-v3.2", NULL}, /* >>>recipient protocol: not yet */
    {"meta-llama-Llama-3.1-8B-Instruct", "llama3"},
    {"meta-llama-Llama-3.2-3B-Instruct", "llama3"},
    {"meta-llama-Llama-3.3-70B-Instruct", "llama3"},
    {"microsoft-Phi-3.5-mini-instruct", NULL},
    {"mistralai-Ministral-3-14B-Reasoning-2512", "mistral_args"},
    {"mistralai-Mistral-Nemo-Instruct-2407", "mistral"},
    {"moonshotai-Kimi-K2", "kimi_k2"},
    {"muse-glimmer", "atem"},
    {"openai-gpt-oss-120b", NULL},
    {"openbmb-MiniCPM5-1B", "minicpm5"},
    {"poolside-Laguna-S-2.1", "glm"},
    {"poolside-Laguna-XS-2.1", "glm"},
    {"poolside-Laguna-XS.2", "glm"},
    {"tencent-Hy3", "hunyuan3"},
    {"unsloth-Apriel-1.5", "tool_calls_json"},
    {"unsloth-mistral-Devstral-Small-2507", "mistral_args"},
    {"upstage-Solar-Open-100B", "solar"},
};

#define N_TEMPLATES (sizeof templates / sizeof templates[0])

static char *template_src(size_t i) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fixtures/chat/templates/%s.jinja", templates[i].file);
    return slurp(rel);
}

static void test_detect(void **state) {
    (void)state;
    assert_int_equal(N_TEMPLATES, 68);
    for (size_t i = 0; i < N_TEMPLATES; i++) {
        char *src = template_src(i);
        const hr_tool_format *f = hr_tool_format_detect(src);
        const char *got = f ? hr_tool_format_name(f) : "(none)";
        const char *want = templates[i].format ? templates[i].format : "(none)";
        if (strcmp(got, want))
            fail_msg("%s: detected %s, want %s", templates[i].file, got, want);
        free(src);
    }
    assert_null(hr_tool_format_detect(NULL));
    assert_null(hr_tool_format_detect(""));
    assert_null(hr_tool_format_by_name("nope"));
    assert_null(hr_tool_format_by_name(NULL));
    assert_null(hr_tool_format_name(NULL));
    assert_null(hr_tool_format_at(hr_tool_format_count()));
    for (size_t i = 0; i < hr_tool_format_count(); i++) /* names are unique keys */
        assert_ptr_equal(hr_tool_format_by_name(hr_tool_format_name(hr_tool_format_at(i))),
                         hr_tool_format_at(i));
}

/* ---- parsing, per format ------------------------------------------------------------- */

static void test_hermes(void **state) {
    (void)state;
    expect("hermes", NULL, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
           "", WEATHER);
    /* content first, two calls, content after; unicode and numbers kept as written */
    expect("hermes", NULL,
           "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
           "\"Z\xc3\xbcrich \xe6\x9d\xb1\xe4\xba\xac \\u00e9\", \"days\": 0.10}}\n</tool_call>\n"
           "<tool_call>\n{\"arguments\": {}, \"name\": \"get_time\"}\n</tool_call>done",
           "Let me check.\n\ndone",
           "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Z\xc3\xbcrich \xe6\x9d\xb1\xe4\xba\xac "
           "\xc3\xa9\",\"days\":0.1}},{\"name\":\"get_time\",\"arguments\":{}}]");
    /* look-alikes stay text */
    expect("hermes", NULL, "a <tool_cal b <tool_call c </tool_call> <tool", "a <tool_cal b <tool_call c </tool_call> <tool",
           NO_CALLS);
    /* malformed JSON, a non-call object, a missing name: text, byte for byte */
    expect("hermes", NULL, "x<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>y",
           "x<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>y", NO_CALLS);
    expect("hermes", NULL, "<tool_call>[1, 2]</tool_call>", "<tool_call>[1, 2]</tool_call>", NO_CALLS);
    expect("hermes", NULL, "<tool_call>{\"arguments\": {}}</tool_call>",
           "<tool_call>{\"arguments\": {}}</tool_call>", NO_CALLS);
    expect("hermes", NULL, "<tool_call>{\"name\": \"a b\"}</tool_call>",
           "<tool_call>{\"name\": \"a b\"}</tool_call>", NO_CALLS);
    /* unterminated at the end: text */
    expect("hermes", NULL, "ok <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}",
           "ok <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}", NO_CALLS);
    /* a bad call, then a good one: only the bad one is text */
    expect("hermes", NULL, "<tool_call>oops</tool_call><tool_call>{\"name\": \"get_weather\", \"arguments\": "
           "{\"city\": \"Paris\"}}</tool_call>", "<tool_call>oops</tool_call>", WEATHER);
    /* arguments given as a JSON string; missing arguments are {} */
    expect("hermes", NULL, "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}</tool_call>",
           "", WEATHER);
    expect("hermes", NULL, "<tool_call>{\"name\": \"get_time\"}</tool_call>", "",
           "[{\"name\":\"get_time\",\"arguments\":{}}]");
    /* the close marker inside an argument string ends the region (as mlx-lm does) */
    expect("hermes", NULL, "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"</tool_call>\"}}</tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"</tool_call>\"}}</tool_call>", NO_CALLS);
    expect("hermes", NULL, "", "", NO_CALLS);
}

static void test_llama3(void **state) {
    (void)state;
    expect("llama3", NULL, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", WEATHER);
    expect("llama3", NULL, "\n {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", "", WEATHER);
    expect("llama3", NULL, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
           "", WEATHER);
    /* JSON that is not a call, JSON after text, builtin-tool code: text */
    expect("llama3", NULL, "{\"answer\": 42}", "{\"answer\": 42}", NO_CALLS);
    expect("llama3", NULL, "Sure: {\"name\": \"get_weather\", \"parameters\": {}}",
           "Sure: {\"name\": \"get_weather\", \"parameters\": {}}", NO_CALLS);
    expect("llama3", NULL, "<|python_tag|>brave_search.call(query=\"x\")",
           "<|python_tag|>brave_search.call(query=\"x\")", NO_CALLS);
    expect("llama3", NULL, "{\"name\": \"get_weather\", \"parameters\": {\"city\": ",
           "{\"name\": \"get_weather\", \"parameters\": {\"city\": ", NO_CALLS);
    expect("llama3", NULL, "  ", "  ", NO_CALLS);
}

static void test_mistral(void **state) {
    (void)state;
    expect("mistral", NULL,
           "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
           "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}]",
           "", "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}},"
               "{\"name\":\"get_time\",\"arguments\":{\"tz\":\"UTC\"}}]");
    expect("mistral", NULL, "[TOOL_CALLS] nope", "[TOOL_CALLS] nope", NO_CALLS);
    expect("mistral_args", NULL,
           "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}",
           "", "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}},"
               "{\"name\":\"get_time\",\"arguments\":{}}]");
    expect("mistral_args", NULL, "I think [TOOL_CALLS] are neat [ARGS]{}",
           "I think [TOOL_CALLS] are neat [ARGS]{}", NO_CALLS);
    /* [ARGS] must come within a name's length of [TOOL_CALLS] */
    char longhdr[400];
    snprintf(longhdr, sizeof longhdr, "[TOOL_CALLS]%0310d[ARGS]{}", 0);
    expect("mistral_args", NULL, longhdr, longhdr, NO_CALLS);
    expect("mistral_args", NULL, "[TOOL_CALLS]get_weather[ARGS]{\"city\": ",
           "[TOOL_CALLS]get_weather[ARGS]{\"city\": ", NO_CALLS);
}

static void test_gemma_granite_misc(void **state) {
    (void)state;
    expect("gemma4", NULL, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>", "", WEATHER);
    expect("gemma4", NULL,
           "<|tool_call>call:get_weather{city:<|\"|>a, b: {c}<|\"|>,days:3,x:{y:[true,null]}}"
           "call:get_time{}<tool_call|>",
           "", "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"a, b: {c}\",\"days\":3,"
               "\"x\":{\"y\":[true,null]}}},{\"name\":\"get_time\",\"arguments\":{}}]");
    expect("gemma4", NULL, "<|tool_call>call:f{x:<|\"|>open}<tool_call|>",
           "<|tool_call>call:f{x:<|\"|>open}<tool_call|>", NO_CALLS);
    expect("granite", NULL, "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
           "", WEATHER);
    expect("command_r7b", NULL,
           "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", "
           "\"parameters\": {\"city\": \"Paris\"}}\n]<|END_ACTION|>", "", WEATHER);
    expect("apertus", NULL, "<|tools_prefix|>[{\"get_weather\": {\"city\": \"Paris\"}}]<|tools_suffix|>", "", WEATHER);
    expect("kimi_k2", NULL,
           "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
           "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>",
           "", WEATHER);
    expect("deepseek_v31", NULL,
           "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c><\xef\xbd\x9ctool"
           "\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>get_weather<\xef\xbd\x9ctool\xe2\x96\x81"
           "sep\xef\xbd\x9c>{\"city\": \"Paris\"}<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81"
           "end\xef\xbd\x9c><\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>",
           "", WEATHER);
    expect("solar", NULL,
           "<|tool_calls|><|tool_call:begin|>abc<|tool_call:name|>get_weather<|tool_call:args|>"
           "{\"city\": \"Paris\"}<|tool_call:end|>", "<|tool_calls|>", WEATHER);
    expect("functionary_v31", NULL, "<function=get_weather>{\"city\": \"Paris\"}</function>", "", WEATHER);
    expect("nemotron_v2", NULL, "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]</TOOLCALL>",
           "", WEATHER);
    expect("tool_calls_json", NULL,
           "<tool_calls>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
           "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_calls>",
           "", "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}},"
               "{\"name\":\"get_time\",\"arguments\":{}}]");
    expect("gigachat", NULL, "<|function_call|>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
           "", WEATHER);
    expect("firefunction", NULL, " functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
           " ", WEATHER);
}

static void test_xml(void **state) {
    (void)state;
    json_t *tools = js(tool_list);
    const char *qwen = "<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n"
                       "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
    /* typed by the tools: city is a string even when it looks like a number */
    expect("qwen3_coder", tools, qwen, "", "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"42\",\"days\":3}}]");
    expect("qwen3_coder", NULL, qwen, "", "[{\"name\":\"get_weather\",\"arguments\":{\"city\":42,\"days\":3}}]");
    expect("qwen3_coder", tools,
           "<tool_call>\n<function=get_weather>\n<parameter=city>\nline1\n\"q\"\n</parameter>\n</function>\n</tool_call>",
           "", "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"line1\\n\\\"q\\\"\"}}]");
    expect("qwen3_coder", tools, "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</function>\n</tool_call>",
           "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</function>\n</tool_call>", NO_CALLS);
    expect("glm", tools, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
           "", WEATHER);
    expect("minimax_m2", tools,
           "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n"
           "</invoke>\n<invoke name=\"get_time\">\n</invoke>\n</minimax:tool_call>",
           "", "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}},{\"name\":\"get_time\",\"arguments\":{}}]");
    /* DSML's string="false" marks JSON values */
    expect("deepseek_v32", NULL,
           "<\xef\xbd\x9c" "DSML\xef\xbd\x9c" "function_calls>\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c"
           "invoke name=\"get_weather\">\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c" "parameter name=\"city\" "
           "string=\"true\">7</\xef\xbd\x9c" "DSML\xef\xbd\x9c" "parameter>\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c"
           "parameter name=\"days\" string=\"false\">7</\xef\xbd\x9c" "DSML\xef\xbd\x9c" "parameter>\n"
           "</\xef\xbd\x9c" "DSML\xef\xbd\x9c" "invoke>\n</\xef\xbd\x9c" "DSML\xef\xbd\x9c" "function_calls>",
           "", "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"7\",\"days\":7}}]");
    expect("minicpm5", tools,
           "<function name=\"get_weather\"><param name=\"city\"><![CDATA[a<b]]></param></function>", "",
           "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"a<b\"}}]");
    json_decref(tools);
}

/* ---- events, errors ---------------------------------------------------------------------- */

static void test_api(void **state) {
    (void)state;
    hr_tool_parser *p;
    hr_error err;
    assert_int_equal(hr_tool_parser_new(&p, NULL, NULL, &err), HR_EINVAL);
    assert_null(p);
    hr_tool_parser_free(NULL);
    hr_tool_events_free(NULL);
    assert_int_equal(hr_tool_parser_calls(NULL), 0);
    assert_int_equal(hr_tool_parser_new(&p, hr_tool_format_by_name("hermes"), NULL, &err), 0);
    hr_tool_events ev = {0};
    /* held back while it may be a marker; content coalesces into one event */
    assert_int_equal(hr_tool_parser_push(p, "ab<tool", 7, &ev), 0);
    assert_int_equal(ev.n, 1);
    assert_string_equal(ev.ev[0].text, "ab");
    assert_int_equal(hr_tool_parser_push(p, "_ca", 3, &ev), 0);
    assert_int_equal(ev.n, 1);
    assert_int_equal(hr_tool_parser_push(p, "t", 1, &ev), 0); /* "<tool_cat": not a marker */
    assert_int_equal(ev.n, 1);
    assert_string_equal(ev.ev[0].text, "ab<tool_cat");
    assert_int_equal(hr_tool_parser_push(p, NULL, 1, &ev), HR_EINVAL);
    const char *call = "<tool_call>{\"name\":\"f\"}</tool_call>";
    assert_int_equal(hr_tool_parser_push(p, call, strlen(call), &ev), 0);
    assert_int_equal(ev.n, 4);
    assert_int_equal(ev.ev[1].kind, HR_TOOL_EV_CALL_START);
    assert_string_equal(ev.ev[1].name, "f");
    assert_int_equal(ev.ev[2].kind, HR_TOOL_EV_CALL_ARGS);
    assert_string_equal(ev.ev[2].text, "{}");
    assert_int_equal(ev.ev[3].kind, HR_TOOL_EV_CALL_END);
    assert_int_equal(hr_tool_parser_calls(p), 1);
    hr_tool_events_reset(&ev);
    assert_int_equal(hr_tool_parser_finish(p, &ev), 0);
    assert_int_equal(ev.n, 0);
    assert_int_equal(hr_tool_parser_finish(p, &ev), HR_EINVAL);
    hr_tool_parser_free(p);
    /* ids differ between calls and between parsers seeded from the clock */
    hr_tool_parser *a, *b;
    assert_int_equal(hr_tool_parser_new(&a, hr_tool_format_by_name("hermes"), NULL, &err), 0);
    assert_int_equal(hr_tool_parser_new(&b, hr_tool_format_by_name("hermes"), NULL, &err), 0);
    hr_tool_events ea = {0}, eb = {0};
    const char *two = "<tool_call>{\"name\":\"f\"}</tool_call><tool_call>{\"name\":\"f\"}</tool_call>";
    assert_int_equal(hr_tool_parser_push(a, two, strlen(two), &ea), 0);
    assert_int_equal(hr_tool_parser_push(b, two, strlen(two), &eb), 0);
    assert_int_equal(ea.n, 6);
    check_id(ea.ev[0].id);
    assert_string_not_equal(ea.ev[0].id, ea.ev[3].id);
    assert_string_not_equal(ea.ev[0].id, eb.ev[0].id);
    hr_tool_events_free(&ea);
    hr_tool_events_free(&eb);
    hr_tool_events_free(&ev);
    hr_tool_parser_free(a);
    hr_tool_parser_free(b);
}

/* ---- call schema -------------------------------------------------------------------------- */

static void test_schema(void **state) {
    (void)state;
    json_t *tools = js(tool_list);
    char *out;
    hr_error err;
    assert_int_equal(hr_tool_format_call_schema(hr_tool_format_by_name("hermes"), tools, NULL, &out, &err), 0);
    json_t *j = js(out);
    json_t *alt = json_array_get(json_object_get(j, "alternatives"), 0);
    assert_string_equal(json_string_value(json_object_get(alt, "prefix")), "<tool_call>\n");
    assert_string_equal(json_string_value(json_object_get(alt, "suffix")), "\n</tool_call>");
    assert_true(json_is_null(json_object_get(alt, "name")));
    assert_int_equal(json_array_size(json_object_get(json_object_get(alt, "schema"), "anyOf")), 2);
    json_decref(j);
    free(out);
    /* a named function, a list format */
    assert_int_equal(hr_tool_format_call_schema(hr_tool_format_by_name("mistral"), tools, "get_time", &out, &err), 0);
    j = js(out);
    alt = json_array_get(json_object_get(j, "alternatives"), 0);
    json_t *sc = json_object_get(alt, "schema");
    assert_string_equal(json_string_value(json_object_get(sc, "type")), "array");
    json_t *nm = json_object_get(json_object_get(json_object_get(sc, "items"), "properties"), "name");
    assert_string_equal(json_string_value(json_object_get(nm, "const")), "get_time");
    json_decref(j);
    free(out);
    /* name outside the JSON: one alternative per tool */
    assert_int_equal(hr_tool_format_call_schema(hr_tool_format_by_name("mistral_args"), tools, NULL, &out, &err), 0);
    j = js(out);
    assert_int_equal(json_array_size(json_object_get(j, "alternatives")), 2);
    alt = json_array_get(json_object_get(j, "alternatives"), 1);
    assert_string_equal(json_string_value(json_object_get(alt, "prefix")), "[TOOL_CALLS]get_time[ARGS]");
    json_decref(j);
    free(out);
    /* errors */
    assert_int_equal(hr_tool_format_call_schema(hr_tool_format_by_name("qwen3_coder"), tools, NULL, &out, &err),
                     HR_EUNSUPPORTED);
    assert_int_equal(hr_tool_format_call_schema(hr_tool_format_by_name("hermes"), tools, "nope", &out, &err),
                     HR_EINVAL);
    assert_non_null(strstr(err.msg, "nope"));
    assert_int_equal(hr_tool_format_call_schema(hr_tool_format_by_name("hermes"), NULL, NULL, &out, &err),
                     HR_EINVAL);
    assert_int_equal(hr_tool_format_call_schema(NULL, tools, NULL, &out, &err), HR_EINVAL);
    json_t *bad = js("[{\"type\":\"function\"}]");
    assert_int_equal(hr_tool_format_call_schema(hr_tool_format_by_name("hermes"), bad, NULL, &out, &err), HR_EINVAL);
    assert_null(out);
    json_decref(bad);
    json_decref(tools);
}

/* Pydantic's schemas: local $defs / definitions references, a recursive
 * one and "#" itself, written against the tool's parameters. Compiled as
 * the server compiles them (hr__llm_tool_grammar) and matched against a
 * call; a remote $ref is refused. Returns 1 accepted, 0 not, -rc when the
 * grammar did not compile. */
static const char *const pydantic_tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"plan\",\"parameters\":{"
    "\"$defs\":{\"Step\":{\"type\":\"object\",\"properties\":{\"do\":{\"type\":\"string\","
    "\"maxLength\":8},\"then\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/Step\"}}},"
    "\"required\":[\"do\"],\"additionalProperties\":false}},"
    "\"type\":\"object\",\"properties\":{\"first\":{\"$ref\":\"#/$defs/Step\"},"
    "\"kind\":{\"$ref\":\"#/definitions/Kind\"}},\"definitions\":{\"Kind\":{\"enum\":[\"a\",\"b\"]}},"
    "\"required\":[\"first\",\"kind\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"tree\",\"parameters\":{\"$id\":\"urn:t\","
    "\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"sub\":{\"$ref\":\"#\"},"
    "\"alt\":{\"$ref\":\"urn:t#/properties/v\"}},\"additionalProperties\":false}}}]";

static int call_matches(const char *format, const char *tools_json, const char *only,
                        const char *text) {
    json_t *tools = js(tools_json);
    char *shape;
    hr_error err = {0};
    assert_int_equal(hr_tool_format_call_schema(hr_tool_format_by_name(format), tools, only,
                                                &shape, &err), 0);
    json_t *j = js(shape);
    json_t *alts = json_object_get(j, "alternatives");
    size_t n = json_array_size(alts);
    const char *pre[4], *suf[4];
    const json_t *sch[4];
    assert_true(n <= 4);
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(alts, i);
        pre[i] = json_string_value(json_object_get(a, "prefix"));
        suf[i] = json_string_value(json_object_get(a, "suffix"));
        sch[i] = json_object_get(a, "schema");
    }
    hr_grammar *g = NULL;
    int rc = hr_grammar_from_wrapped_schemas(&g, pre, sch, suf, (int)n, &err), ok = -rc;
    if (!rc) {
        hr_matcher *m;
        assert_int_equal(hr_matcher_new(&m, g, NULL, NULL), 0);
        ok = !hr_matcher_accept_bytes(m, text, strlen(text), NULL) && hr_matcher_can_end(m);
        hr_matcher_free(m);
    } else if (rc == HR_EUNSUPPORTED) {
        assert_non_null(strstr(err.msg, "outside the schema"));
    }
    hr_grammar_free(g);
    json_decref(j);
    free(shape);
    json_decref(tools);
    return ok;
}

static void test_schema_refs(void **state) {
    (void)state;
    const char *plan = "{\"first\": {\"do\": \"go\", \"then\": [{\"do\": \"stop\", \"then\": []}]}, "
                       "\"kind\": \"a\"}";
    const char *tree = "{\"v\": 1, \"sub\": {\"sub\": {\"v\": 2}}, \"alt\": 3}";
    char buf[512];
    /* several calls (anyOf), one named call, a list format, a name-as-key format */
    snprintf(buf, sizeof buf, "<tool_call>\n{\"name\": \"plan\", \"arguments\": %s}\n</tool_call>",
             plan);
    assert_int_equal(call_matches("hermes", pydantic_tools, NULL, buf), 1);
    snprintf(buf, sizeof buf, "<tool_call>\n{\"name\": \"tree\", \"arguments\": %s}\n</tool_call>",
             tree);
    assert_int_equal(call_matches("hermes", pydantic_tools, NULL, buf), 1);
    assert_int_equal(call_matches("hermes", pydantic_tools, "tree", buf), 1);
    /* the references still constrain: a step without "do", a kind outside the enum */
    assert_int_equal(call_matches("hermes", pydantic_tools, NULL,
                                  "<tool_call>\n{\"name\": \"plan\", \"arguments\": {\"first\": "
                                  "{\"then\": []}, \"kind\": \"a\"}}\n</tool_call>"), 0);
    assert_int_equal(call_matches("hermes", pydantic_tools, NULL,
                                  "<tool_call>\n{\"name\": \"plan\", \"arguments\": {\"first\": "
                                  "{\"do\": \"x\"}, \"kind\": \"c\"}}\n</tool_call>"), 0);
    snprintf(buf, sizeof buf, "[TOOL_CALLS][{\"name\": \"plan\", \"arguments\": %s}]", plan);
    assert_int_equal(call_matches("mistral", pydantic_tools, NULL, buf), 1);
    assert_int_equal(call_matches("mistral", pydantic_tools, "plan", buf), 1);
    snprintf(buf, sizeof buf, "[TOOL_CALLS]tree[ARGS]%s", tree);
    assert_int_equal(call_matches("mistral_args", pydantic_tools, NULL, buf), 1);
    snprintf(buf, sizeof buf, "<|tools_prefix|>[{\"tree\": %s}]<|tools_suffix|>", tree);
    assert_int_equal(call_matches("apertus", pydantic_tools, NULL, buf), 1);
    /* a remote reference is refused with a clear error */
    assert_int_equal(call_matches("hermes",
                                  "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                                  "{\"$ref\":\"https://example.com/s.json#/x\"}}}]",
                                  NULL, "x"),
                     -HR_EUNSUPPORTED);
}

/* ---- round trip through the real templates ------------------------------------------------ */

#define RT_CALLS                                                                               \
    "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Z\xc3\xbcrich \xe6\x9d\xb1\xe4\xba\xac\"," \
    "\"days\":3}},{\"name\":\"get_time\",\"arguments\":{\"tz\":\"Europe/Paris\"}}]"

/* The conversation: the assistant's content "" or null, its arguments
 * objects (as the server passes them) or JSON strings (as clients send). */
static json_t *conversation(int variant, int two) {
    const char *content = variant == 0 ? "\"\"" : "null";
    const char *a1 = "{\"city\":\"Z\xc3\xbcrich \xe6\x9d\xb1\xe4\xba\xac\",\"days\":3}";
    const char *a2 = "{\"tz\":\"Europe/Paris\"}";
    char buf[2048];
    json_t *s1 = json_string(a1), *s2 = json_string(a2);
    char *q1 = json_dumps(s1, JSON_ENCODE_ANY), *q2 = json_dumps(s2, JSON_ENCODE_ANY);
    snprintf(buf, sizeof buf,
             "[{\"role\":\"user\",\"content\":\"What is the weather?\"},"
             "{\"role\":\"assistant\",\"content\":%s,\"tool_calls\":["
             "{\"id\":\"abc123def\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
             "\"arguments\":%s}},"
             "{\"id\":\"xyz789ghi\",\"type\":\"function\",\"function\":{\"name\":\"get_time\","
             "\"arguments\":%s}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"abc123def\",\"name\":\"get_weather\",\"content\":\"RESULT-ONE\"},"
             "{\"role\":\"tool\",\"tool_call_id\":\"xyz789ghi\",\"name\":\"get_time\",\"content\":\"RESULT-TWO\"}]",
             content, variant == 2 ? q1 : a1, variant == 2 ? q2 : a2);
    free(q1);
    free(q2);
    json_decref(s1);
    json_decref(s2);
    json_t *conv = js(buf);
    if (!two) { /* one call and its result */
        json_array_remove(json_object_get(json_array_get(conv, 1), "tool_calls"), 1);
        json_array_remove(conv, 3);
    }
    return conv;
}

/* Render conv by template i; parse the assistant turn back. 0: the calls
 * came back; 1: the render failed; 2: other calls came back (*got). */
static int roundtrip_one(size_t i, const char *src, json_t *conv, json_t *tools, json_t *want,
                         char **got) {
    json_t *user = js("[{\"role\":\"user\",\"content\":\"What is the weather?\"}]");
    hr_chat_opts o = {.bos_token = "<s>", .eos_token = "</s>", .add_generation_prompt = 1,
                      .has_now = 1, .now = 1721952000};
    char *full = NULL, *prompt = NULL;
    hr_error err;
    int rc = 1;
    /* FireFunction reads its tools from a `functions` string, and a `datetime` */
    char *fs = json_dumps(tools, 0);
    json_t *kw = json_pack("{s:s, s:s}", "functions", fs, "datetime", "2024-07-26");
    free(fs);
    int bad = hr_chat_render(src, conv, tools, kw, &o, &full, &err) ||
              hr_chat_render(src, user, tools, kw, &o, &prompt, &err);
    json_decref(kw);
    if (bad)
        goto done;
    /* the assistant turn: after the generation prompt when the render
     * extends it, else after the user's message */
    const char *turn = full;
    size_t np = strlen(prompt);
    if (!strncmp(full, prompt, np)) {
        turn = full + np;
    } else {
        const char *u = strstr(full, "What is the weather?");
        assert_non_null(u);
        turn = u + strlen("What is the weather?");
    }
    /* tool results round-trip too: both are in the prompt, after the calls */
    const char *r1 = strstr(turn, "RESULT-ONE"), *r2 = strstr(turn, "RESULT-TWO");
    rc = 2;
    if (!r1 || (!r2 && json_array_size(conv) == 4)) {
        *got = strdup("(tool results missing)");
        goto done;
    }
    result r = run_chunked(hr_tool_format_by_name(templates[i].format), tools, turn,
                           (size_t)(r1 - turn), 0);
    if (json_equal(r.calls, want)) {
        rc = 0;
    } else {
        char *c = json_dumps(r.calls, 0);
        size_t n = strlen(c) + (size_t)(r1 - turn) + 16;
        *got = malloc(n);
        snprintf(*got, n, "%s from %.*s", c, (int)(r1 - turn), turn);
        free(c);
    }
    result_free(&r);
done:
    free(full);
    free(prompt);
    json_decref(user);
    return rc;
}

/* An assistant turn with two calls and their results, rendered by each real
 * template that has a format; the text the template writes for the
 * assistant turn must parse back to the same calls. */
static void test_roundtrip(void **state) {
    (void)state;
    json_t *tools = js(tool_list);
    int checked = 0;
    for (size_t i = 0; i < N_TEMPLATES; i++) {
        if (!templates[i].format)
            continue;
        char *src = template_src(i), *got = NULL;
        json_t *want = js(RT_CALLS);
        /* GigaChat's template writes one call per turn (its models call one at a time) */
        if (!strcmp(templates[i].file, "GigaChat3.1-10B-A1.8B"))
            json_array_remove(want, 1);
        /* Granite 3.3's template drops an assistant turn's tool_calls */
        if (!strcmp(templates[i].file, "ibm-granite-granite-3.3-2B-Instruct"))
            json_array_clear(want);
        int rc = 1;
        /* Llama 3.x templates refuse two calls in one turn */
        for (int v = 0; v < 6 && rc; v++) {
            if (v == 3 && rc == 1)
                json_array_remove(want, 1);
            else if (v == 3)
                break;
            json_t *conv = conversation(v % 3, v < 3);
            char *g = NULL;
            int r = roundtrip_one(i, src, conv, tools, want, &g);
            if (r != 1 || rc == 1) {
                rc = r;
                free(got);
                got = g;
            } else {
                free(g);
            }
            json_decref(conv);
        }
        /* these fail under transformers too: Kimi-K2-Instruct / -Thinking call
         * list.append() (refused by the sandbox), llama.cpp's DeepSeek R1
         * template pipes map() into tojson (a generator) */
        if (rc == 1 && strncmp(templates[i].file, "Kimi-K2-", 8) &&
            strcmp(templates[i].file, "llama-cpp-deepseek-r1"))
            fail_msg("%s: no conversation renders", templates[i].file);
        if (rc == 2)
            fail_msg("%s (%s): calls %s", templates[i].file, templates[i].format, got);
        checked += rc == 0;
        free(got);
        json_decref(want);
        free(src);
    }
    print_message("round trip: %d templates\n", checked);
    assert_true(checked >= 40);
    json_decref(tools);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_hermes),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_mistral),
        cmocka_unit_test(test_gemma_granite_misc),
        cmocka_unit_test(test_xml),
        cmocka_unit_test(test_api),
        cmocka_unit_test(test_schema),
        cmocka_unit_test(test_schema_refs),
        cmocka_unit_test(test_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
