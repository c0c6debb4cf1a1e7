/* hearth generate: one request through the public API (include/hearth.h),
 * the same path as the server's: sampling, penalties, stop strings,
 * structured output and the prompt cache; the text streams to stdout. */
#include "api/api.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/tokens.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/file.h"
#include "core/timer.h"
#include "model/kv.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: hearth generate [--model PATH] (--prompt TEXT | --prompt-tokens 1,2,3 | "
    "--chat TEXT | --messages JSON) [--max-tokens N] [--temp T] [--top-p P] [--top-k K] "
    "[--min-p P] [--seed S] [--stop S] [--json-schema S | --regex R | --grammar G | "
    "--json-object] [--top-logprobs K] [--json] ...";

/* What the request returned, for --json and the speed line. */
typedef struct run {
    bool json, ids_only;    /* ids_only: the model has no tokenizer */
    json_t *tokens, *tops;  /* --json: generated ids, per-step top logprobs */
    int n_out, finish, completion, cached, drafted, accepted;
    double t_submit, t_first, t_last;
    char *text;             /* --json: the text */
    size_t len;
} run;

static int on_event(const hr_gen_event *ev, void *user) {
    run *r = user;
    double now = hr_now();
    if (ev->token >= 0) {
        if (r->n_out++ == 0)
            r->t_first = now;
        r->t_last = now;
        json_array_append_new(r->tokens, json_integer(ev->token));
        if (r->tops) {
            json_t *step = json_array();
            for (int i = 0; i < ev->n_top; i++)
                json_array_append_new(step, json_pack("{s:i,s:f}", "id", ev->top_ids[i],
                                                      "logprob", (double)ev->top_logprobs[i]));
            json_array_append_new(r->tops, step);
        }
        if (r->ids_only && !r->json)
            printf("%s%d", r->n_out > 1 ? "," : "", ev->token);
    }
    if (ev->text_len && r->json) {
        char *t = realloc(r->text, r->len + ev->text_len + 1);
        if (!t)
            return 1;
        memcpy(t + r->len, ev->text, ev->text_len);
        r->len += ev->text_len;
        t[r->len] = 0;
        r->text = t;
    } else if (ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, stdout);
    }
    if (!r->json)
        fflush(stdout);
    if (ev->finish != HR_GEN_RUNNING) {
        r->finish = ev->finish;
        r->completion = ev->completion_tokens;
        r->cached = ev->cached_tokens;
        r->drafted = ev->drafted_tokens;
        r->accepted = ev->accepted_tokens;
    }
    return 0;
}

static const char *finish_name(int f) {
    return f == HR_GEN_STOP ? "stop" : f == HR_GEN_LENGTH ? "length"
                                     : f == HR_GEN_CANCELLED ? "cancelled" : "error";
}

/* --stop: one string, or a JSON array of strings for several. */
static int parse_stops(const char *arg, json_t **holder, const char **stops, int *n,
                       hr_error *err) {
    *n = 0;
    if (!arg)
        return 0;
    json_t *v = arg[0] == '[' ? json_loads(arg, 0, NULL) : NULL;
    if (!json_is_array(v)) {
        json_decref(v);
        stops[(*n)++] = arg;
        return 0;
    }
    if (json_array_size(v) > 16) {
        json_decref(v);
        return hr_err(err, HR_ERANGE, "--stop: at most 16 strings");
    }
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!(stops[(*n)++] = json_string_value(json_array_get(v, i)))) {
            json_decref(v);
            return hr_err(err, HR_EINVAL, "--stop: a JSON array of strings, or one string");
        }
    *holder = v;
    return 0;
}

int hr_cmd_generate(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *prompt_tokens = NULL, *kv_dtype = NULL,
               *chat = NULL, *messages = NULL, *stop = NULL, *schema = NULL, *regex = NULL,
               *grammar = NULL, *ssd = NULL, *device = "auto", *draft = NULL, *spec = NULL,
               *adapter = NULL, *ctk = NULL, *ctv = NULL, *kvq = NULL;
    long max_tokens = 100, top_k = -1, seed = 0, top_lp = 0, threads = 0, ctx = 0, rep_ctx = 20,
         pc_on = 1, n_draft = 3, kv_res = 0, kv_bits = 0, kv_group = 64, kv_start = 5000;
    double temp = -1, top_p = -1, min_p = -1, rep = -1, presence = 0, frequency = 0;
    int json = 0, ignore_eos = 0, json_obj = 0, no_warmup = 0;
    hr_opt_list image = {0}, audio = {0};
    const hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "model directory or .gguf file, or ORG/NAME[@REV] (default: the demo model)"},
        {"device", HR_OPT_STR, &device, "where the model runs: auto (a GPU when there is one), cpu, cuda, cuda:N"},
        {"prompt", HR_OPT_STR, &prompt, "prompt text, special tokens added (as /v1/completions)"},
        {"prompt-tokens", HR_OPT_STR, &prompt_tokens, "prompt as token ids, e.g. 1,2,3"},
        {"chat", HR_OPT_STR, &chat, "one user message through the chat template"},
        {"messages", HR_OPT_STR, &messages, "chat messages as a JSON array (as /v1/chat/completions)"},
        {"image", HR_OPT_LIST, &image, "an image file (JPEG, PNG, WebP) for a model that takes images: before --chat's text, or for --messages' image parts in order (may repeat)"},
        {"audio", HR_OPT_LIST, &audio, "a WAV file (16 kHz, at most 30 s) for a model that takes audio: before --chat's text, or for --messages' input_audio parts in order (may repeat)"},
        {"max-tokens", HR_OPT_INT, &max_tokens, "tokens to generate (default 100)"},
        {"temp", HR_OPT_FLOAT, &temp, "temperature; 0 = greedy (default: the model's, else 0)"},
        {"top-p", HR_OPT_FLOAT, &top_p, "nucleus sampling mass (default 1 = off)"},
        {"top-k", HR_OPT_INT, &top_k, "keep the K most likely tokens (default 0 = off)"},
        {"min-p", HR_OPT_FLOAT, &min_p, "min-p filter (default 0 = off)"},
        {"repetition-penalty", HR_OPT_FLOAT, &rep, "mlx-lm's repetition penalty (default off)"},
        {"repetition-context-size", HR_OPT_INT, &rep_ctx, "tokens it looks back (default 20)"},
        {"presence-penalty", HR_OPT_FLOAT, &presence, "presence penalty (default 0)"},
        {"frequency-penalty", HR_OPT_FLOAT, &frequency, "frequency penalty (default 0)"},
        {"seed", HR_OPT_INT, &seed, "sampling seed (default 0)"},
        {"stop", HR_OPT_STR, &stop, "stop string, or a JSON array of up to 16"},
        {"json-schema", HR_OPT_STR, &schema, "constrain the output to a JSON Schema (JSON text)"},
        {"json-object", HR_OPT_FLAG, &json_obj, "constrain the output to a JSON object"},
        {"regex", HR_OPT_STR, &regex, "constrain the output to a regular expression"},
        {"grammar", HR_OPT_STR, &grammar, "constrain the output to a GBNF grammar"},
        {"top-logprobs", HR_OPT_INT, &top_lp, "report the K best logprobs per step (0..20)"},
        {"threads", HR_OPT_INT, &threads, "compute threads (default: all cores)"},
        {"ctx", HR_OPT_INT, &ctx, "context size in tokens (default: model max, capped at 8192)"},
        {"kv-dtype", HR_OPT_STR, &kv_dtype, "KV cache: auto (f16 for GGUF, else f32), f32, f16, bf16"},
        {"cache-type-k", HR_OPT_STR, &ctk, "K cache type as llama.cpp: f32, f16, bf16, q8_0, q4_0 (default: --kv-dtype)"},
        {"cache-type-v", HR_OPT_STR, &ctv, "V cache type as llama.cpp: f32, f16, bf16, q8_0, q4_0 (default: --kv-dtype)"},
        {"kv-quant", HR_OPT_STR, &kvq, "TurboQuant KV cache: turbo, turbo:B or turbo:K_BITS,V_BITS (bits 2, 2.5, 3, 3.5, 4; default off)"},
        {"kv-residual", HR_OPT_INT, &kv_res, "with a quantized KV cache: a token reads the keys of its window of N positions (a multiple of 32) at full precision (default 0: off; docs/kv-quant.md)"},
        {"kv-bits", HR_OPT_INT, &kv_bits, "quantize the KV cache to 2, 3, 4, 6 or 8 bits (mlx-lm's affine KV; default off)"},
        {"kv-group-size", HR_OPT_INT, &kv_group, "group size of the quantized KV cache (default 64)"},
        {"quantized-kv-start", HR_OPT_INT, &kv_start, "with --kv-bits: the sequence's KV converts to it after the step that passes this many tokens (0: quantized from the first token; default 5000)"},
        {"prompt-cache", HR_OPT_INT, &pc_on, "0 turns the prompt cache off (default 1)"},
        {"ssd-cache", HR_OPT_STR, &ssd, "prompt cache directory shared across runs (and with serve)"},
        {"ignore-eos", HR_OPT_FLAG, &ignore_eos, "do not stop at end-of-sequence tokens"},
        {"no-warmup", HR_OPT_FLAG, &no_warmup, "do not run one token through the model before the prompt (the prompt's figure then pays the weights' first touches)"},
        {"draft-model", HR_OPT_STR, &draft, "draft model for speculative decoding (same tokenizer)"},
        {"num-draft-tokens", HR_OPT_INT, &n_draft, "tokens drafted per step (default 3)"},
        {"spec", HR_OPT_STR, &spec, "drafting: off, ngram (prompt lookup), draft (default with --draft-model)"},
        {"adapter-path", HR_OPT_STR, &adapter, "LoRA adapter directory (peft or mlx-lm; docs/adapters.md)"},
        {"json", HR_OPT_FLAG, &json, "print one JSON object"},
    };
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0], usage, &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    if ((prompt != NULL) + (prompt_tokens != NULL) + (chat != NULL) + (messages != NULL) != 1)
        return hr_cli_fail(&(hr_error){.msg = "give exactly one of --prompt, --prompt-tokens, "
                                              "--chat, --messages"});
    if (image.n && !chat && !messages)
        return hr_cli_fail(&(hr_error){.msg = "--image goes with --chat or --messages"});
    if (audio.n && !chat && !messages)
        return hr_cli_fail(&(hr_error){.msg = "--audio goes with --chat or --messages"});
    if (n_draft < 1 || n_draft > HR_SPEC_MAX_K)
        return hr_cli_fail(&(hr_error){.msg = "--num-draft-tokens must be in [1, 16]"});
    if (max_tokens < 0 || top_lp < 0 || top_lp > 20 || threads < 0 || ctx < 0 || rep_ctx < 0)
        return hr_cli_fail(&(hr_error){.msg = "a numeric flag is out of range (see --help)"});
    if ((rc = hr_kv_quant_check(kv_bits, kv_group, kv_start, &err)))
        return hr_cli_fail(&err);

    hr_llm *llm = NULL;
    hr_session *s = NULL;
    hr_gen *g = NULL;
    int32_t *ptoks = NULL;
    json_t *stops_json = NULL, *msgs = NULL;
    run r = {.json = json, .tokens = json_array(), .tops = top_lp ? json_array() : NULL};
    const char *stops[16];
    hr_gen_image images[HR_OPT_LIST_MAX] = {{0}}, clips[HR_OPT_LIST_MAX] = {{0}};
    int n_stops = 0, n_prompt = 0, status = 1;
    for (int i = 0; i < image.n; i++) {
        char *data = NULL;
        if ((rc = hr_file_read(image.v[i], &data, &images[i].size, &err)))
            goto done;
        images[i].data = data;
    }
    for (int i = 0; i < audio.n; i++) {
        char *data = NULL;
        if ((rc = hr_file_read(audio.v[i], &data, &clips[i].size, &err)))
            goto done;
        clips[i].data = data;
    }
    if (prompt_tokens && (rc = hr_parse_token_list(prompt_tokens, &ptoks, &n_prompt, &err)))
        goto done;
    if ((rc = parse_stops(stop, &stops_json, stops, &n_stops, &err)))
        goto done;
    hr_session_opts so = {.n_threads = (int)threads, .max_batch = 1, .n_ctx = (int)ctx,
                          .prompt_cache = pc_on ? 0 : -1, .ssd_dir = ssd,
                          .draft_model = draft, .spec = spec, .num_draft_tokens = (int)n_draft,
                          .adapter_path = adapter, .kv_quant = kvq,
                          .kv_residual = (int)kv_res, .kv_bits = (int)kv_bits,
                          .kv_group = (int)kv_group, .quantized_kv_start = (int)kv_start,
                          .warmup = !no_warmup};
    if ((rc = hr__kv_types_from_names(kv_dtype, ctk, ctv, &so.kv_dtype, &so.kv_dtype_v, &err)) ||
        (rc = hr_llm_load(&llm, model ? model : hr_cli_default_model(),
                          &(hr_llm_opts){.device = device}, &err)) ||
        (rc = hr_session_new(&s, llm, &so, &err)))
        goto done;
    hr_fault_arm_env(); /* HEARTH_FAULT: counted from here, the load excepted */
    if (chat) { /* with images (audio): them, then the text (as mlx-vlm's prompt) */
        json_t *content = json_string(chat);
        if (image.n || audio.n) {
            json_decref(content);
            content = json_array();
            for (int i = 0; i < image.n; i++)
                json_array_append_new(content, json_pack("{s:s}", "type", "image"));
            for (int i = 0; i < audio.n; i++)
                json_array_append_new(content, json_pack("{s:s}", "type", "input_audio"));
            json_array_append_new(content, json_pack("{s:s,s:s}", "type", "text", "text", chat));
        }
        if (!(msgs = json_pack("[{s:s,s:o}]", "role", "user", "content", content))) {
            rc = hr_err(&err, HR_ENOMEM, "out of memory");
            goto done;
        }
    }
    char *msgs_text = msgs ? json_dumps(msgs, 0) : NULL;
    hr_gen_params p;
    hr_gen_params_default(&p);
    p.prompt_tokens = ptoks;
    p.n_prompt_tokens = n_prompt;
    p.prompt_text = prompt;
    p.messages_json = msgs_text ? msgs_text : messages;
    p.max_tokens = (int)max_tokens;
    p.temperature = (float)temp;
    p.top_p = (float)top_p;
    p.min_p = (float)min_p;
    p.top_k = (int)top_k;
    p.repetition_penalty = (float)rep;
    p.repetition_context_size = (int)rep_ctx;
    p.presence_penalty = (float)presence;
    p.frequency_penalty = (float)frequency;
    p.has_seed = 1;
    p.seed = (uint64_t)seed;
    p.ignore_eos = ignore_eos;
    p.stop = stops;
    p.n_stop = n_stops;
    p.top_logprobs = (int)top_lp;
    p.json_schema = schema;
    p.json_object = json_obj;
    p.regex = regex;
    p.grammar = grammar;
    p.images = images;
    p.n_images = image.n;
    p.audio = clips;
    p.n_audio = audio.n;
    r.ids_only = !llm->tok;
    r.t_submit = hr_now();
    rc = hr_gen_submit(&g, s, &p, &err);
    free(msgs_text);
    if (rc || (rc = hr_gen_run(g, on_event, &r, &err)))
        goto done;
    int np = 0;
    const int32_t *pt = hr_gen_prompt(g, &np);
    double pre = r.n_out ? r.t_first - r.t_submit : 0, dec = r.t_last - r.t_first;
    double prefill_tps = pre > 0 ? np / pre : 0, decode_tps = r.n_out > 1 ? (r.n_out - 1) / dec : 0;
    if (json) {
        json_t *o = json_object(), *pj = json_array();
        for (int i = 0; i < np; i++)
            json_array_append_new(pj, json_integer(pt[i]));
        json_object_set_new(o, "prompt_tokens", pj);
        json_object_set(o, "tokens", r.tokens);
        if (!r.ids_only)
            json_object_set_new(o, "text", json_stringn(r.text ? r.text : "", r.len));
        if (r.tops)
            json_object_set(o, "top_logprobs", r.tops);
        json_object_set_new(o, "finish_reason", json_string(finish_name(r.finish)));
        json_t *u = json_pack("{s:i,s:i,s:i}", "prompt_tokens", np, "completion_tokens",
                              r.completion, "cached_tokens", r.cached);
        if (r.drafted)
            json_object_set_new(u, "completion_tokens_details",
                                json_pack("{s:i,s:i}", "accepted_prediction_tokens", r.accepted,
                                          "rejected_prediction_tokens", r.drafted - r.accepted));
        json_object_set_new(o, "usage", u);
        json_object_set_new(o, "prefill_tokens_per_s", json_real(prefill_tps));
        json_object_set_new(o, "decode_tokens_per_s", json_real(decode_tps));
        char *txt = json_dumps(o, JSON_COMPACT);
        printf("%s\n", txt ? txt : "{}");
        free(txt);
        json_decref(o);
    } else {
        printf("\n");
        fflush(stdout);
        fprintf(stderr, "prompt: %d tokens (%d cached), %.1f tokens/s; generated %d tokens, "
                "%.1f tokens/s; finish: %s\n", np, r.cached, prefill_tps, r.n_out, decode_tps,
                finish_name(r.finish));
        if (r.drafted)
            fprintf(stderr, "speculative: %d tokens drafted, %d accepted (%.0f%%)\n", r.drafted,
                    r.accepted, 100.0 * r.accepted / r.drafted);
    }
    status = 0;
done:
    if (rc)
        hr_cli_fail(&err);
    hr_gen_free(g);
    hr_session_free(s);
    hr_llm_free(llm);
    json_decref(r.tokens);
    json_decref(r.tops);
    json_decref(stops_json);
    json_decref(msgs);
    free(r.text);
    free(ptoks);
    for (int i = 0; i < image.n; i++)
        free((void *)images[i].data);
    for (int i = 0; i < audio.n; i++)
        free((void *)clips[i].data);
    return status;
}
