"""A small ctypes binding of libhearth (include/hearth.h, docs/api.md).

    import hearth
    m = hearth.Model("models/hearth-demo")
    s = hearth.Session(m, max_batch=2)
    for ev in s.generate(messages=[{"role": "user", "content": "Hi"}], temperature=0):
        print(ev.text, end="")

The library is $HEARTH_LIB, else libhearth.so on the loader's path."""
import ctypes as C
import json
import os

_lib = C.CDLL(os.environ.get("HEARTH_LIB") or "libhearth.so")

RUNNING, STOP, LENGTH, CANCELLED, ERROR = range(5)
FINISH = {STOP: "stop", LENGTH: "length", CANCELLED: "cancelled", ERROR: "error"}


class HearthError(Exception):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


class _Error(C.Structure):
    _fields_ = [("code", C.c_int), ("pos", C.c_long), ("msg", C.c_char * 512)]


class _LlmOpts(C.Structure):
    _fields_ = [("n_threads", C.c_int), ("chat_template", C.c_char_p), ("device", C.c_char_p),
                ("quant_act", C.c_char_p), ("isa", C.c_char_p)]


class _SessionOpts(C.Structure):
    _fields_ = [("n_threads", C.c_int), ("max_batch", C.c_int), ("n_ctx", C.c_int),
                ("kv_bytes", C.c_size_t), ("kv_dtype", C.c_int), ("prefill_chunk", C.c_int),
                ("prompt_cache", C.c_int), ("prompt_cache_size", C.c_int),
                ("prompt_cache_bytes", C.c_size_t), ("ssd_dir", C.c_char_p),
                ("ssd_max_bytes", C.c_size_t), ("ssd_demote_idle", C.c_double),
                ("kv_bits", C.c_int), ("kv_group", C.c_int),
                ("draft_model", C.c_char_p), ("spec", C.c_char_p),
                ("num_draft_tokens", C.c_int), ("adapter_path", C.c_char_p),
                ("adapters", C.c_char_p), ("kv_dtype_v", C.c_int),
                ("kv_quant", C.c_char_p), ("quantized_kv_start", C.c_int),
                ("kv_residual", C.c_int), ("warmup", C.c_int)]


class _Params(C.Structure):  # hr_gen_params, field for field
    _fields_ = [("prompt_tokens", C.POINTER(C.c_int32)), ("n_prompt_tokens", C.c_int),
                ("prompt_text", C.c_char_p), ("messages_json", C.c_char_p),
                ("tools_json", C.c_char_p), ("template_kwargs_json", C.c_char_p),
                ("max_tokens", C.c_int), ("temperature", C.c_float), ("top_p", C.c_float),
                ("min_p", C.c_float), ("top_k", C.c_int), ("repetition_penalty", C.c_float),
                ("repetition_context_size", C.c_int), ("presence_penalty", C.c_float),
                ("presence_context_size", C.c_int), ("frequency_penalty", C.c_float),
                ("frequency_context_size", C.c_int), ("xtc_probability", C.c_float),
                ("xtc_threshold", C.c_float), ("logit_bias_ids", C.POINTER(C.c_int32)),
                ("logit_bias_values", C.POINTER(C.c_float)), ("n_logit_bias", C.c_int),
                ("has_seed", C.c_int), ("seed", C.c_uint64), ("ignore_eos", C.c_int),
                ("stop", C.POINTER(C.c_char_p)), ("n_stop", C.c_int),
                ("top_logprobs", C.c_int), ("json_schema", C.c_char_p),
                ("json_object", C.c_int), ("regex", C.c_char_p), ("grammar", C.c_char_p),
                ("choices", C.POINTER(C.c_char_p)), ("n_choices", C.c_int),
                ("score_from", C.c_int), ("tool_choice", C.c_char_p),
                ("spec", C.c_char_p), ("num_draft_tokens", C.c_int),
                ("adapter", C.c_char_p), ("images", C.c_void_p), ("n_images", C.c_int),
                ("audio", C.c_void_p), ("n_audio", C.c_int)]


class _Image(C.Structure):  # hr_gen_image
    _fields_ = [("data", C.c_char_p), ("size", C.c_size_t)]


class _Event(C.Structure):
    _fields_ = [("text", C.c_void_p), ("text_len", C.c_size_t), ("token", C.c_int32),
                ("logprob", C.c_float), ("n_top", C.c_int),
                ("top_ids", C.POINTER(C.c_int32)), ("top_logprobs", C.POINTER(C.c_float)),
                ("finish", C.c_int), ("prompt_tokens", C.c_int),
                ("completion_tokens", C.c_int), ("cached_tokens", C.c_int),
                ("n_tool_events", C.c_int), ("tool_events", C.c_void_p),
                ("n_tool_calls", C.c_int),
                ("drafted_tokens", C.c_int), ("accepted_tokens", C.c_int)]


class _EmbedInput(C.Structure):  # hr_embed_input
    _fields_ = [("text", C.c_char_p), ("text_len", C.c_size_t),
                ("tokens", C.POINTER(C.c_int32)), ("n_tokens", C.c_int)]


class _EmbedOpts(C.Structure):  # hr_embed_opts
    _fields_ = [("prompt_name", C.c_char_p), ("prompt", C.c_char_p), ("dimensions", C.c_int)]


def _sig(name, res, *args):
    f = getattr(_lib, name)
    f.restype, f.argtypes = res, list(args)
    return f


_P, _E = C.c_void_p, C.POINTER(_Error)
_load = _sig("hr_llm_load", C.c_int, C.POINTER(_P), C.c_char_p, C.POINTER(_LlmOpts), _E)
_llm_free = _sig("hr_llm_free", None, _P)
_tokenize = _sig("hr_llm_tokenize", C.c_int, _P, C.c_char_p, C.c_size_t, C.c_uint,
                 C.POINTER(C.POINTER(C.c_int32)), C.POINTER(C.c_size_t), _E)
_detokenize = _sig("hr_llm_detokenize", C.c_int, _P, C.POINTER(C.c_int32), C.c_size_t,
                   C.c_uint, C.POINTER(C.c_void_p), C.POINTER(C.c_size_t), _E)
_render = _sig("hr_llm_chat_render", C.c_int, _P, C.c_char_p, C.c_char_p, C.c_char_p, C.c_int,
               C.POINTER(C.c_void_p), _E)
_free = _sig("hr_free", None, C.c_void_p)
_sess_new = _sig("hr_session_new", C.c_int, C.POINTER(_P), _P, C.POINTER(_SessionOpts), _E)
_sess_free = _sig("hr_session_free", None, _P)
_defaults = _sig("hr_gen_params_default", None, C.POINTER(_Params))
_submit = _sig("hr_gen_submit", C.c_int, C.POINTER(_P), _P, C.POINTER(_Params), _E)
_next = _sig("hr_gen_next", C.c_int, _P, C.POINTER(_Event), _E)
_cancel = _sig("hr_gen_cancel", None, _P)
_gen_free = _sig("hr_gen_free", None, _P)
_embed_dim = _sig("hr_llm_embed_dim", C.c_int, _P)
_embed = _sig("hr_embed", C.c_int, _P, C.POINTER(_EmbedInput), C.c_int, C.POINTER(_EmbedOpts),
              C.POINTER(C.c_float), C.POINTER(C.c_long), _E)


def _check(rc, err):
    if rc < 0:
        raise HearthError(rc, err.msg.decode("utf-8", "replace"))
    return rc


def _take_text(p, n=None):
    try:
        return C.string_at(p, n).decode("utf-8") if n is not None else C.string_at(p).decode()
    finally:
        _free(p)


class Model:
    def __init__(self, path, n_threads=0, chat_template=None):
        self._h, err = _P(), _Error()
        opts = _LlmOpts(n_threads, chat_template.encode() if chat_template else None)
        _check(_load(C.byref(self._h), path.encode(), C.byref(opts), C.byref(err)), err)

    def close(self):
        if self._h:
            _llm_free(self._h)
            self._h = None

    __del__ = close

    def tokenize(self, text, add_special=False):
        b = text.encode()
        ids, n, err = C.POINTER(C.c_int32)(), C.c_size_t(), _Error()
        _check(_tokenize(self._h, b, len(b), int(add_special), C.byref(ids), C.byref(n),
                         C.byref(err)), err)
        try:
            return ids[:n.value]
        finally:
            _free(ids)

    def detokenize(self, ids, skip_special=False):
        arr, out, n, err = (C.c_int32 * len(ids))(*ids), C.c_void_p(), C.c_size_t(), _Error()
        _check(_detokenize(self._h, arr, len(ids), int(skip_special), C.byref(out), C.byref(n),
                           C.byref(err)), err)
        return _take_text(out, n.value)

    def chat(self, messages, tools=None, add_generation_prompt=True):
        out, err = C.c_void_p(), _Error()
        _check(_render(self._h, json.dumps(messages).encode(),
                       json.dumps(tools).encode() if tools else None, None,
                       int(add_generation_prompt), C.byref(out), C.byref(err)), err)
        return _take_text(out)


class Event:
    def __init__(self, ev):
        self.text = C.string_at(ev.text, ev.text_len).decode("utf-8", "replace") if ev.text_len else ""
        self.token = ev.token
        self.logprob = ev.logprob
        self.top = [(ev.top_ids[i], ev.top_logprobs[i]) for i in range(ev.n_top)]
        self.finish = FINISH.get(ev.finish)
        self.usage = None if ev.finish == RUNNING else {
            "prompt_tokens": ev.prompt_tokens, "completion_tokens": ev.completion_tokens,
            "cached_tokens": ev.cached_tokens, "drafted_tokens": ev.drafted_tokens,
            "accepted_tokens": ev.accepted_tokens}


class Session:
    def __init__(self, model, **opts):
        self.model, self._h, err = model, _P(), _Error()
        o = _SessionOpts(**{k: (v.encode() if isinstance(v, str) else v) for k, v in opts.items()})
        _check(_sess_new(C.byref(self._h), model._h, C.byref(o), C.byref(err)), err)

    def close(self):
        if self._h:
            _sess_free(self._h)
            self._h = None

    __del__ = close

    def generate(self, prompt=None, messages=None, tokens=None, stop=(), seed=None, images=(),
                 audio=(), **fields):
        """Yields an Event per token, then the last one (finish and usage).
        images: encoded files (bytes), one per image part of messages, in order.
        audio: WAV files (bytes), one per input_audio part of messages, in order.
        fields: any hr_gen_params field (max_tokens, temperature, json_schema, ...)."""
        p, err, g = _Params(), _Error(), _P()
        _defaults(C.byref(p))
        keep = []  # buffers that must outlive the submit
        if tokens is not None:
            arr = (C.c_int32 * len(tokens))(*tokens)
            keep.append(arr)
            p.prompt_tokens, p.n_prompt_tokens = arr, len(tokens)
        p.prompt_text = prompt.encode() if prompt is not None else None
        p.messages_json = json.dumps(messages).encode() if messages is not None else None
        if stop:
            arr = (C.c_char_p * len(stop))(*[x.encode() for x in stop])
            keep.append(arr)
            p.stop, p.n_stop = arr, len(stop)
        if seed is not None:
            p.has_seed, p.seed = 1, seed
        if images:
            arr = (_Image * len(images))(*[_Image(b, len(b)) for b in images])
            keep.append(arr)
            p.images, p.n_images = C.cast(arr, C.c_void_p), len(images)
        if audio:
            arr = (_Image * len(audio))(*[_Image(b, len(b)) for b in audio])
            keep.append(arr)
            p.audio, p.n_audio = C.cast(arr, C.c_void_p), len(audio)
        for k, v in fields.items():
            setattr(p, k, json.dumps(v).encode() if k == "json_schema" and not isinstance(v, str)
                    else v.encode() if isinstance(v, str) else v)
        _check(_submit(C.byref(g), self._h, C.byref(p), C.byref(err)), err)
        try:
            ev = _Event()
            while _check(_next(g, C.byref(ev), C.byref(err)), err) == 1:
                yield Event(ev)
        finally:
            _gen_free(g)

    def embed(self, inputs, prompt_name=None, prompt=None, dimensions=0):
        """A vector per input (a str, or a list of token ids), batched through the engine."""
        n, keep = len(inputs), []
        arr = (_EmbedInput * n)()
        for i, x in enumerate(inputs):
            if isinstance(x, str):
                b = x.encode()
                keep.append(b)
                arr[i].text, arr[i].text_len = b, len(b)
            else:
                t = (C.c_int32 * len(x))(*x)
                keep.append(t)
                arr[i].tokens, arr[i].n_tokens = t, len(x)
        o = _EmbedOpts(prompt_name.encode() if prompt_name is not None else None,
                       prompt.encode() if prompt is not None else None, dimensions)
        dims = dimensions or _embed_dim(self.model._h)
        out, ntok, err = (C.c_float * (n * dims))(), C.c_long(), _Error()
        _check(_embed(self._h, arr, n, C.byref(o), out, C.byref(ntok), C.byref(err)), err)
        return [list(out[i * dims:(i + 1) * dims]) for i in range(n)]

    def complete(self, **kw):
        """The whole text and the last event."""
        text, last = [], None
        for ev in self.generate(**kw):
            text.append(ev.text)
            last = ev
        return "".join(text), last
