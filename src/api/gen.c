/* hr_gen: one request through the engine. Submit turns the public
 * parameters into the engine's (prompt tokens, sampler chain, grammar, stop
 * tokens); the reader turns the engine's token log into events of final
 * text (hr_textout: the same detokenizer and stop strings as the server)
 * and, with tools, tool calls (hr_tool_parser over that text). */
#include "api/api.h"
#include "api/images.h"
#include "api/textout.h"
#include "chat/messages.h"
#include "core/error.h"
#include "core/timer.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_MS 100
#define MAX_STOPS 16

struct hr_gen {
    hr_session *s;
    hr_request *req;
    int32_t *prompt;    /* [n_prompt] */
    int n_prompt;
    hr_grammar *grammar; /* owned (hr_gen_submit compiled it), or NULL */
    bool constrained;   /* the engine reads a grammar until it retires req */
    hr_textout out;
    bool text;          /* the model has a tokenizer: events carry text */
    /* tool calls parsed out of the text (tp NULL: none) */
    hr_tool_parser *tp;
    hr_tool_events tev;         /* the last event's */
    char *content;              /* its text outside the calls */
    size_t clen, ccap;
    hr_gen_tool_event *calls;   /* its call pieces, public */
    size_t n_calls, calls_cap;
    hr_images images;   /* decoded for the submit (the engine copies the pixels) */
    int n_steps;        /* steps handed out */
    bool stopped;       /* a stop string ended the text */
    bool done;          /* the last event was handed out */
    bool queued;        /* the engine holds a reference */
    hr_step st;         /* the step of the last event */
};

void hr_gen_params_default(hr_gen_params *p) {
    *p = (hr_gen_params){.max_tokens = -1, .temperature = -1, .top_p = -1, .min_p = -1,
                         .top_k = -1, .repetition_penalty = -1,
                         .repetition_context_size = 20, .presence_context_size = 20,
                         .frequency_context_size = 20, .xtc_threshold = 0.1f,
                         .num_draft_tokens = -1};
}

/* ---- submit ------------------------------------------------------------------ */

/* p's images, decoded into g->images (with messages_json only). */
/* p's audio clips, decoded into g->images.audio (with messages_json only). */
static int load_audio(hr_gen *g, const hr_llm *m, const hr_gen_params *p, hr_error *err) {
    if (p->n_audio < 0 || (p->n_audio && !p->audio))
        return hr_err(err, HR_EINVAL, "audio: n_audio %d without audio", p->n_audio);
    if (p->n_images)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: images and audio in one request");
    if (!m->model->mm_audio)
        return hr_err(err, HR_EUNSUPPORTED, "the model does not accept audio; its input is %s",
                      m->model->mm || m->model->mm_qwen ? "text and images" : "text only");
    if (p->n_audio > HR_IMAGES_MAX)
        return hr_err(err, HR_ERANGE, "audio: at most %d clips a request", HR_IMAGES_MAX);
    if (!(g->images.audio = calloc((size_t)p->n_audio, sizeof *g->images.audio)))
        return hr_err(err, HR_ENOMEM, "out of memory");
    for (int i = 0; i < p->n_audio; i++) {
        int rc = hr__audio_load(m, p->audio[i].data, p->audio[i].size, &g->images.audio[i], err);
        if (rc) {
            hr_err_wrap(err, "audio[%d]", i);
            return rc;
        }
        g->images.n++;
    }
    return 0;
}

static int load_images(hr_gen *g, const hr_llm *m, const hr_gen_params *p, hr_error *err) {
    if (p->n_images < 0 || (p->n_images && !p->images))
        return hr_err(err, HR_EINVAL, "images: n_images %d without images", p->n_images);
    if (p->n_audio)
        return load_audio(g, m, p, err);
    if (!p->n_images)
        return 0;
    if (!m->model->mm && !m->model->mm_qwen)
        return hr_err(err, HR_EUNSUPPORTED, "the model does not accept images; its input is "
                      "text only");
    if (p->n_images > HR_IMAGES_MAX)
        return hr_err(err, HR_ERANGE, "images: at most %d a request", HR_IMAGES_MAX);
    if (!(g->images.images = calloc((size_t)p->n_images, sizeof *g->images.images)))
        return hr_err(err, HR_ENOMEM, "out of memory");
    for (int i = 0; i < p->n_images; i++) {
        const hr_gen_image *im = &p->images[i];
        int rc = !im->data || !im->size
                     ? hr_err(err, HR_EINVAL, "no bytes")
                     : hr_image_decode(im->data, im->size, &g->images.images[i], err);
        if (rc) {
            hr_err_wrap(err, "images[%d]", i);
            return rc;
        }
        g->images.n++;
    }
    return 0;
}

static int build_prompt(hr_gen *g, const hr_llm *m, const hr_gen_params *p, hr_error *err) {
    int given = (p->prompt_tokens != NULL) + (p->prompt_text != NULL) +
                (p->messages_json != NULL);
    if (given != 1)
        return hr_err(err, HR_EINVAL, "give exactly one of prompt_tokens, prompt_text, "
                      "messages_json");
    if ((p->n_images || p->n_audio) && !p->messages_json)
        return hr_err(err, HR_EINVAL, "images and audio go with messages_json");
    if (p->prompt_tokens) {
        if (p->n_prompt_tokens <= 0)
            return hr_err(err, HR_EINVAL, "the prompt is empty");
        if (!(g->prompt = malloc((size_t)p->n_prompt_tokens * sizeof *g->prompt)))
            return hr_err(err, HR_ENOMEM, "out of memory");
        memcpy(g->prompt, p->prompt_tokens, (size_t)p->n_prompt_tokens * sizeof *g->prompt);
        g->n_prompt = p->n_prompt_tokens;
        return 0;
    }
    char *text = NULL;
    unsigned flags = HR_TOKENIZE_ADD_SPECIAL;
    int rc;
    if (p->messages_json) {
        if ((rc = load_images(g, m, p, err)) ||
            (rc = hr__llm_chat_render(m, p->messages_json, p->tools_json,
                                      p->template_kwargs_json, 1, g->images.n > 0, &text, err)))
            return rc;
        char *placed = NULL;
        if (g->images.n && (rc = hr__images_expand(m, text, &g->images, &placed, err))) {
            free(text);
            return rc;
        }
        if (placed) {
            free(text);
            text = placed;
        }
        flags = 0; /* the template writes the special tokens */
    }
    size_t n = 0;
    const char *src = text ? text : p->prompt_text;
    rc = hr_llm_tokenize(m, src, strlen(src), flags, &g->prompt, &n, err);
    free(text);
    if (rc)
        return rc;
    g->n_prompt = (int)n;
    if (!n)
        return hr_err(err, HR_EINVAL, "the prompt is empty");
    return g->images.n ? hr__images_attach(m, g->prompt, n, &g->images, err) : 0;
}

/* The one structured-output field given, compiled. */
static int build_grammar(hr_gen *g, const hr_gen_params *p, hr_error *err) {
    int given = (p->json_schema != NULL) + (p->json_object != 0) + (p->regex != NULL) +
                (p->grammar != NULL) + (p->choices != NULL);
    if (given > 1)
        return hr_err(err, HR_EINVAL, "give at most one of json_schema, json_object, regex, "
                      "grammar, choices");
    if (p->json_schema) {
        json_error_t je;
        json_t *js = json_loads(p->json_schema, 0, &je);
        if (!js)
            return hr_err(err, HR_EINVAL, "json_schema is not valid JSON: %s", je.text);
        int rc = hr_grammar_from_json_schema(&g->grammar, js, err);
        json_decref(js);
        return rc;
    }
    if (p->json_object)
        return hr_grammar_json_object(&g->grammar, err);
    if (p->regex)
        return hr_grammar_from_regex(&g->grammar, p->regex, err);
    if (p->grammar)
        return hr_grammar_from_gbnf(&g->grammar, p->grammar, strlen(p->grammar), err);
    if (p->choices) {
        if (p->n_choices <= 0)
            return hr_err(err, HR_EINVAL, "choices must be a non-empty list of strings");
        return hr_grammar_from_choices(&g->grammar, p->choices, p->n_choices, err);
    }
    return 0;
}

/* tools_json + tool_choice: *tools (owned) gets the tools whose calls are
 * parsed, or NULL; a forced call becomes g's grammar. */
static int build_tools(hr_gen *g, const hr_llm *m, const hr_gen_params *p, json_t **tools,
                       hr_error *err) {
    const char *choice = p->tool_choice ? p->tool_choice : "auto";
    if (!p->tools_json) {
        if (p->tool_choice && strcmp(choice, "auto") && strcmp(choice, "none"))
            return hr_err(err, HR_EINVAL, "tool_choice '%s' needs tools_json", choice);
        return 0;
    }
    if (!p->messages_json)
        return hr_err(err, HR_EINVAL, "tools_json goes with messages_json");
    json_error_t je;
    json_t *t = json_loads(p->tools_json, 0, &je);
    if (!json_is_array(t)) {
        json_decref(t);
        return hr_err(err, HR_EINVAL, "tools_json must be a JSON array of tools%s%s",
                      t ? "" : ": ", t ? "" : je.text);
    }
    if (!strcmp(choice, "none") || json_array_size(t) == 0) {
        json_decref(t);
        return 0;
    }
    if (strcmp(choice, "auto")) { /* "required", or one function by name */
        if (g->grammar) {
            json_decref(t);
            return hr_err(err, HR_EINVAL, "a forced tool call (tool_choice '%s') and "
                          "structured output cannot go together", choice);
        }
        int rc = hr__llm_tool_grammar(m, t, strcmp(choice, "required") ? choice : NULL,
                                      &g->grammar, err);
        if (rc) {
            json_decref(t);
            return rc;
        }
    }
    if (m->tool_format)
        *tools = t;
    else
        json_decref(t); /* no call format: the output stays text */
    return 0;
}

static void sampler_params(const hr_llm *m, const hr_gen_params *p, hr_sampler_params *sp) {
    const hr_gen_defaults *d = &m->defaults;
    hr_sampler_params_default(sp);
    sp->temp = p->temperature >= 0 ? p->temperature : (float)d->temp;
    sp->top_p = p->top_p >= 0 ? p->top_p : (float)d->top_p;
    sp->min_p = p->min_p >= 0 ? p->min_p : (float)d->min_p;
    sp->top_k = p->top_k >= 0 ? p->top_k : d->top_k;
    sp->repetition_penalty = p->repetition_penalty >= 0 ? p->repetition_penalty
                                                        : (float)d->rep;
    sp->repetition_context_size = p->repetition_context_size;
    sp->presence_penalty = p->presence_penalty;
    sp->presence_context_size = p->presence_context_size;
    sp->frequency_penalty = p->frequency_penalty;
    sp->frequency_context_size = p->frequency_context_size;
    sp->xtc_probability = p->xtc_probability;
    sp->xtc_threshold = p->xtc_threshold;
    sp->xtc_special = m->stop_ids; /* XTC never removes end-of-sequence tokens */
    sp->n_xtc_special = m->n_stop_ids;
    sp->bias_ids = p->logit_bias_ids;
    sp->bias_values = p->logit_bias_values;
    sp->n_bias = p->n_logit_bias;
    sp->seed = p->has_seed ? p->seed : (uint64_t)(hr_now() * 1e9);
}

static int check(const hr_llm *m, const hr_gen_params *p, hr_error *err) {
    int V = m->model->hp.n_vocab;
    if (p->n_stop < 0 || p->n_stop > MAX_STOPS || (p->n_stop && !p->stop))
        return hr_err(err, HR_ERANGE, "stop: at most %d strings", MAX_STOPS);
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i])
            return hr_err(err, HR_EINVAL, "stop: string %d is NULL", i);
    if (p->top_k >= V)
        return hr_err(err, HR_ERANGE, "top_k must be smaller than the vocabulary");
    if (p->n_logit_bias < 0 || (p->n_logit_bias && (!p->logit_bias_ids ||
                                                    !p->logit_bias_values)))
        return hr_err(err, HR_EINVAL, "logit_bias: ids and values are needed");
    for (int i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias_ids[i] < 0 || p->logit_bias_ids[i] >= V)
            return hr_err(err, HR_ERANGE, "logit_bias names token id %d, outside the "
                          "vocabulary", p->logit_bias_ids[i]);
    if (p->choices && p->n_choices > 4096)
        return hr_err(err, HR_ERANGE, "choices: at most 4096");
    return 0;
}

/* Queue rp on s; g's prompt (when not set yet) becomes a copy of rp's. */
static int start(hr_gen *g, const hr_req_params *rp, const char *const *stops, int n_stops,
                 const json_t *tools, hr_error *err) {
    hr_llm *m = g->s->llm;
    int rc;
    if (tools && m->tool_format &&
        (rc = hr_tool_parser_new(&g->tp, m->tool_format,
                                 &(hr_tool_parser_opts){.tools = tools}, err)))
        return rc;
    /* with calls parsed, markers may be special tokens: keep them */
    unsigned detok_flags = g->tp ? 0 : HR_DETOK_SKIP_SPECIAL;
    if (!g->prompt) {
        if (!(g->prompt = malloc((size_t)(rp->n_prompt > 0 ? rp->n_prompt : 1) *
                                 sizeof *g->prompt)))
            return hr_err(err, HR_ENOMEM, "out of memory");
        if (rp->n_prompt > 0)
            memcpy(g->prompt, rp->prompt, (size_t)rp->n_prompt * sizeof *g->prompt);
        g->n_prompt = rp->n_prompt;
    }
    if ((rc = hr_request_new(&g->req, g->s->engine, rp, err)))
        return rc;
    g->constrained = rp->grammar != NULL;
    g->text = m->tok != NULL;
    if (g->text && (rc = hr_textout_init(&g->out, m->tok, detok_flags, stops, n_stops, err)))
        return rc;
    if ((rc = hr_engine_submit(g->s->engine, g->req, err)))
        return rc;
    g->queued = true;
    return 0;
}

int hr__gen_start(hr_gen **out, hr_session *s, const hr_req_params *rp,
                  const char *const *stops, int n_stops, const json_t *tools, hr_error *err) {
    *out = NULL;
    hr_gen *g = calloc(1, sizeof *g);
    if (!g)
        return hr_err(err, HR_ENOMEM, "out of memory");
    g->s = s;
    int rc = start(g, rp, stops, n_stops, tools, err);
    if (rc) {
        hr_gen_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

int hr_gen_submit(hr_gen **out, hr_session *s, const hr_gen_params *p, hr_error *err) {
    if (!out || !s || !p)
        return hr_err(err, HR_EINVAL, "hr_gen_submit: NULL argument");
    *out = NULL;
    hr_llm *m = s->llm;
    int rc = check(m, p, err);
    if (rc)
        return rc;
    hr_gen *g = calloc(1, sizeof *g);
    if (!g)
        return hr_err(err, HR_ENOMEM, "out of memory");
    g->s = s;
    json_t *tools = NULL; /* the tools whose calls are parsed, or NULL */
    hr_req_params rp = {.max_tokens = p->max_tokens >= 0 ? p->max_tokens
                                                         : m->defaults.max_tokens,
                        .top_logprobs = p->top_logprobs,
                        .score_from = p->score_from,
                        .stop_ids = p->ignore_eos ? NULL : m->stop_ids,
                        .n_stop_ids = p->ignore_eos ? 0 : m->n_stop_ids};
    sampler_params(m, p, &rp.sampler);
    if ((rc = hr__session_spec(s, p->spec, p->num_draft_tokens, NULL, &rp.spec, &rp.num_draft,
                               err)) ||
        (rc = hr__session_adapter_get(s, p->adapter, &rp.adapter, err)))
        goto fail;
    if ((rc = build_prompt(g, m, p, err)) || (rc = build_grammar(g, p, err)) ||
        (rc = build_tools(g, m, p, &tools, err)))
        goto fail;
    if (g->grammar) {
        if ((rc = hr__llm_grammar_ready(m, g->grammar, &rp.gvocab, err)))
            goto fail;
        rp.grammar = g->grammar;
    }
    rp.prompt = g->prompt;
    rp.n_prompt = g->n_prompt;
    rp.images = g->images.req;
    rp.n_images = g->images.n;
    if ((rc = start(g, &rp, p->stop, p->n_stop, tools, err)))
        goto fail;
    hr__images_free(&g->images);
    json_decref(tools);
    hr_adapter_unref(rp.adapter); /* the request holds its own */
    *out = g;
    return 0;
fail:
    json_decref(tools);
    hr_adapter_unref(rp.adapter);
    hr_gen_free(g);
    return rc;
}

/* ---- read ------------------------------------------------------------------ */

static int finish_code(hr_finish f) {
    switch (f) {
    case HR_FINISH_STOP: return HR_GEN_STOP;
    case HR_FINISH_LENGTH: return HR_GEN_LENGTH;
    case HR_FINISH_CANCELLED: return HR_GEN_CANCELLED;
    case HR_FINISH_ERROR: return HR_GEN_ERROR;
    default: return HR_GEN_RUNNING;
    }
}

/* With tools: split ev's text into content (ev->text) and call pieces
 * (ev->tool_events); end: the output is over (flush the parser). */
static int route(hr_gen *g, hr_gen_event *ev, bool end, hr_error *err) {
    hr_tool_events_reset(&g->tev);
    g->clen = g->n_calls = 0;
    if (!g->tp)
        return 0;
    if (hr_tool_parser_push(g->tp, ev->text, ev->text_len, &g->tev) ||
        (end && hr_tool_parser_finish(g->tp, &g->tev)))
        return hr_err(err, HR_ENOMEM, "out of memory parsing tool calls");
    for (size_t i = 0; i < g->tev.n; i++) {
        const hr_tool_event *v = &g->tev.ev[i];
        if (v->kind == HR_TOOL_EV_CONTENT) {
            if (g->clen + v->len + 1 > g->ccap) {
                size_t c = (g->clen + v->len + 1) * 2;
                char *b = realloc(g->content, c);
                if (!b)
                    return hr_err(err, HR_ENOMEM, "out of memory");
                g->content = b;
                g->ccap = c;
            }
            memcpy(g->content + g->clen, v->text, v->len);
            g->content[g->clen += v->len] = 0;
            continue;
        }
        if (g->n_calls == g->calls_cap) {
            size_t c = g->calls_cap ? g->calls_cap * 2 : 8;
            hr_gen_tool_event *b = realloc(g->calls, c * sizeof *b);
            if (!b)
                return hr_err(err, HR_ENOMEM, "out of memory");
            g->calls = b;
            g->calls_cap = c;
        }
        g->calls[g->n_calls++] = (hr_gen_tool_event){
            .kind = v->kind == HR_TOOL_EV_CALL_START  ? HR_TOOL_CALL_START
                    : v->kind == HR_TOOL_EV_CALL_ARGS ? HR_TOOL_CALL_ARGS
                                                      : HR_TOOL_CALL_END,
            .index = v->index, .id = v->id, .name = v->name,
            .args = v->kind == HR_TOOL_EV_CALL_ARGS ? v->text : NULL,
            .args_len = v->kind == HR_TOOL_EV_CALL_ARGS ? v->len : 0};
    }
    ev->text = g->content ? g->content : "";
    ev->text_len = g->clen;
    ev->n_tool_events = (int)g->n_calls;
    ev->tool_events = g->calls;
    ev->n_tool_calls = hr_tool_parser_calls(g->tp);
    return 0;
}

const hr_tool_events *hr__gen_tool_events(const hr_gen *g) { return &g->tev; }

/* The last event: why it ended, the text held back, usage. */
static int last_event(hr_gen *g, hr_gen_event *ev, hr_error *err) {
    hr_error ferr = {0};
    hr_finish f = g->stopped ? HR_FINISH_STOP : hr_request_finish(g->req, &ferr);
    g->done = true;
    *ev = (hr_gen_event){.text = "", .token = -1, .finish = finish_code(f),
                         .prompt_tokens = g->n_prompt,
                         .completion_tokens = g->stopped ? g->n_steps
                                                         : hr_request_completion_tokens(g->req),
                         .cached_tokens = hr_request_cached_tokens(g->req)};
    long drafted, accepted;
    hr_request_spec_counts(g->req, &drafted, &accepted);
    ev->drafted_tokens = (int)drafted;
    ev->accepted_tokens = (int)accepted;
    if (f == HR_FINISH_ERROR) {
        hr_err(err, HR_EINVAL, "%s", ferr.msg);
        return HR_EINVAL;
    }
    int rc = g->text ? hr_textout_finish(&g->out, f == HR_FINISH_STOP, &ev->text, &ev->text_len,
                                         err)
                     : 0;
    if (rc) {
        ev->finish = HR_GEN_ERROR;
        return rc;
    }
    rc = route(g, ev, true, err);
    return rc ? rc : 1;
}

int hr__gen_next_timed(hr_gen *g, hr_gen_event *ev, int timeout_ms, hr_error *err) {
    if (g->done)
        return 0;
    int rc = g->stopped ? 0 : hr_request_wait(g->req, g->n_steps, &g->st, timeout_ms);
    if (rc < 0)
        return 2;
    if (rc == 0)
        return last_event(g, ev, err);
    g->n_steps++;
    *ev = (hr_gen_event){.text = "", .token = g->st.token, .logprob = g->st.logprob,
                         .n_top = g->st.n_top, .top_ids = g->st.top_ids,
                         .top_logprobs = g->st.top_lps, .finish = HR_GEN_RUNNING};
    int tr = g->text ? hr_textout_push(&g->out, g->st.token, &ev->text, &ev->text_len, err) : 0;
    if (tr < 0) { /* the text would miss a piece: the request fails */
        hr_request_cancel(g->req);
        g->done = true;
        *ev = (hr_gen_event){.text = "", .token = -1, .finish = HR_GEN_ERROR,
                             .prompt_tokens = g->n_prompt};
        return tr;
    }
    if (tr == 1) {
        g->stopped = true; /* the next call gives the last event */
        hr_request_cancel(g->req);
    }
    if ((rc = route(g, ev, false, err))) {
        hr_request_cancel(g->req);
        return rc;
    }
    return 1;
}

int hr_gen_next(hr_gen *g, hr_gen_event *ev, hr_error *err) {
    if (!g || !ev)
        return hr_err(err, HR_EINVAL, "hr_gen_next: NULL argument");
    int rc;
    while ((rc = hr__gen_next_timed(g, ev, WAIT_MS, err)) == 2)
        ;
    return rc;
}

hr_request *hr__gen_request(const hr_gen *g) { return g->req; }

const char *hr__gen_stop_matched(const hr_gen *g) {
    return g->stopped ? hr_stop_matched(&g->out.stop) : NULL;
}

int hr_gen_run(hr_gen *g, hr_gen_cb cb, void *user, hr_error *err) {
    if (!g || !cb)
        return hr_err(err, HR_EINVAL, "hr_gen_run: NULL argument");
    hr_gen_event ev;
    int rc;
    while ((rc = hr_gen_next(g, &ev, err)) == 1) {
        if (cb(&ev, user)) {
            hr_gen_cancel(g);
            while ((rc = hr_gen_next(g, &ev, err)) == 1)
                ;
            return rc < 0 ? rc : 0;
        }
    }
    return rc;
}

void hr_gen_cancel(hr_gen *g) {
    if (g && g->req)
        hr_request_cancel(g->req);
}

const float *hr_gen_prompt_logprobs(const hr_gen *g, int *n) {
    const float *lp = g && g->req ? hr_request_prompt_logprobs(g->req) : NULL;
    if (n)
        *n = lp ? g->n_prompt : 0;
    return lp;
}

const int32_t *hr_gen_prompt(const hr_gen *g, int *n) {
    if (n)
        *n = g ? g->n_prompt : 0;
    return g ? g->prompt : NULL;
}

void hr_gen_free(hr_gen *g) {
    if (!g)
        return;
    if (g->req) {
        hr_request_cancel(g->req);
        /* the engine's matcher reads the grammar until it retires the request */
        hr_step st;
        while (g->queued && g->constrained && hr_request_wait(g->req, INT_MAX, &st, WAIT_MS) < 0)
            ;
        hr_request_release(g->req);
    }
    hr_textout_deinit(&g->out);
    hr_tool_parser_free(g->tp);
    hr_tool_events_free(&g->tev);
    free(g->content);
    free(g->calls);
    hr_grammar_free(g->grammar);
    hr__images_free(&g->images);
    free(g->prompt);
    free(g);
}
