/* The other APIs' requests as chat requests (anthropic.c, responses.c), and
 * errors in Anthropic's shape. The served behaviour is in tests/e2e
 * (messages.sh, responses.sh); these pin the mapping itself. */
#include "server/internal.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

/* Translate text with fn; compare the result's JSON (sorted keys) with want. */
static void expect(json_t *(*fn)(const json_t *, hr_reply *), const char *in, const char *want) {
    json_t *req = json_loads(in, 0, NULL);
    assert_non_null(req);
    hr_reply err = {0};
    json_t *chat = fn(req, &err);
    if (!chat)
        fail_msg("%s", err.body);
    json_t *w = json_loads(want, 0, NULL);
    assert_non_null(w);
    if (!json_equal(chat, w)) {
        char *got = json_dumps(chat, JSON_SORT_KEYS);
        fail_msg("got %s", got);
    }
    json_decref(w);
    json_decref(chat);
    json_decref(req);
}

/* Translating in fails with a 400 whose message contains what. */
static void refuse(json_t *(*fn)(const json_t *, hr_reply *), const char *in, const char *what) {
    json_t *req = json_loads(in, 0, NULL);
    hr_reply err = {0};
    assert_null(fn(req, &err));
    assert_int_equal(err.status, 400);
    if (!strstr(err.body, what))
        fail_msg("%s lacks %s", err.body, what);
    free(err.body);
    json_decref(req);
}

static void test_messages(void **state) {
    (void)state;
    expect(hr__messages_to_chat,
           "{\"model\": \"m\", \"max_tokens\": 9, \"temperature\": 0.5, \"stream\": true,"
           " \"stop_sequences\": [\"x\"], \"metadata\": {\"user_id\": \"u\"},"
           " \"system\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}],"
           " \"messages\": [{\"role\": \"user\", \"content\": \"hi\"},"
           "  {\"role\": \"assistant\", \"content\": [{\"type\": \"thinking\", \"thinking\": \"t\"},"
           "   {\"type\": \"text\", \"text\": \"ok\"},"
           "   {\"type\": \"tool_use\", \"id\": \"c1\", \"name\": \"f\", \"input\": {\"x\": 1}}]},"
           "  {\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"c1\","
           "   \"content\": [{\"type\": \"text\", \"text\": \"r\"}]}, {\"type\": \"text\", \"text\": \"go\"}]}],"
           " \"tools\": [{\"name\": \"f\", \"description\": \"d\", \"input_schema\": {\"type\": \"object\"}}],"
           " \"tool_choice\": {\"type\": \"any\"}}",
           "{\"model\": \"m\", \"max_tokens\": 9, \"temperature\": 0.5, \"stream\": true, \"stop\": [\"x\"],"
           " \"messages\": [{\"role\": \"system\", \"content\": \"ab\"}, {\"role\": \"user\", \"content\": \"hi\"},"
           "  {\"role\": \"assistant\", \"content\": \"ok\", \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\","
           "   \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1}}}]},"
           "  {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"r\"},"
           "  {\"role\": \"user\", \"content\": \"go\"}],"
           " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"},"
           "  \"description\": \"d\"}}], \"tool_choice\": \"required\"}");
    expect(hr__messages_to_chat,
           "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"q\"}],"
           " \"tools\": [{\"name\": \"f\", \"input_schema\": {}}], \"tool_choice\": {\"type\": \"tool\", \"name\": \"f\"}}",
           "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"q\"}],"
           " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}],"
           " \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"f\"}}}");
    const char *m = "\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]";
    char buf[512];
    snprintf(buf, sizeof buf, "{%s}", m);
    refuse(hr__messages_to_chat, buf, "max_tokens is required");
    snprintf(buf, sizeof buf, "{\"max_tokens\": 1, %s, \"stop_sequences\": [1]}", m);
    refuse(hr__messages_to_chat, buf, "stop_sequences");
    refuse(hr__messages_to_chat, "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": "
           "[{\"type\": \"document\"}]}]}", "not supported yet: document blocks");
    refuse(hr__messages_to_chat, "{\"max_tokens\": 1, \"messages\": [{\"role\": \"assistant\", \"content\": "
           "[{\"type\": \"tool_result\", \"tool_use_id\": \"x\"}]}]}", "tool_result blocks belong in user messages");
}

static json_t *responses(const json_t *req, hr_reply *err) {
    return hr__responses_to_chat(req, NULL, err);
}

static void test_responses(void **state) {
    (void)state;
    expect(responses,
           "{\"model\": \"m\", \"instructions\": \"i\", \"max_output_tokens\": 7, \"store\": false,"
           " \"input\": [{\"role\": \"developer\", \"content\": \"d\"},"
           "  {\"type\": \"message\", \"role\": \"user\", \"content\": [{\"type\": \"input_text\", \"text\": \"a\"},"
           "   {\"type\": \"input_text\", \"text\": \"b\"}]},"
           "  {\"type\": \"reasoning\", \"summary\": []},"
           "  {\"type\": \"function_call\", \"call_id\": \"c1\", \"name\": \"f\", \"arguments\": \"{}\"},"
           "  {\"type\": \"function_call\", \"call_id\": \"c2\", \"name\": \"g\", \"arguments\": \"{\\\"y\\\": 2}\"},"
           "  {\"type\": \"function_call_output\", \"call_id\": \"c1\", \"output\": \"r\"}],"
           " \"tools\": [{\"type\": \"function\", \"name\": \"f\", \"parameters\": {\"type\": \"object\"}, \"strict\": true},"
           "  {\"type\": \"function\", \"name\": \"g\"}],"
           " \"tool_choice\": {\"type\": \"function\", \"name\": \"g\"},"
           " \"text\": {\"format\": {\"type\": \"json_schema\", \"name\": \"n\", \"schema\": {\"type\": \"object\"}}}}",
           "{\"model\": \"m\", \"max_tokens\": 7,"
           " \"messages\": [{\"role\": \"system\", \"content\": \"i\"}, {\"role\": \"system\", \"content\": \"d\"},"
           "  {\"role\": \"user\", \"content\": \"ab\"},"
           "  {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": ["
           "   {\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{}\"}},"
           "   {\"id\": \"c2\", \"type\": \"function\", \"function\": {\"name\": \"g\", \"arguments\": \"{\\\"y\\\": 2}\"}}]},"
           "  {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"r\"}],"
           " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}},"
           "  {\"type\": \"function\", \"function\": {\"name\": \"g\", \"parameters\": {\"type\": \"object\", \"properties\": {}}}}],"
           " \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}},"
           " \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"type\": \"object\"}}}}");
    expect(responses, "{\"input\": \"q\", \"text\": {\"format\": {\"type\": \"text\"}}}",
           "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}");
    refuse(responses, "{\"input\": \"q\", \"previous_response_id\": 5}",
           "previous_response_id must be a string");
    refuse(responses, "{\"input\": \"q\", \"store\": \"yes\"}", "store must be true or false");
    /* a previous response's conversation goes between instructions and input */
    json_t *req = json_loads("{\"instructions\": \"i\", \"input\": \"q2\", \"previous_response_id\": \"r\"}",
                             0, NULL);
    json_t *hist = json_loads("[{\"role\": \"user\", \"content\": \"q1\"},"
                              " {\"role\": \"assistant\", \"content\": \"a1\"}]", 0, NULL);
    hr_reply err = {0};
    json_t *chat = hr__responses_to_chat(req, hist, &err);
    json_t *want = json_loads("[{\"role\": \"system\", \"content\": \"i\"}, {\"role\": \"user\", \"content\": \"q1\"},"
                              " {\"role\": \"assistant\", \"content\": \"a1\"}, {\"role\": \"user\", \"content\": \"q2\"}]",
                              0, NULL);
    assert_true(json_equal(json_object_get(chat, "messages"), want));
    json_decref(want);
    json_decref(chat);
    json_decref(hist);
    json_decref(req);
    refuse(responses, "{\"input\": []}", "input is required");
    refuse(responses, "{\"input\": [{\"type\": \"input_image\"}]}",
           "not supported yet: input_image items");
}

static void test_anthropic_error(void **state) {
    (void)state;
    static const struct { unsigned status; const char *type; } cases[] = {
        {400, "invalid_request_error"}, {404, "not_found_error"}, {413, "request_too_large"},
        {500, "api_error"}, {503, "api_error"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hr_reply r = hr__anthropic_error(hr__error_reply(cases[i].status, "x", "p", "m%d", 1));
        assert_int_equal(r.status, cases[i].status);
        json_t *o = json_loads(r.body, 0, NULL), *want = json_pack(
            "{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", cases[i].type, "message", "m1");
        assert_true(json_equal(o, want));
        json_decref(o);
        json_decref(want);
        free(r.body);
    }
    hr_reply ok = {.status = 200, .body = strdup("{}")}; /* not an error: untouched */
    hr_reply same = hr__anthropic_error(ok);
    assert_ptr_equal(same.body, ok.body);
    free(same.body);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_responses),
        cmocka_unit_test(test_anthropic_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
