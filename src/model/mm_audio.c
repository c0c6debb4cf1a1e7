/* A multimodal model's audio side (model/bind.h, model/model.h): Qwen2-Audio
 * (Qwen2AudioForConditionalGeneration: its processor places a clip as
 * audio_bos, <|AUDIO|> x the encoder's rows for it, audio_eos). */
#include "model/audio.h"
#include "model/bind.h"
#include "core/error.h"
#include "core/file.h"

#include <stdlib.h>
#include <string.h>

static int32_t token_id(const json_t *cfg, const char *k, int32_t dflt) {
    const json_t *v = json_object_get(cfg, k);
    return json_is_integer(v) ? (int32_t)json_integer_value(v) : dflt;
}

int hr__model_open_audio(hr_model *m, const char *dir, const json_t *cfg, hr_error *err) {
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    if (!mt || strcmp(mt, "qwen2_audio"))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: the audio side of model_type "
                      "'%s' (qwen2_audio is)", mt ? mt : "(missing)");
    hr_model_audio *a = calloc(1, sizeof *a);
    if (!a)
        return hr_err(err, HR_ENOMEM, "out of memory");
    hr_audio_enc_cfg ac;
    json_t *pc = NULL;
    char path[4096];
    int rc = hr_audio_enc_cfg_from_json(&ac, cfg, m->hp.d_model, err);
    if (!rc && hr_path_join(path, sizeof path, dir, "preprocessor_config.json"))
        rc = hr_err(err, HR_ERANGE, "path too long");
    if (!rc && hr_file_exists(path)) {
        json_error_t je;
        if (!(pc = json_load_file(path, 0, &je)))
            rc = hr_err(err, HR_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
    }
    if (!rc) /* Qwen2-Audio's processor: 128 mels unless the file says */
        rc = hr_mel_cfg_from_json(&a->mel, pc, err);
    if (!rc && !json_is_integer(json_object_get(pc, "feature_size")))
        a->mel.n_mels = ac.n_mels;
    if (!rc && (a->mel.n_mels != ac.n_mels || hr_mel_frames(&a->mel) != (size_t)ac.max_pos * 2))
        rc = hr_err(err, HR_EFORMAT, "preprocessor_config.json: %d mels over %zu frames, but the "
                    "audio encoder takes %d over %d", a->mel.n_mels, hr_mel_frames(&a->mel),
                    ac.n_mels, ac.max_pos * 2);
    if (!rc)
        rc = hr_audio_enc_new(&a->tower, &ac, m->weights, err);
    json_decref(pc);
    a->audio_token = token_id(cfg, "audio_token_index", token_id(cfg, "audio_token_id", 151646));
    if (!rc && (a->audio_token < 0 || a->audio_token >= m->hp.n_vocab))
        rc = hr_err(err, HR_EFORMAT, "config.json: audio_token_index %d outside the vocabulary "
                    "of %d", a->audio_token, m->hp.n_vocab);
    if (rc) {
        hr_err_wrap(err, "%s", dir);
        hr__model_audio_free(a);
        return rc;
    }
    m->mm_audio = a;
    return 0;
}

void hr__model_audio_free(hr_model_audio *a) {
    if (!a)
        return;
    hr_audio_enc_free(a->tower);
    free(a);
}
