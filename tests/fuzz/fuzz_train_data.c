/* libFuzzer: `hearth train`'s inputs of untrusted bytes: the JSON-lines
 * data (train/data.h) and the -c config file (train/config.h).
 * Input: one byte (bit 0: a config file, else data; bit 1: --mask-prompt;
 * bit 2: a training state file, train/state.h, of 8 floats a moment and
 * 3 batches), then the file's bytes (data: every format, the preference
 * pairs too).
 * The data's template and tokenizer are stand-ins
 * (the messages' JSON, one token per byte): the parser's own paths are
 * what is under test. Whatever parses must hold its invariants; errors
 * are fine. */
#include "train/config.h"
#include "train/data.h"
#include "train/state.h"

#include <stdlib.h>
#include <string.h>

static int render(void *ctx, const json_t *msgs, const json_t *tools, bool add_gen, char **out,
                  hr_error *err) {
    (void)ctx, (void)tools, (void)add_gen, (void)err;
    *out = json_dumps(msgs, JSON_COMPACT);
    return *out ? 0 : HR_ENOMEM;
}

static int encode(void *ctx, const char *text, size_t len, bool add_special, hr_tokens *out,
                  hr_error *err) {
    (void)ctx, (void)err;
    if (add_special && hr_tokens_push(out, 1))
        return HR_ENOMEM;
    for (size_t i = 0; i < len; i++)
        if (hr_tokens_push(out, (unsigned char)text[i]))
            return HR_ENOMEM;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    hr_error err;
    if (data[0] & 4) {
        float m1[8], m2[8], g[8];
        float *const m[3] = {m1, m2, g};
        int perm[3];
        hr_train_state st = {.n_batches = 3, .perm = perm};
        if (hr_train_state_parse(text, len, "fuzz.safetensors", m, 8, &st, &err) == 0)
            if (st.pos < 0 || st.pos > 3 || st.updates > st.iter || perm[0] < 0 || perm[0] > 2)
                __builtin_trap();
        return 0;
    }
    if (data[0] & 1) {
        hr_train_cfg c;
        hr_train_cfg_default(&c);
        if (hr_train_cfg_parse(&c, "fuzz.yaml", text, len, &err) == 0) {
            json_t *j = hr_train_cfg_json(&c);
            json_decref(j);
        }
        hr_train_cfg_deinit(&c);
        return 0;
    }
    hr_text_fns f = {.render = render, .encode = encode, .eos = 2};
    hr_train_data d;
    if (hr_train_data_parse(&d, "fuzz.jsonl", text, len, &f, data[0] & 2, &err) == 0) {
        if (d.n == 0 || d.start[0] != 0)
            __builtin_trap();
        for (size_t i = 0; i < d.n; i++)
            if (d.start[i + 1] < d.start[i] || d.offset[i] < 0)
                __builtin_trap();
        /* pairs: chosen and rejected share the prompt's offset */
        if (d.pairs && (d.n % 2 || d.n < 2))
            __builtin_trap();
        for (size_t i = 0; d.pairs && i < d.n; i += 2)
            if (d.offset[i] != d.offset[i + 1])
                __builtin_trap();
        int *order, nb, g = d.pairs ? 2 : 1;
        if (hr_train_batches(&d, 2, &order, &nb, &err) == 0) {
            for (int i = 0; i < 2 * g * nb; i++)
                if (order[i] < 0 || (size_t)order[i] >= d.n ||
                    (d.pairs && order[i] % 2 != i % 2))
                    __builtin_trap();
            free(order);
        }
        hr_train_data_free(&d);
    }
    return 0;
}
