/* Tensor names: the binder asks for canonical (llama-style) names; a family
 * whose files use others maps them with its alias table (arch.h), and a
 * checkpoint saved from the bare base model (AutoModel: Qwen3-Embedding's
 * layout) has no "model." prefix. */
#include "model/names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* canon ("a.%d.b") against module ("a.3.b"): the layer number, or -2 when
 * the pattern has no %d and matches, -1 when it does not match */
static int match(const char *canon, const char *module) {
    const char *pd = strstr(canon, "%d");
    if (!pd)
        return strcmp(canon, module) ? -1 : -2;
    size_t pl = (size_t)(pd - canon);
    if (strncmp(canon, module, pl))
        return -1;
    const char *s = module + pl;
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    long n = strtol(s, &end, 10);
    if (n < 0 || n > 1 << 20 || strcmp(end, pd + 2))
        return -1;
    return (int)n;
}

const hr_tensor *hr__weights_lookup(const hr_weights *w, const hr_arch *a, const char *name) {
    const hr_tensor *t = hr_weights_find(w, name);
    if (t)
        return t;
    if (a && a->aliases) {
        const char *dot = strrchr(name, '.');
        if (!dot)
            return NULL;
        char module[256], file[300], full[320];
        size_t ml = (size_t)(dot - name);
        if (ml >= sizeof module)
            return NULL;
        memcpy(module, name, ml);
        module[ml] = 0;
        for (const hr_name_alias *al = a->aliases; al->canon; al++) {
            int n = match(al->canon, module);
            if (n == -1)
                continue;
            if (n >= 0)
                snprintf(file, sizeof file, al->file, n);
            else
                snprintf(file, sizeof file, "%s", al->file);
            snprintf(full, sizeof full, "%s%s", file, dot);
            if ((t = hr_weights_find(w, full)))
                return t;
            snprintf(full, sizeof full, "%s.%s%s", a->model_type, file, dot); /* BertFor*: bert. */
            return hr_weights_find(w, full);
        }
        return NULL;
    }
    if (!strncmp(name, "model.", 6) && (t = hr_weights_find(w, name + 6)))
        return t;
    /* a text model inside a multimodal one (Gemma3ForConditionalGeneration):
     * transformers 5's layout, then the original checkpoints', then
     * transformers 5.17's save_pretrained of Qwen2AudioForConditionalGeneration
     * (language_model.model.model.*) */
    char full[320];
    const char *rest = !strncmp(name, "model.", 6) ? name + 6 : NULL;
    if (rest) {
        snprintf(full, sizeof full, "model.language_model.%s", rest);
        if ((t = hr_weights_find(w, full)))
            return t;
        snprintf(full, sizeof full, "language_model.model.%s", rest);
        if ((t = hr_weights_find(w, full)))
            return t;
        snprintf(full, sizeof full, "language_model.model.model.%s", rest);
        return hr_weights_find(w, full);
    }
    snprintf(full, sizeof full, "language_model.%s", name); /* lm_head.weight */
    return hr_weights_find(w, full);
}

/* ---- the image side of a multimodal checkpoint ---------------------------------------- */

/* Where each layout keeps the vision tower (a SiglipVisionModel) and the
 * projector. The Hub's google/gemma-3-*-it files and mlx-vlm's conversions:
 * vision_tower.vision_model.*, multi_modal_projector.*; transformers 4.5x's
 * save_pretrained: the same under model.; transformers 5.17's
 * save_pretrained: vision_tower.* without the vision_model. level (and
 * model.vision_tower.* where a save keeps the model. prefix). */
const char *const hr__vision_tower_prefixes[] = {
    "vision_tower.vision_model.", "model.vision_tower.vision_model.", "vision_tower.",
    "model.vision_tower.", NULL};
/* Qwen2.5-VL's ViT and merger: the Hub's visual.*; transformers 5.17's
 * save_pretrained: model.visual.* */
const char *const hr__qwen_visual_prefixes[] = {"visual.", "model.visual.", NULL};
const char *const hr__mm_projector_prefixes[] = {
    "multi_modal_projector.", "model.multi_modal_projector.", NULL};

const char *hr__weights_prefix(const hr_weights *w, const char *const *prefixes,
                               const char *probe) {
    char full[320];
    for (const char *const *p = prefixes; *p; p++) {
        snprintf(full, sizeof full, "%s%s", *p, probe);
        if (hr_weights_find(w, full))
            return *p;
    }
    return NULL;
}
