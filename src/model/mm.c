/* A multimodal model's image side (model/bind.h, model/model.h). Gemma-3
 * (Gemma3ForConditionalGeneration) only: its processor places an image as
 * boi, image_token x mm_tokens_per_image, eoi. */
#include "model/bind.h"
#include "model/vision.h"
#include "core/error.h"
#include "core/file.h"

#include <stdlib.h>
#include <string.h>

static int32_t token_id(const json_t *cfg, const char *a, const char *b, int32_t dflt) {
    const json_t *v = json_object_get(cfg, a);
    if (!json_is_integer(v))
        v = json_object_get(cfg, b);
    return json_is_integer(v) ? (int32_t)json_integer_value(v) : dflt;
}

int hr__model_open_vision(hr_model *m, const char *dir, const json_t *cfg, hr_error *err) {
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    if (!mt || strcmp(mt, "gemma3"))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: the vision side of model_type "
                      "'%s' (gemma3 is)", mt ? mt : "(missing)");
    hr_model_vision *v = calloc(1, sizeof *v);
    if (!v)
        return hr_err(err, HR_ENOMEM, "out of memory");
    hr_vision_cfg vc;
    json_t *pc = NULL;
    char path[4096];
    int rc = hr_vision_cfg_from_json(&vc, cfg, err);
    if (!rc && hr_path_join(path, sizeof path, dir, "preprocessor_config.json"))
        rc = hr_err(err, HR_ERANGE, "%s: path too long", dir);
    if (!rc && hr_file_exists(path)) {
        json_error_t je;
        if (!(pc = json_load_file(path, 0, &je)))
            rc = hr_err(err, HR_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
    }
    hr_image_proc dflt = hr_image_proc_gemma3();
    dflt.height = dflt.width = vc.image_size; /* the tower's size unless the processor says */
    if (!rc)
        rc = hr_image_proc_from_json(&v->proc, pc, dflt, err);
    if (!rc && (v->proc.height != vc.image_size || v->proc.width != vc.image_size))
        rc = hr_err(err, HR_EFORMAT, "preprocessor_config.json: size %dx%d, but the vision "
                    "tower takes %dx%d", v->proc.width, v->proc.height, vc.image_size,
                    vc.image_size);
    if (!rc)
        rc = hr_vision_new(&v->tower, &vc, m->weights, err);
    json_decref(pc);
    if (rc) {
        hr_err_wrap(err, "%s", dir);
        hr__model_vision_free(v);
        return rc;
    }
    v->boi = token_id(cfg, "boi_token_index", "boi_token_id", 255999);
    v->eoi = token_id(cfg, "eoi_token_index", "eoi_token_id", 256000);
    v->image_token = token_id(cfg, "image_token_index", "image_token_id", 262144);
    v->mm_tokens = vc.mm_tokens;
    if (v->image_token < 0 || v->image_token >= m->hp.n_vocab || v->boi < 0 ||
        v->boi >= m->hp.n_vocab || v->eoi < 0 || v->eoi >= m->hp.n_vocab) {
        hr__model_vision_free(v);
        return hr_err(err, HR_EFORMAT, "%s/config.json: image token ids outside the "
                      "vocabulary of %d", dir, m->hp.n_vocab);
    }
    /* an image's tokens see each other through attn_end, past their sliding
     * window only if the window holds the whole image */
    if (m->hp.sliding_window > 0 && m->hp.sliding_window < v->mm_tokens) {
        int w = m->hp.sliding_window, n = v->mm_tokens;
        hr__model_vision_free(v);
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: a sliding window of %d tokens "
                      "shorter than an image's %d", w, n);
    }
    m->mm = v;
    return 0;
}

void hr__model_vision_free(hr_model_vision *v) {
    if (!v)
        return;
    hr_vision_free(v->tower);
    free(v);
}
