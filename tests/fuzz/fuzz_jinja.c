/* libFuzzer: parse the input as a chat template and render it over a fixed
 * conversation (messages with tool calls, tools, kwargs) with small limits.
 * Any crash, leak or sanitizer report is a bug; errors are fine. */
#include "chat/chat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static json_t *messages, *tools, *kwargs;

static const char *const conversation =
    "[{\"role\":\"system\",\"content\":\"You are helpful.\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi \\u4f60\\u597d\"}]},"
    "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"hmm\",\"tool_calls\":"
    "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
    "{\"x\":1,\"y\":[true,null,2.5]}}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"},"
    "{\"role\":\"user\",\"content\":\"thanks\"}]";
static const char *const tool_list =
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}}}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!messages) {
        messages = json_loads(conversation, 0, NULL);
        tools = json_loads(tool_list, 0, NULL);
        kwargs = json_loads("{\"enable_thinking\":false,\"n\":3}", 0, NULL);
    }
    hr_chat_template *t = NULL;
    hr_error err;
    if (hr_chat_template_new(&t, (const char *)data, size, &err))
        return 0;
    hr_chat_opts o = {.bos_token = "<s>", .eos_token = "</s>", .add_generation_prompt = 1,
                      .has_now = 1, .now = 1721952000, .max_output = 1 << 20, .max_steps = 200000};
    char *out = NULL;
    if (!hr_chat_template_render(t, messages, tools, kwargs, &o, &out, &err))
        free(out);
    hr_chat_template_free(t);
    return 0;
}
