/* Grammar objects: lifetime, and the small front ends (choices). */
#include "grammar/internal.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

void hr_grammar_free(hr_grammar *g) {
    if (!g)
        return;
    hr__gcache_clear(g);
    pthread_mutex_destroy(&g->mu);
    free(g->st);
    free(g->edges);
    free(g->calls);
    free(g->rule_start);
    free(g->dist);
    free(g);
}

int hr_grammar_n_states(const hr_grammar *g) { return (int)g->n_st; }

int hr_grammar_from_choices(hr_grammar **out, const char *const *choices,
                            int n, hr_error *err) {
    *out = NULL;
    if (n <= 0 || !choices)
        return hr_err(err, HR_EINVAL, "choices: the list is empty");
    hr__gir ir;
    hr__gir_init(&ir);
    hr__u32v alts = {0};
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (!choices[i])
            rc = hr_err(err, HR_EINVAL, "choices: entry %d is not a string", i);
        else if (hr__u32v_push(&alts, hr__gir_str(&ir, choices[i])))
            rc = hr_err(err, HR_ENOMEM, "out of memory");
    }
    if (!rc) {
        int32_t root = hr__gir_rule(&ir, "root", 4);
        hr__gir_define(&ir, root, hr__gir_alt(&ir, alts.v, alts.n));
        rc = hr__grammar_compile(out, &ir, root, err);
    }
    hr__u32v_free(&alts);
    hr__gir_deinit(&ir);
    return rc;
}
