/* Flag parsing shared by the CLI verbs: "--name value" or "--name=value".
 * An unknown flag, a missing value or a malformed number is an error that
 * names the flag. */
#ifndef HR_CLI_ARGS_H
#define HR_CLI_ARGS_H

#include "hearth.h"

typedef enum hr_opt_kind {
    HR_OPT_STR,   /* const char ** */
    HR_OPT_INT,   /* long * */
    HR_OPT_FLOAT, /* double * */
    HR_OPT_FLAG,  /* int *, set to 1 */
    HR_OPT_MODEL, /* const char **: a model path, after hr_cli_model_path */
    HR_OPT_LIST,  /* hr_opt_list *: every value of a flag that may repeat */
} hr_opt_kind;

#define HR_OPT_LIST_MAX 64

typedef struct hr_opt_list {
    const char *v[HR_OPT_LIST_MAX];
    int n;
} hr_opt_list;

typedef struct hr_opt {
    const char *name; /* without the leading "--" */
    hr_opt_kind kind;
    void *dst;
    const char *help;
} hr_opt;

/* Parses argv[0..argc). Returns 0, 1 when --help was asked (usage printed
 * to stdout), or a negative HR_E* code with err filled. */
int hr_args_parse(int argc, char **argv, const hr_opt *opts, int n_opts,
                  const char *usage, hr_error *err);

/* --model's value as a path: an existing path as given, "hearth-demo" the
 * bundled demo model, ORG/NAME[@REV] its snapshot in the Hugging Face cache
 * (io/hfcache.h). *out is arg or a string that lives as long as the
 * process. */
int hr_cli_model_path(const char *arg, const char **out, hr_error *err);
/* The same into out (n bytes): an existing path as given, the demo model's
 * name, or ORG/NAME[@REV] through the Hugging Face cache. */
int hr_cli_model_resolve(const char *arg, char *out, size_t n, hr_error *err);

/* Prints "hearth: <msg>" on stderr and returns 1 (the CLI's exit status). */
int hr_cli_fail(const hr_error *err);

#endif
