/* hearth: one binary, one verb per file in src/cli/. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

typedef struct verb {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} verb;

static const verb verbs[] = {
    {"serve", hr_cmd_serve, "serve the OpenAI-compatible API (the default verb)"},
    {"route", hr_cmd_route, "route requests over several servers by prompt prefix (--replicas)"},
    {"generate", hr_cmd_generate, "generate tokens from a prompt"},
    {"bench", hr_cmd_bench, "measure prefill and decode speed against the memory roofline"},
    {"convert", hr_cmd_convert, "write an mlx-lm directory (optionally quantized) or a GGUF file"},
    {"fuse", hr_cmd_fuse, "fuse a LoRA adapter into its base model (mlx_lm.fuse)"},
    {"train", hr_cmd_train, "LoRA fine-tuning (mlx_lm.lora's data, flags and adapters)"},
    {"perplexity", hr_cmd_perplexity, "perplexity of a model over a text file"},
    {"synth", hr_cmd_synth, "write a random-weight model at a real model's shape"},
    {"version", hr_cmd_version, "print the version"},
    {"embed", hr_cmd_embed, "texts -> embeddings, JSON lines (--model, --text/--file)"},
    {"tokenize", hr_cmd_tokenize, "text -> token IDs (--model, --text/--file/--jsonl)"},
    {"detokenize", hr_cmd_detokenize, "token IDs -> text (--model, --tokens)"},
    {"media", hr_cmd_media, "load an image URL as the server would (data:, or http(s) through the SSRF guard)"},
    {"template", hr_cmd_template, "render a model's chat template over messages"},
    {"grammar", hr_cmd_grammar, "compile a JSON Schema against a tokenizer; check MaskBench tests"},
    {"get", hr_cmd_get, "download a model from the Hugging Face hub into its cache"},
    {"ls", hr_cmd_ls, "the models in the Hugging Face cache, and which hearth loads"},
    {"gc", hr_cmd_gc, "remove old revisions and unused blobs from the cache (--dry-run)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: hearth <verb> [flags]   (hearth <verb> --help)\n\nverbs:\n");
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        fprintf(f, "  %-12s %s\n", verbs[i].name, verbs[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2 || (argv[1][0] == '-' && strcmp(argv[1], "-h") && strcmp(argv[1], "--help")))
        return hr_cmd_serve(argc - 1, argv + 1); /* bare `hearth [flags]` serves */
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (!strcmp(argv[1], verbs[i].name))
            return verbs[i].fn(argc - 2, argv + 2);
    fprintf(stderr, "hearth: unknown verb '%s' (see hearth --help)\n", argv[1]);
    return 2;
}
