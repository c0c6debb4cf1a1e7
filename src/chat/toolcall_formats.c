/* Tool calls: the table of formats (how to recognize each in a chat
 * template, how its calls look in the output), detection, and the JSON
 * Schema shape of one valid call for grammar-constrained tool_choice.
 * docs/tool-calling.md describes every row. */
#include "chat/toolcall_int.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the table ---------------------------------------------------------------- */

/* Field shorthands; the rows read as data. */
#define JSON_CALL(o, c, fl, nk, a0, a1, pre, suf)                                        \
    {.open = (o), .close = (c), .kind = HR__TOOL_JSON, .flags = (fl), .name_key = (nk),    \
     .args_keys = {(a0), (a1)}, .schema_prefix = (pre), .schema_suffix = (suf)}
#define NAMED_CALL(o, c, fl, co, sp, cc, after, cut, pre, mid, suf)                        \
    {.open = (o), .close = (c), .kind = HR__TOOL_NAME_ARGS, .flags = (fl), .call_open = (co), \
     .sep = (sp), .call_close = (cc), .name_after = (after), .name_cut = (cut),              \
     .schema_prefix = (pre), .schema_mid = (mid), .schema_suffix = (suf)}
#define XML_CALL(o, c, fl, fo, ne, po, ke, vo, pc, fc)                                      \
    {.open = (o), .close = (c), .kind = HR__TOOL_XML, .flags = (fl), .func_open = (fo),       \
     .name_end = (ne), .param_open = (po), .key_end = (ke), .value_open = (vo),              \
     .param_close = (pc), .func_close = (fc)}


#define QWEN_XML(o, c) \
    XML_CALL(o, c, HR__TS_TRIM1, "<function=", ">", "<parameter=", ">", "", "</parameter>", "</function>")

static const hr_tool_format formats[] = {
    /* Gemma 4: <|tool_call>call:f{k:<|"|>v<|"|>}<tool_call|> */
    {"gemma4", {"<|tool_call>", "<tool_call|>"}, NULL,
     {NAMED_CALL("<|tool_call>", "<tool_call|>", HR__TS_GEMMA, "call:", "", "", NULL, NULL,
                 NULL, NULL, NULL)}, 1},
    /* MiniMax-M2: <minimax:tool_call><invoke name="f"><parameter name="k">v</parameter>... */
    {"minimax_m2", {"<minimax:tool_call>"}, NULL,
     {XML_CALL("<minimax:tool_call>", "</minimax:tool_call>", 0, "<invoke name=\"", "\">",
               "<parameter name=\"", "\">", "", "</parameter>", "</invoke>")}, 1},
    /* Seed-OSS: Qwen3-Coder's XML inside <seed:tool_call> */
    {"seed_oss", {"<seed:tool_call>"}, NULL, {QWEN_XML("<seed:tool_call>", "</seed:tool_call>")}, 1},
    /* DeepSeek V3.2 / V4: DSML invoke blocks; string="true|false" types values */
    {"deepseek_v32", {"\xef\xbd\x9c" "DSML" "\xef\xbd\x9c", "'function_calls>"}, NULL,
     {XML_CALL("<\xef\xbd\x9c" "DSML\xef\xbd\x9c" "function_calls>",
               "</\xef\xbd\x9c" "DSML\xef\xbd\x9c" "function_calls>", HR__TS_KEY_ATTRS,
               "<\xef\xbd\x9c" "DSML\xef\xbd\x9c" "invoke name=\"", "\">",
               "<\xef\xbd\x9c" "DSML\xef\xbd\x9c" "parameter name=\"", "\"", "",
               "</\xef\xbd\x9c" "DSML\xef\xbd\x9c" "parameter>",
               "</\xef\xbd\x9c" "DSML\xef\xbd\x9c" "invoke>")}, 1},
    {"deepseek_v4", {"\xef\xbd\x9c" "DSML" "\xef\xbd\x9c", "'tool_calls>"}, NULL,
     {XML_CALL("<\xef\xbd\x9c" "DSML\xef\xbd\x9c" "tool_calls>",
               "</\xef\xbd\x9c" "DSML\xef\xbd\x9c" "tool_calls>", HR__TS_KEY_ATTRS,
               "<\xef\xbd\x9c" "DSML\xef\xbd\x9c" "invoke name=\"", "\">",
               "<\xef\xbd\x9c" "DSML\xef\xbd\x9c" "parameter name=\"", "\"", "",
               "</\xef\xbd\x9c" "DSML\xef\xbd\x9c" "parameter>",
               "</\xef\xbd\x9c" "DSML\xef\xbd\x9c" "invoke>")}, 1},
    /* Hunyuan 3: GLM-style keys and values with :opensource markers */
    {"hunyuan3", {"HYTK", "<tool_sep{}>"}, NULL,
     {XML_CALL("<tool_calls:opensource>", "</tool_calls:opensource>", 0,
               "<tool_call:opensource>", "<tool_sep:opensource>", "<arg_key:opensource>",
               "</arg_key:opensource>", "<arg_value:opensource>", "</arg_value:opensource>",
               "</tool_call:opensource>")}, 1},
    /* GLM 4.6 / 4.7, Laguna: <tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value></tool_call> */
    {"glm", {"<arg_key>", "<tool_call>"}, NULL,
     {XML_CALL("<tool_call>", "</tool_call>", 0, "", "", "<arg_key>", "</arg_key>", "<arg_value>",
               "</arg_value>", "")}, 1},
    /* Qwen3-Coder, Qwen3.5, Nemotron 3, Step 3.5: <tool_call><function=f><parameter=k>v... */
    {"qwen3_coder", {"<tool_call>", "<function=", "<parameter="}, NULL,
     {QWEN_XML("<tool_call>", "</tool_call>")}, 1},
    /* MiniCPM 5: <function name="f"><param name="k">v</param></function> */
    {"minicpm5", {"<function name=", "<param name="}, NULL,
     {XML_CALL("<function name=\"", "</function>", 0, "", "\">", "<param name=\"", "\">", "",
               "</param>", "")}, 1},
    /* Muse Glimmer: <atem:function_calls><atem:invoke name="f"><atem:parameter name="k">v... */
    {"atem", {"<atem:function_calls>"}, NULL,
     {XML_CALL("<atem:function_calls>", "</atem:function_calls>", 0, "<atem:invoke name=\"",
               "\">", "<atem:parameter name=\"", "\">", "", "</atem:parameter>",
               "</atem:invoke>")}, 1},
    /* Kimi K2: section of <|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{...} */
    {"kimi_k2", {"<|tool_calls_section_begin|>"}, NULL,
     {NAMED_CALL("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                 HR__TS_KIMI_NAME, "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                 "<|tool_call_end|>", NULL, NULL, "<|tool_calls_section_begin|><|tool_call_begin|>functions.",
                 ":0<|tool_call_argument_begin|>", "<|tool_call_end|><|tool_calls_section_end|>")}, 1},
    /* DeepSeek R1: <｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```<｜tool▁call▁end｜> */
    {"deepseek_r1", {"tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin", "```json"}, NULL,
     {NAMED_CALL("<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>",
                 "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>", 0,
                 "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>", "```json",
                 "```<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>",
                 "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>", NULL,
                 "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
                 "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>function"
                 "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>",
                 "\n```json\n",
                 "\n```<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
                 "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>")}, 1},
    /* DeepSeek V3.1: <｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜> */
    {"deepseek_v31", {"tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin"}, NULL,
     {NAMED_CALL("<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>",
                 "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>", 0,
                 "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>",
                 "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>",
                 "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>", NULL, NULL,
                 "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
                 "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>",
                 "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>",
                 "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
                 "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>")}, 1},
    /* Mistral (v11+ tokenizers): [TOOL_CALLS]f[ARGS]{...}, optionally [CALL_ID]id before [ARGS] */
    {"mistral_args", {"[TOOL_CALLS]", "[ARGS]"}, NULL,
     {NAMED_CALL("[TOOL_CALLS]", "", 0, "", "[ARGS]", "", NULL, "[CALL_ID]", "[TOOL_CALLS]",
                 "[ARGS]", "")}, 1},
    /* Mistral (Nemo and older): [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...] */
    {"mistral", {"[TOOL_CALLS]"}, NULL,
     {JSON_CALL("[TOOL_CALLS]", "", HR__TS_ARRAY, "name", "arguments", "parameters", "[TOOL_CALLS]", "")}, 1},
    /* Command R7B, Command A: <|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {...}}]<|END_ACTION|> */
    {"command_r7b", {"<|START_ACTION|>"}, NULL,
     {JSON_CALL("<|START_ACTION|>", "<|END_ACTION|>", HR__TS_ARRAY, "tool_name", "parameters",
                NULL, "<|START_ACTION|>", "<|END_ACTION|>")}, 1},
    /* Apertus: <|tools_prefix|>[{"f": {...}}]<|tools_suffix|> */
    {"apertus", {"<|tools_prefix|>"}, NULL,
     {JSON_CALL("<|tools_prefix|>", "<|tools_suffix|>", HR__TS_ARRAY | HR__TS_NAME_AS_KEY, NULL,
                NULL, NULL, "<|tools_prefix|>", "<|tools_suffix|>")}, 1},
    /* Solar Open: <|tool_call:begin|>id<|tool_call:name|>f<|tool_call:args|>{...}<|tool_call:end|> */
    {"solar", {"<|tool_call:begin|>"}, NULL,
     {NAMED_CALL("<|tool_call:begin|>", "<|tool_call:end|>", 0, "", "<|tool_call:args|>", "",
                 "<|tool_call:name|>", NULL, "<|tool_call:begin|>0<|tool_call:name|>",
                 "<|tool_call:args|>", "<|tool_call:end|>")}, 1},
    /* Nemotron Nano v2: <TOOLCALL>[{...}]</TOOLCALL> */
    {"nemotron_v2", {"<TOOLCALL>"}, NULL,
     {JSON_CALL("<TOOLCALL>", "</TOOLCALL>", HR__TS_ARRAY, "name", "arguments", "parameters", "<TOOLCALL>",
                "</TOOLCALL>")}, 1},
    /* Apriel, MiniMax-M1: <tool_calls>[{...}, ...]</tool_calls> (or one object a line) */
    {"tool_calls_json", {"<tool_calls>"}, NULL,
     {JSON_CALL("<tool_calls>", "</tool_calls>", HR__TS_ARRAY, "name", "arguments", "parameters", "<tool_calls>",
                "</tool_calls>")}, 1},
    /* Granite 3.x: <|tool_call|>[{...}] */
    {"granite", {"<|tool_call|>"}, NULL,
     {JSON_CALL("<|tool_call|>", "", HR__TS_ARRAY, "name", "arguments", "parameters", "<|tool_call|>", "")}, 1},
    /* GigaChat 3.1: <|function_call|>{"name": "f", "arguments": {...}} */
    {"gigachat", {"<|function_call|>"}, NULL,
     {JSON_CALL("<|function_call|>", "", 0, "name", "arguments", "parameters", "<|function_call|>", "")}, 1},
    /* Functionary v3.1: <function=f>{...}</function> */
    {"functionary_v31", {"<function=", "</function>"}, NULL,
     {NAMED_CALL("<function=", "</function>", 0, "", ">", "", NULL, NULL, "<function=", ">",
                 "</function>")}, 1},
    /* FireFunction v2: functools[{...}, ...] */
    {"firefunction", {"functools["}, NULL,
     {JSON_CALL("functools", "", HR__TS_ARRAY, "name", "arguments", "parameters", " functools", "")}, 1},
    /* Qwen 2.5 / 3, QwQ, Hermes 2 Pro / 3, Granite 4, MiMo, Bielik, Reka, SmolLM3 (xml_tools):
     * <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call> */
    {"hermes", {"<tool_call>"}, "]<]minimax[>[",
     {JSON_CALL("<tool_call>", "</tool_call>", 0, "name", "arguments", "parameters", "<tool_call>\n",
                "\n</tool_call>")}, 1},
    /* Llama 3.1 / 3.2 / 3.3: the reply is {"name": "f", "parameters": {...}};
     * or <|python_tag|>{...} */
    {"llama3", {"{\"name\": function name, \"parameters\""}, NULL,
     {JSON_CALL(NULL, "", 0, "name", "parameters", "arguments", "", ""),
      JSON_CALL("<|python_tag|>", "", 0, "name", "parameters", "arguments", NULL, NULL)}, 2},
};

#define N_FORMATS (sizeof formats / sizeof formats[0])

size_t hr_tool_format_count(void) { return N_FORMATS; }

const hr_tool_format *hr_tool_format_at(size_t i) { return i < N_FORMATS ? &formats[i] : NULL; }

const char *hr_tool_format_name(const hr_tool_format *f) { return f ? f->name : NULL; }

const hr_tool_format *hr_tool_format_by_name(const char *name) {
    for (size_t i = 0; name && i < N_FORMATS; i++)
        if (!strcmp(formats[i].name, name))
            return &formats[i];
    return NULL;
}

const hr_tool_format *hr_tool_format_detect(const char *src) {
    for (size_t i = 0; src && i < N_FORMATS; i++) {
        const hr_tool_format *f = &formats[i];
        int ok = !(f->reject && strstr(src, f->reject));
        for (int k = 0; ok && k < HR__TOOL_MAX_DETECT && f->detect[k]; k++)
            ok = strstr(src, f->detect[k]) != NULL;
        if (ok)
            return f;
    }
    return NULL;
}

/* ---- the shape of a call, for grammars ------------------------------------------- */

/* A tool's parameters placed at JSON pointer `base` inside a bigger schema:
 * its local references ("#", "#/$defs/X", "#/definitions/X", and "ID#/..."
 * where ID is its own $id), written against its own root as Pydantic
 * writes them, are rewritten to point under base. Values that are data
 * (const, enum, default, examples) are copied as they are. Remote
 * references stay, for the schema compiler to refuse. New reference. */
static json_t *rebase(const json_t *s, const char *base, const char *id, size_t idlen,
                      int depth) {
    if (depth > 4096)
        return NULL;
    if (json_is_array(s)) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < json_array_size(s); i++)
            if (json_array_append_new(a, rebase(json_array_get(s, i), base, id, idlen,
                                                depth + 1)))
                return json_decref(a), NULL;
        return a;
    }
    if (!json_is_object(s))
        return json_incref((json_t *)s);
    json_t *o = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        json_t *nv = NULL;
        const char *ref = json_string_value(v);
        if (!strcmp(k, "$ref") && ref) {
            const char *frag = ref[0] == '#' ? ref + 1
                               : id && !strncmp(ref, id, idlen) && (ref[idlen] == '#' || !ref[idlen])
                                   ? ref + idlen + (ref[idlen] == '#')
                                   : NULL;
            if (frag && (!frag[0] || frag[0] == '/')) {
                size_t nb = strlen(base), nf = strlen(frag);
                char *r = malloc(nb + nf + 2);
                if (r) {
                    r[0] = '#';
                    memcpy(r + 1, base, nb);
                    memcpy(r + 1 + nb, frag, nf + 1);
                    nv = json_string(r);
                    free(r);
                }
            } else {
                nv = json_incref(v);
            }
        } else if (!strcmp(k, "const") || !strcmp(k, "enum") || !strcmp(k, "default") ||
                   !strcmp(k, "examples")) {
            nv = json_incref(v);
        } else {
            nv = rebase(v, base, id, idlen, depth + 1);
        }
        if (!o || json_object_set_new(o, k, nv))
            return json_decref(o), NULL;
    }
    return o;
}

/* The parameters of fn as the schema at pointer base ("" for the root). */
static json_t *params_of(json_t *fn, const char *base) {
    json_t *p = json_object_get(fn, "parameters");
    if (!json_is_object(p))
        return json_pack("{s:s}", "type", "object");
    if (!base[0])
        return json_incref(p);
    const char *id = json_string_value(json_object_get(p, "$id"));
    return rebase(p, base, id, id ? strcspn(id, "#") : 0, 0);
}

/* JSON pointer of the arguments inside a JSON call object: where (the
 * object's own pointer) + "/properties/" + key, the key escaped ("~0",
 * "~1", and "%25" as the resolver decodes %XX). NULL when out of memory. */
static char *args_pointer(const char *where, const char *key) {
    size_t nw = strlen(where), nk = strlen(key);
    char *p = malloc(nw + sizeof "/properties/" + 3 * nk);
    if (!p)
        return NULL;
    char *o = p + sprintf(p, "%s/properties/", where);
    for (const char *c = key; *c; c++) {
        if (*c == '~' || *c == '/')
            *o++ = '~', *o++ = *c == '~' ? '0' : '1';
        else if (*c == '%')
            memcpy(o, "%25", 3), o += 3;
        else
            *o++ = *c;
    }
    *o = 0;
    return p;
}

/* {"type": "object", "properties": {name_key: {"const": f}, args_key: params},
 *  "required": [...], "additionalProperties": false} (or {f: params});
 * where: the pointer this object will have in the alternative's schema. */
static json_t *call_object(const hr__tool_syntax *s, const char *name, json_t *fn,
                           const char *where) {
    const char *key = s->flags & HR__TS_NAME_AS_KEY ? name : s->args_keys[0];
    char *at = args_pointer(where, key);
    json_t *params = at ? params_of(fn, at) : NULL;
    free(at);
    if (!params)
        return NULL;
    json_t *props = json_object(), *req = json_array();
    if (s->flags & HR__TS_NAME_AS_KEY) {
        json_object_set_new(props, name, params);
        json_array_append_new(req, json_string(name));
    } else {
        json_object_set_new(props, s->name_key, json_pack("{s:s}", "const", name));
        json_object_set_new(props, s->args_keys[0], params);
        json_array_append_new(req, json_string(s->name_key));
        json_array_append_new(req, json_string(s->args_keys[0]));
    }
    return json_pack("{s:s, s:o, s:o, s:b}", "type", "object", "properties", props, "required",
                     req, "additionalProperties", 0);
}

int hr_tool_format_call_schema(const hr_tool_format *f, const json_t *tools,
                               const char *only_name, char **out, hr_error *err) {
    *out = NULL;
    if (!f)
        return hr_err(err, HR_EINVAL, "tool call schema: no tool-call format");
    const hr__tool_syntax *s = &f->syn[0];
    if (s->kind == HR__TOOL_XML || (s->flags & HR__TS_GEMMA))
        return hr_err(err, HR_EUNSUPPORTED,
                      "tool call schema: the %s format's arguments are not JSON", f->name);
    if (!json_is_array(tools) || json_array_size(tools) == 0)
        return hr_err(err, HR_EINVAL, "tool call schema: tools must be a non-empty array");
    json_t *root = json_pack("{s:s, s:[]}", "format", f->name, "alternatives");
    json_t *alts = json_object_get(root, "alternatives"), *any = json_array();
    size_t i;
    json_t *t;
    int rc = 0, matched = 0;
    /* JSON formats: the calls' pointers depend on how many there are */
    size_t n_calls = 0;
    json_array_foreach(tools, i, t) {
        const char *name = json_string_value(json_object_get(json_object_get(t, "function"),
                                                             "name"));
        n_calls += name && (!only_name || !strcmp(name, only_name));
    }
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name) {
            rc = hr_err(err, HR_EINVAL, "tool call schema: tools[%zu] has no function name", i);
            goto done;
        }
        if (only_name && strcmp(name, only_name))
            continue;
        matched++;
        if (s->kind == HR__TOOL_JSON) {
            char where[48];
            snprintf(where, sizeof where, "%s%s", s->flags & HR__TS_ARRAY ? "/items" : "",
                     n_calls > 1 ? "/anyOf/" : "");
            if (n_calls > 1)
                snprintf(where + strlen(where), sizeof where - strlen(where), "%zu",
                         json_array_size(any));
            json_t *call = call_object(s, name, fn, where);
            if (!call || json_array_append_new(any, call)) {
                rc = hr_err(err, HR_ENOMEM, "tool call schema: out of memory");
                goto done;
            }
            continue;
        }
        size_t np = strlen(s->schema_prefix), nn = strlen(name), nm = strlen(s->schema_mid);
        char *pre = malloc(np + nn + nm + 1);
        if (!pre) {
            rc = hr_err(err, HR_ENOMEM, "tool call schema: out of memory");
            goto done;
        }
        memcpy(pre, s->schema_prefix, np);
        memcpy(pre + np, name, nn);
        memcpy(pre + np + nn, s->schema_mid, nm + 1);
        json_array_append_new(alts, json_pack("{s:s, s:s, s:o, s:s}", "name", name, "prefix", pre,
                                              "schema", params_of(fn, ""), "suffix",
                                              s->schema_suffix));
        free(pre);
    }
    if (!matched) {
        rc = only_name ? hr_err(err, HR_EINVAL, "tool call schema: no tool named '%s'", only_name)
                       : hr_err(err, HR_EINVAL, "tool call schema: no tools");
        goto done;
    }
    if (s->kind == HR__TOOL_JSON) {
        json_t *one = json_array_size(any) == 1 ? json_incref(json_array_get(any, 0))
                                                : json_pack("{s:O}", "anyOf", any);
        if (s->flags & HR__TS_ARRAY)
            one = json_pack("{s:s, s:o, s:i}", "type", "array", "items", one, "minItems", 1);
        json_array_append_new(alts, json_pack("{s:n, s:s, s:o, s:s}", "name", "prefix",
                                              s->schema_prefix, "schema", one, "suffix",
                                              s->schema_suffix));
    }
    *out = json_dumps(root, JSON_PRESERVE_ORDER);
    if (!*out)
        rc = hr_err(err, HR_ENOMEM, "tool call schema: out of memory");
done:
    json_decref(any);
    json_decref(root);
    return rc;
}
