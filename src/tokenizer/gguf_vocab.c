/* GGUF vocabularies (tokenizer.ggml.*) as hearth tokenizers. */
#include "tokenizer/internal.h"
#include "core/error.h"
#include "io/gguf.h"

int hr__tok_load_gguf_path(hr_tokenizer **out, const char *path, hr_error *err);
int hr__tok_load_gguf_path(hr_tokenizer **out, const char *path, hr_error *err) {
    *out = NULL;
    return hr_err(err, HR_EUNSUPPORTED, "%s: not supported yet: GGUF vocabularies", path);
}
