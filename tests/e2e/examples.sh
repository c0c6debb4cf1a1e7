#!/usr/bin/env bash
# examples/ against the demo model: the C chat program's greedy answer and
# the Python binding's test (examples/python/test_hearth.py).
set -euo pipefail
root=${HEARTH_ROOT:?}; chat=${HEARTH_EXAMPLE_CHAT:?}; lib=${HEARTH_LIB:?}
model=$root/models/hearth-demo
pass=0; fail=0
ok()  { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }

want=$(python3 -c "
import json
g = json.load(open('$root/tests/fixtures/demo/golden.json'))
p = next(p for p in g['prompts'] if p['name'] == 'chat-abate')
print(p['main']['text'].split('<|im_end|>')[0])")
got=$(printf 'What does abate mean?\n' | "$chat" "$model" 32 | head -n 1)
[ "$got" = "$want" ] && ok || bad "chat example: '$got' != '$want'"
printf 'What does abate mean?\nWho are you?\n' | "$chat" "$model" 8 >/dev/null && ok || bad "two turns"
"$chat" /nonexistent </dev/null 2>/dev/null && bad "a missing model succeeded" || ok

if [ "${HEARTH_SANITIZED:-0}" = 1 ]; then
    echo "skip: the python binding test (python3 cannot load a sanitized libhearth.so)"
else
    HEARTH_LIB=$lib HEARTH_MODEL=$model python3 "$root/examples/python/test_hearth.py" -q && ok ||
        bad "python binding test"
    # the binding's structs are the header's, byte for byte: a struct shorter
    # than the library reads or writes corrupts memory silently
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    printf '#include "hearth.h"\n#include <stdio.h>\n#include <stddef.h>\nint main(void) { printf("%%zu %%zu %%zu %%zu %%zu %%zu %%zu\\n", sizeof(hr_llm_opts), sizeof(hr_session_opts), sizeof(hr_gen_params), sizeof(hr_gen_event), sizeof(hr_error), sizeof(hr_embed_input), sizeof(hr_embed_opts)); return 0; }\n' >"$tmp/sizes.c"
    cc -I"$root/include" -o "$tmp/sizes" "$tmp/sizes.c" && c_sizes=$("$tmp/sizes") || c_sizes="no compiler"
    py_sizes=$(PYTHONPATH=$root/examples/python HEARTH_LIB=$lib python3 -c "import ctypes as C, hearth as h
print(*(C.sizeof(t) for t in (h._LlmOpts, h._SessionOpts, h._Params, h._Event, h._Error, h._EmbedInput, h._EmbedOpts)))")
    [ "$c_sizes" = "$py_sizes" ] && ok || bad "binding struct sizes (llm_opts session_opts gen_params gen_event error embed_input embed_opts): C $c_sizes, Python $py_sizes"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
