/* hearth convert: a model directory into an mlx-lm directory (optionally
 * MLX-affine quantized, optionally mixed precision) or a GGUF file. */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "model/convert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: hearth convert --model SRC --out DST [-q] [--q-bits N] [--q-group-size N]\n"
    "                      [--dtype bf16|f16|f32] [--target-bpw X] [--gguf TYPE]\n"
    "  -q               quantize Linear/Embedding weights (MLX affine, mlx-lm layout)\n"
    "  --gguf TYPE      write one GGUF file instead (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q4_K Q5_K Q6_K,\n"
    "                   or Q4_K_M / Q5_K_M: llama.cpp's mix, some matrices Q6_K)";

static int parse_dtype(const char *s, hr_dtype *out) {
    if (!s)
        return 0;
    if (!strcmp(s, "bf16"))
        *out = HR_DTYPE_BF16;
    else if (!strcmp(s, "f16"))
        *out = HR_DTYPE_F16;
    else if (!strcmp(s, "f32"))
        *out = HR_DTYPE_F32;
    else
        return -1;
    return 0;
}

int hr_cli_gguf_type(const char *name, int *out, bool *km, hr_error *err) {
    size_t n = strlen(name);
    /* TYPE_M: llama.cpp's mix over TYPE (hr_gguf_export says which take it) */
    *km = n > 2 && !strcmp(name + n - 2, "_M");
    size_t base = *km ? n - 2 : n; /* the dtype's name: name without "_M" */
    for (int i = 0; i < HR_DTYPE_COUNT; i++)
        if (strlen(hr_dtype_name((hr_dtype)i)) == base &&
            !strncmp(hr_dtype_name((hr_dtype)i), name, base)) {
            *out = i;
            return 0;
        }
    return hr_err(err, HR_EINVAL, "--gguf: unknown type '%s'", name);
}

/* o with --gguf TYPE (or none) applied, converted; the verb's exit status */
static int run(hr_convert_opts *o, const char *gguf) {
    hr_error err = {0};
    if (gguf) {
        int t = 0;
        if (hr_cli_gguf_type(gguf, &t, &o->gguf_km, &err))
            return hr_cli_fail(&err);
        o->gguf = (hr_dtype)t;
    }
    if (hr_convert(o, &err))
        return hr_cli_fail(&err);
    if (!gguf)
        printf("wrote %s\n", o->out);
    return 0;
}

int hr_cmd_convert(int argc, char **argv) {
    const char *model = NULL, *out = NULL, *dtype = NULL, *gguf = NULL;
    long bits = 4, group = 64;
    double bpw = 0;
    int quantize = 0;
    const hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "source model directory; or ORG/NAME[@REV]"},
        {"out", HR_OPT_STR, &out, "output directory (or .gguf file with --gguf); must not exist"},
        {"quantize", HR_OPT_FLAG, &quantize, "same as -q"},
        {"q-bits", HR_OPT_INT, &bits, "bits per weight: 2, 3, 4, 5, 6, 8 (default 4)"},
        {"q-group-size", HR_OPT_INT, &group, "group size: 32, 64, 128 (default 64)"},
        {"dtype", HR_OPT_STR, &dtype, "dtype of float tensors: bf16, f16, f32 (default: keep)"},
        {"target-bpw", HR_OPT_FLOAT, &bpw, "mixed precision to this bits-per-weight budget"},
        {"gguf", HR_OPT_STR, &gguf, "write a GGUF file with matrices of this type"},
    };
    char **av = malloc((size_t)(argc + 1) * sizeof *av);
    if (!av)
        return hr_cli_fail(&(hr_error){.msg = "out of memory"});
    for (int i = 0; i < argc; i++) /* the short flag */
        av[i] = !strcmp(argv[i], "-q") ? "--quantize" : argv[i];
    hr_error err = {0};
    int rc = hr_args_parse(argc, av, opts, sizeof opts / sizeof opts[0], usage, &err);
    free(av);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    if (!model || !out)
        return hr_cli_fail(&(hr_error){.msg = "--model and --out are required (see --help)"});
    hr_convert_opts o = {.src = model, .out = out, .quantize = quantize, .bits = (int)bits,
                         .group = (int)group, .dtype = HR_DTYPE_COUNT, .target_bpw = bpw,
                         .gguf = HR_DTYPE_COUNT, .report = stdout};
    if (parse_dtype(dtype, &o.dtype))
        return hr_cli_fail(&(hr_error){.msg = "--dtype must be bf16, f16 or f32"});
    return run(&o, gguf);
}

static const char fuse_usage[] =
    "usage: hearth fuse --model BASE --adapter DIR --out DST [--gguf TYPE] [--de-quantize]\n"
    "  mlx_lm.fuse: the adapter's low-rank deltas added into the base's weights,\n"
    "  written as a model directory in the base's dtype, or one GGUF file";

int hr_cmd_fuse(int argc, char **argv) {
    const char *model = NULL, *out = NULL, *adapter = NULL, *adapter_path = NULL,
               *save_path = NULL, *gguf = NULL;
    int dequant = 0, dequant2 = 0;
    const hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "base model directory; or ORG/NAME[@REV]"},
        {"adapter", HR_OPT_STR, &adapter, "LoRA adapter directory (peft or mlx-lm)"},
        {"adapter-path", HR_OPT_STR, &adapter_path, "same as --adapter (mlx_lm.fuse's name)"},
        {"out", HR_OPT_STR, &out, "output directory (or .gguf file with --gguf); must not exist"},
        {"save-path", HR_OPT_STR, &save_path, "same as --out (mlx_lm.fuse's name)"},
        {"gguf", HR_OPT_STR, &gguf, "write a GGUF file with matrices of this type"},
        {"de-quantize", HR_OPT_FLAG, &dequant, "write float weights (the base is float today)"},
        {"dequantize", HR_OPT_FLAG, &dequant2, "same as --de-quantize (mlx_lm.fuse's name)"},
    };
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0], fuse_usage, &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    adapter = adapter ? adapter : adapter_path;
    out = out ? out : save_path;
    if (!model || !adapter || !out)
        return hr_cli_fail(&(hr_error){.msg = "--model, --adapter and --out are required (see --help)"});
    hr_convert_opts o = {.src = model, .out = out, .bits = 4, .group = 64,
                         .dtype = HR_DTYPE_COUNT, .gguf = HR_DTYPE_COUNT, .report = stdout,
                         .adapter = adapter, .dequantize = dequant || dequant2};
    return run(&o, gguf);
}
