/* A multimodal model's image side (model/bind.h, model/model.h): Gemma-3
 * (Gemma3ForConditionalGeneration: its processor places an image as boi,
 * image_token x mm_tokens_per_image, eoi) and Qwen2.5-VL
 * (Qwen2_5_VLForConditionalGeneration: vision_start, image_pad x tokens,
 * vision_end; the model layer only, model.h). */
#include "model/bind.h"
#include "model/vision.h"
#include "model/vision_qwen.h"
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

static int load_preprocessor(const char *dir, json_t **pc, hr_error *err) {
    char path[4096];
    *pc = NULL;
    if (hr_path_join(path, sizeof path, dir, "preprocessor_config.json"))
        return hr_err(err, HR_ERANGE, "%s: path too long", dir);
    if (!hr_file_exists(path))
        return 0;
    json_error_t je;
    if (!(*pc = json_load_file(path, 0, &je)))
        return hr_err(err, HR_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
    return 0;
}

static long getl(const json_t *o, const char *k, long dflt) {
    const json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (long)json_integer_value(v) : dflt;
}

/* Qwen2VLImageProcessor's settings: bicubic, CLIP's mean and std, pixels
 * between size.shortest_edge (min_pixels wins) and size.longest_edge
 * (max_pixels wins), patch, merge and temporal patch equal to the tower's */
static int open_qwen(hr_model *m, const char *dir, const json_t *cfg, hr_error *err) {
    hr_model_vision_qwen *v = calloc(1, sizeof *v);
    if (!v)
        return hr_err(err, HR_ENOMEM, "out of memory");
    hr_vision_qwen_cfg vc;
    json_t *pc = NULL;
    int rc = hr_vision_qwen_cfg_from_json(&vc, cfg, err);
    if (!rc)
        rc = load_preprocessor(dir, &pc, err);
    hr_image_proc dflt = {.height = 1, .width = 1, .resample = HR_RESAMPLE_BICUBIC,
                          .backend = HR_IMAGE_TORCHVISION, .do_rescale = true,
                          .do_normalize = true, .rescale = 1.0 / 255.0,
                          .mean = {0.48145466f, 0.4578275f, 0.40821073f},
                          .std = {0.26862954f, 0.26130258f, 0.27577711f}};
    if (!rc)
        rc = hr_image_proc_from_json(&v->proc, pc, dflt, err);
    const json_t *size = json_object_get(pc, "size");
    v->min_pixels = getl(pc, "min_pixels", getl(size, "shortest_edge", 56 * 56));
    v->max_pixels = getl(pc, "max_pixels", getl(size, "longest_edge", 28 * 28 * 1280));
    if (!rc && (getl(pc, "patch_size", vc.patch) != vc.patch ||
                getl(pc, "merge_size", vc.merge) != vc.merge ||
                getl(pc, "temporal_patch_size", vc.tpatch) != vc.tpatch))
        rc = hr_err(err, HR_EFORMAT, "preprocessor_config.json: patch_size, merge_size or "
                    "temporal_patch_size differ from the vision tower's (%d, %d, %d)", vc.patch,
                    vc.merge, vc.tpatch);
    if (!rc && (v->min_pixels < 1 || v->max_pixels < v->min_pixels || v->max_pixels > (1L << 28)))
        rc = hr_err(err, HR_EFORMAT, "preprocessor_config.json: pixel bounds %ld..%ld out of "
                    "range", v->min_pixels, v->max_pixels);
    if (!rc && vc.d_out != m->hp.d_model)
        rc = hr_err(err, HR_EFORMAT, "config.json: vision out_hidden_size %d, but the text "
                    "model is %d wide", vc.d_out, m->hp.d_model);
    if (!rc)
        rc = hr_vision_qwen_new(&v->tower, &vc, m->weights, err);
    json_decref(pc);
    v->vstart = token_id(cfg, "vision_start_token_id", "vision_start_token_id", 151652);
    v->vend = token_id(cfg, "vision_end_token_id", "vision_end_token_id", 151653);
    v->image_token = token_id(cfg, "image_token_id", "image_token_index", 151655);
    if (!rc && (v->image_token < 0 || v->image_token >= m->hp.n_vocab || v->vstart < 0 ||
                v->vstart >= m->hp.n_vocab || v->vend < 0 || v->vend >= m->hp.n_vocab))
        rc = hr_err(err, HR_EFORMAT, "config.json: image token ids outside the vocabulary of %d",
                    m->hp.n_vocab);
    if (rc) {
        hr_err_wrap(err, "%s", dir);
        hr__model_vision_qwen_free(v);
        return rc;
    }
    m->mm_qwen = v;
    return 0;
}

void hr__model_vision_qwen_free(hr_model_vision_qwen *v) {
    if (!v)
        return;
    hr_vision_qwen_free(v->tower);
    free(v);
}

int hr__model_open_vision(hr_model *m, const char *dir, const json_t *cfg, hr_error *err) {
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    if (mt && !strcmp(mt, "qwen2_5_vl"))
        return open_qwen(m, dir, cfg, err);
    if (!mt || strcmp(mt, "gemma3"))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: the vision side of model_type "
                      "'%s' (gemma3 and qwen2_5_vl are)", mt ? mt : "(missing)");
    hr_model_vision *v = calloc(1, sizeof *v);
    if (!v)
        return hr_err(err, HR_ENOMEM, "out of memory");
    hr_vision_cfg vc;
    json_t *pc = NULL;
    int rc = hr_vision_cfg_from_json(&vc, cfg, err);
    if (!rc)
        rc = load_preprocessor(dir, &pc, err);
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
