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
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
