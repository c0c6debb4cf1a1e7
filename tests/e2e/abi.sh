#!/usr/bin/env bash
# libhearth.so's ABI: nm -D shows only hr_ symbols, exactly the functions
# include/hearth.h declares (outside its HEARTH_INTERNAL part) and the
# version script lists; the header compiles alone as C11 with -pedantic.
set -euo pipefail
lib=${HEARTH_LIB:?}; root=${HEARTH_ROOT:?}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok()  { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }

nm -D --defined-only "$lib" | awk '$2 != "A" {print $3}' | sed 's/@.*//' | sort -u >"$tmp/exported"
sed '/#ifdef HEARTH_INTERNAL/,$d' "$root/include/hearth.h" |
    grep -oE '\bhr_[a-z_]+\(' | tr -d '(' | sort -u >"$tmp/declared"
grep -oE '^\s+hr_[a-z_]+;' "$root/src/api/hearth.map" | tr -d ' ;' | sort -u >"$tmp/mapped"

others=$(grep -v '^hr_' "$tmp/exported" || true)
[ -z "$others" ] && ok || bad "exported symbols without the hr_ prefix: $others"
diff "$tmp/declared" "$tmp/exported" >"$tmp/d1" && ok || bad "header vs nm -D: $(cat "$tmp/d1")"
diff "$tmp/declared" "$tmp/mapped" >"$tmp/d2" && ok || bad "header vs version script: $(cat "$tmp/d2")"
[ "$(wc -l <"$tmp/exported")" -ge 20 ] && ok || bad "only $(wc -l <"$tmp/exported") symbols exported"

# the public header stands alone: C11, pedantic, no internal headers
printf '#include <hearth.h>\nint main(void) { hr_gen_params p; hr_gen_params_default(&p); return p.max_tokens != -1; }\n' >"$tmp/t.c"
if [ "${HEARTH_SANITIZED:-0}" = 1 ]; then # a plain cc cannot link a sanitized library
    cc -std=c11 -Wall -Wextra -Werror -pedantic -I"$root/include" -c "$tmp/t.c" -o "$tmp/t.o" &&
        ok || bad "header does not compile alone"
else
    cc -std=c11 -Wall -Wextra -Werror -pedantic -I"$root/include" "$tmp/t.c" "$lib" \
       -Wl,-rpath,"$(dirname "$lib")" -o "$tmp/t" && "$tmp/t" && ok || bad "header does not compile alone"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
