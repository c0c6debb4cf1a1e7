#!/usr/bin/env bash
# make install's layout (cmake --install into a temporary prefix): the
# installed binary finds the demo model beside itself, pkg-config builds the
# chat example against the installed library, and it runs.
set -euo pipefail
root=${HEARTH_ROOT:?}; build=${HEARTH_BUILD:?}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok()  { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }

cmake --install "$build" --prefix "$tmp/p" >/dev/null
for f in bin/hearth lib/libhearth.so lib/libhearth.a include/hearth.h lib/pkgconfig/hearth.pc \
         share/hearth/models/hearth-demo/config.json; do
    [ -e "$tmp/p/$f" ] && ok || bad "$f not installed"
done
env -u HEARTH_MODEL "$tmp/p/bin/hearth" version | grep -x "default model: $tmp/p/bin/../share/hearth/models/hearth-demo" >/dev/null &&
    ok || bad "installed binary's default model: $(env -u HEARTH_MODEL "$tmp/p/bin/hearth" version)"
if [ "${HEARTH_SANITIZED:-0}" = 1 ]; then # a plain cc cannot link a sanitized library
    echo "skip: building examples/chat.c against the installed (sanitized) library"
    echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit
fi
export PKG_CONFIG_PATH=$tmp/p/lib/pkgconfig
cc -std=c11 -Wall -Wextra -Werror "$root/examples/chat.c" $(pkg-config --cflags --libs hearth) \
   -Wl,-rpath,"$tmp/p/lib" -o "$tmp/chat" && ok || bad "pkg-config build of examples/chat.c"
out=$(echo "Who are you?" | "$tmp/chat" "$tmp/p/share/hearth/models/hearth-demo" 4)
[ -n "$out" ] && ok || bad "installed chat example printed nothing"
ldd "$tmp/chat" | grep "$tmp/p/lib/libhearth.so" >/dev/null && ok || bad "chat example not linked to the installed library"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
