#include "cli/args.h"
#include "core/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static void print_usage(const char *usage, const hr_opt *opts, int n) {
    printf("%s\n", usage);
    for (int i = 0; i < n; i++) {
        const char *arg = opts[i].kind == HR_OPT_FLAG ? "" : " V";
        if (opts[i].help) /* NULL: a hidden flag */
            printf("  --%s%s\n      %s\n", opts[i].name, arg, opts[i].help);
    }
}

static int set_value(const hr_opt *o, const char *v, hr_error *err) {
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case HR_OPT_STR:
        *(const char **)o->dst = v;
        return 0;
    case HR_OPT_INT: {
        long x = strtol(v, &end, 10);
        if (errno || end == v || *end)
            return hr_err(err, HR_EINVAL, "--%s: expected an integer, got '%s'",
                          o->name, v);
        *(long *)o->dst = x;
        return 0;
    }
    case HR_OPT_FLOAT: {
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x))
            return hr_err(err, HR_EINVAL, "--%s: expected a number, got '%s'",
                          o->name, v);
        *(double *)o->dst = x;
        return 0;
    }
    case HR_OPT_FLAG:
        *(int *)o->dst = 1;
        return 0;
    case HR_OPT_MODEL:
        return hr_cli_model_path(v, (const char **)o->dst, err);
    case HR_OPT_LIST: {
        hr_opt_list *l = o->dst;
        if (l->n == HR_OPT_LIST_MAX)
            return hr_err(err, HR_ERANGE, "--%s: at most %d times", o->name, HR_OPT_LIST_MAX);
        l->v[l->n++] = v;
        return 0;
    }
    }
    return hr_err(err, HR_EINVAL, "--%s: bad option kind", o->name);
}

int hr_args_parse(int argc, char **argv, const hr_opt *opts, int n_opts,
                  const char *usage, hr_error *err) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            print_usage(usage, opts, n_opts);
            return 1;
        }
        if (strncmp(a, "--", 2) != 0)
            return hr_err(err, HR_EINVAL, "unexpected argument '%s'", a);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const hr_opt *o = NULL;
        for (int k = 0; k < n_opts; k++)
            if (strlen(opts[k].name) == len && !strncmp(opts[k].name, name, len))
                o = &opts[k];
        if (!o)
            return hr_err(err, HR_EINVAL, "unknown flag '--%.*s' (see --help)",
                          (int)len, name);
        const char *v = NULL;
        if (o->kind == HR_OPT_FLAG) {
            if (eq)
                return hr_err(err, HR_EINVAL, "--%s takes no value", o->name);
        } else if (eq) {
            v = eq + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            return hr_err(err, HR_EINVAL, "--%s needs a value", o->name);
        }
        int rc = set_value(o, v, err);
        if (rc)
            return rc;
    }
    return 0;
}

int hr_cli_fail(const hr_error *err) {
    fprintf(stderr, "hearth: %s\n", err->msg[0] ? err->msg : hr_strerror(err->code));
    return 1;
}
