/* Post-processors, for a single sequence: TemplateProcessing, BertProcessing,
 * RobertaProcessing, ByteLevel (adds nothing) and Sequence. Only the IDs
 * added around the sequence matter here (no offsets, no type IDs). */
#include "tokenizer/internal.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

static int add_id(int32_t **v, int *n, int32_t id, int front) {
    int32_t *p = realloc(*v, (size_t)(*n + 1) * sizeof *p);
    if (!p)
        return HR_ENOMEM;
    if (front) {
        memmove(p + 1, p, (size_t)*n * sizeof *p);
        p[0] = id;
    } else {
        p[*n] = id;
    }
    *v = p;
    (*n)++;
    return 0;
}

static int pair_id(json_t *a, int32_t *id) {
    /* ["[CLS]", 101] */
    json_t *x = json_array_get(a, 1);
    if (!json_is_integer(x) || json_integer_value(x) < 0 ||
        json_integer_value(x) > INT32_MAX)
        return -1;
    *id = (int32_t)json_integer_value(x);
    return 0;
}

static int template_single(hr__postproc *pp, json_t *j, hr_error *err) {
    json_t *single = json_object_get(j, "single");
    json_t *specials = json_object_get(j, "special_tokens");
    if (!json_is_array(single))
        return hr_err(err, HR_EFORMAT, "TemplateProcessing without \"single\"");
    /* ids before the sequence are inserted in order at the current front */
    int32_t *pre = NULL, *post = NULL;
    int n_pre = 0, n_post = 0, seen_seq = 0, rc = 0;
    size_t i;
    json_t *x;
    json_array_foreach(single, i, x) {
        json_t *st = json_object_get(x, "SpecialToken");
        if (json_object_get(x, "Sequence")) {
            seen_seq = 1;
            continue;
        }
        const char *name = hr__json_str(st, "id");
        json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
        if (!name || !json_is_array(ids)) {
            rc = hr_err(err, HR_EFORMAT, "TemplateProcessing: unknown special token '%s'",
                        name ? name : "?");
            break;
        }
        size_t k;
        json_t *id;
        json_array_foreach(ids, k, id) {
            if (!json_is_integer(id) || json_integer_value(id) < 0 ||
                json_integer_value(id) > INT32_MAX) {
                rc = hr_err(err, HR_EFORMAT, "TemplateProcessing: bad id for '%s'", name);
                break;
            }
            rc = seen_seq ? add_id(&post, &n_post, (int32_t)json_integer_value(id), 0)
                          : add_id(&pre, &n_pre, (int32_t)json_integer_value(id), 0);
            if (rc) {
                rc = hr_err(err, rc, "out of memory");
                break;
            }
        }
        if (rc)
            break;
    }
    for (int k = n_pre - 1; !rc && k >= 0; k--)
        rc = add_id(&pp->pre, &pp->n_pre, pre[k], 1);
    for (int k = 0; !rc && k < n_post; k++)
        rc = add_id(&pp->post, &pp->n_post, post[k], 0);
    free(pre);
    free(post);
    return rc;
}

int hr__postproc_parse(hr__postproc *pp, json_t *j, hr_error *err) {
    if (!j || json_is_null(j))
        return 0;
    const char *type = hr__json_str(j, "type");
    if (!type)
        return hr_err(err, HR_EFORMAT, "post_processor without a \"type\"");
    if (!strcmp(type, "Sequence")) {
        json_t *a = json_object_get(j, "processors");
        if (!json_is_array(a))
            return hr_err(err, HR_EFORMAT, "Sequence post_processor without \"processors\"");
        size_t i;
        json_t *x;
        json_array_foreach(a, i, x) {
            int rc = hr__postproc_parse(pp, x, err);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (!strcmp(type, "ByteLevel"))
        return 0;
    if (!strcmp(type, "TemplateProcessing")) {
        pp->present = 1;
        return template_single(pp, j, err);
    }
    if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        int32_t cls, sep;
        if (pair_id(json_object_get(j, "cls"), &cls) ||
            pair_id(json_object_get(j, "sep"), &sep))
            return hr_err(err, HR_EFORMAT, "%s: bad \"cls\"/\"sep\"", type);
        pp->present = 1;
        if (add_id(&pp->pre, &pp->n_pre, cls, 1) || add_id(&pp->post, &pp->n_post, sep, 0))
            return hr_err(err, HR_ENOMEM, "out of memory");
        return 0;
    }
    return hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s post_processor", type);
}

void hr__postproc_free(hr__postproc *pp) {
    if (!pp)
        return;
    free(pp->pre);
    free(pp->post);
    memset(pp, 0, sizeof *pp);
}
