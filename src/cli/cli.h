/* The CLI verbs: one file each, all with main()'s signature minus the verb. */
#ifndef HR_CLI_H
#define HR_CLI_H

int hr_cmd_serve(int argc, char **argv);
int hr_cmd_generate(int argc, char **argv);
int hr_cmd_bench(int argc, char **argv);
/* bench with --draft-model or --spec: speculative decoding side by side */
int hr_cmd_bench_spec(int argc, char **argv);
int hr_cmd_bench_lora(int argc, char **argv);
int hr_cmd_convert(int argc, char **argv);
int hr_cmd_fuse(int argc, char **argv);
int hr_cmd_perplexity(int argc, char **argv);
int hr_cmd_train(int argc, char **argv);
int hr_cmd_embed(int argc, char **argv);
int hr_cmd_synth(int argc, char **argv);
int hr_cmd_version(int argc, char **argv);
int hr_cmd_tokenize(int argc, char **argv);
int hr_cmd_detokenize(int argc, char **argv);
int hr_cmd_template(int argc, char **argv);
int hr_cmd_media(int argc, char **argv);
int hr_cmd_grammar(int argc, char **argv);
int hr_cmd_get(int argc, char **argv);
int hr_cmd_ls(int argc, char **argv);
int hr_cmd_gc(int argc, char **argv);
int hr_cmd_route(int argc, char **argv);

/* The median of v[0..n) (sorts v; the bench verbs, cmd_bench.c). */
double hr_cli_median(double *v, int n);

/* --gguf TYPE: the dtype named (F32 F16 BF16 Q8_0 ...; convert and synth,
 * cmd_convert.c), *km set for a name ending in _M (llama.cpp's mix over the
 * dtype: Q4_K_M, Q5_K_M; hr_gguf_export refuses it over others); HR_EINVAL
 * with err set when there is none. */
#include "hearth.h"
#include <stdbool.h>
int hr_cli_gguf_type(const char *name, int *out, bool *km, hr_error *err);

/* The model serve and generate use without --model (default_model.c). */
const char *hr_cli_default_model(void);

#endif
