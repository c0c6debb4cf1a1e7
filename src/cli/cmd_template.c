/* hearth template: render a model's chat template over a conversation. */
#include "chat/chat.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *load(const char *what, const char *path, hr_error *err) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        hr_err(err, HR_EFORMAT, "%s %s: line %d: %s", what, path, je.line, je.text);
    return j;
}

int hr_cmd_template(int argc, char **argv) {
    const char *model = NULL, *messages_path = NULL, *tools_path = NULL, *kwargs_src = NULL;
    const char *name = NULL, *now = NULL;
    int no_gen = 0;
    const hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "model directory (tokenizer_config.json, chat_template.jinja) or GGUF file; or ORG/NAME[@REV]"},
        {"messages", HR_OPT_STR, &messages_path, "JSON file: the messages array"},
        {"tools", HR_OPT_STR, &tools_path, "JSON file: the tools array"},
        {"kwargs", HR_OPT_STR, &kwargs_src, "JSON object of extra template variables"},
        {"no-generation-prompt", HR_OPT_FLAG, &no_gen, "do not add the generation prompt"},
        {"template-name", HR_OPT_STR, &name, "pick a named template from a template list"},
        {"now", HR_OPT_STR, &now, "unix seconds for strftime_now() (default: the clock)"},
    };
    hr_error err = {0};
    json_t *messages = NULL, *tools = NULL, *kwargs = NULL;
    hr_chat_model_files mf = {0};
    hr_tokenizer *tok = NULL;
    char *out = NULL;
    int rc = hr_args_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                           "usage: hearth template --model PATH --messages FILE.json "
                           "[--tools FILE.json] [--no-generation-prompt] [--kwargs JSON]",
                           &err);
    if (rc == 1)
        return 0;
    if (rc)
        return hr_cli_fail(&err);
    if (!model || !messages_path) {
        hr_err(&err, HR_EINVAL, "--model and --messages are required (see --help)");
        return hr_cli_fail(&err);
    }
    hr_chat_opts co = {.add_generation_prompt = !no_gen};
    if (now) {
        char *end;
        co.now = strtoll(now, &end, 10);
        co.has_now = 1;
        if (*end || end == now) {
            hr_err(&err, HR_EINVAL, "--now: expected unix seconds, got '%s'", now);
            return hr_cli_fail(&err);
        }
    }
    rc = 1;
    if (!(messages = load("--messages", messages_path, &err)))
        goto done;
    if (tools_path && !(tools = load("--tools", tools_path, &err)))
        goto done;
    if (kwargs_src) {
        json_error_t je;
        kwargs = json_loads(kwargs_src, 0, &je);
        if (!kwargs) {
            hr_err(&err, HR_EINVAL, "--kwargs: %s", je.text);
            goto done;
        }
    }
    if (hr_chat_is_gguf(model)) {
        if (hr_tokenizer_load(&tok, model, &err) ||
            hr_chat_gguf_load(&mf, tok, model, false, &err))
            goto done;
    } else if (hr_chat_model_load(&mf, model, name, tools != NULL, &err)) {
        goto done;
    }
    co.bos_token = mf.bos_token;
    co.eos_token = mf.eos_token;
    if (hr_chat_render(mf.template_src, messages, tools, kwargs, &co, &out, &err))
        goto done;
    fputs(out, stdout);
    rc = 0;
done:
    if (rc)
        hr_cli_fail(&err);
    free(out);
    hr_chat_model_files_free(&mf);
    hr_tokenizer_free(tok);
    json_decref(messages);
    json_decref(tools);
    json_decref(kwargs);
    return rc;
}
