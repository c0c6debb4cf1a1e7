/* hearth detokenize: token IDs -> text. */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static int parse_ids(const char *s, hr_tokens *ids, hr_error *err) {
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX)
            return hr_err(err, HR_EINVAL, "--tokens: expected comma-separated IDs, got '%s'", s);
        if (hr_tokens_push(ids, (int32_t)v))
            return hr_err(err, HR_ENOMEM, "out of memory");
        s = end;
        while (*s == ' ')
            s++;
        if (*s == ',')
            s++;
        else if (*s)
            return hr_err(err, HR_EINVAL, "--tokens: unexpected '%c'", *s);
    }
    return 0;
}

int hr_cmd_detokenize(int argc, char **argv) {
    const char *model = NULL, *tokens = NULL;
    int skip = 0;
    hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "model directory (tokenizer.json ...) or .gguf file; or ORG/NAME[@REV]"},
        {"tokens", HR_OPT_STR, &tokens, "comma-separated token IDs"},
        {"skip-special", HR_OPT_FLAG, &skip, "drop special tokens"},
    };
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0],
                           "usage: hearth detokenize --model PATH --tokens 1,2,3", &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    if (!model || !tokens) {
        hr_err(&err, HR_EINVAL, "detokenize: --model and --tokens are required");
        return hr_cli_fail(&err);
    }
    hr_tokens ids = {0};
    hr_tokenizer *tok = NULL;
    char *text = NULL;
    size_t len = 0;
    rc = parse_ids(tokens, &ids, &err);
    if (!rc)
        rc = hr_tokenizer_load(&tok, model, &err);
    if (!rc)
        rc = hr_tokenizer_decode(tok, ids.ids, ids.n, skip ? HR_DETOK_SKIP_SPECIAL : 0,
                                 &text, &len, &err);
    if (!rc)
        fwrite(text, 1, len, stdout);
    free(text);
    hr_tokens_free(&ids);
    hr_tokenizer_free(tok);
    return rc ? hr_cli_fail(&err) : 0;
}
