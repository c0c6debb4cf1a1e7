#!/usr/bin/env bash
# make run: serve the default model (the bundled demo model, or $HEARTH_MODEL)
# on 127.0.0.1:8080, as `hearth serve` with no --model does.
set -euo pipefail
bin=$1
root=$(cd "$(dirname "$0")/.." && pwd)
model=${HEARTH_MODEL:-$root/models/hearth-demo}
if [ ! -f "$model/config.json" ]; then
    echo "hearth: the default model is missing at $model (set HEARTH_MODEL to a model directory)" >&2
    exit 1
fi
exec "$bin" serve --model "$model" "${@:2}"
