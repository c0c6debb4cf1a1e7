#!/usr/bin/env bash
# hearth train (docs/training.md) on the tiny chat model: the validation
# loss drops, the adapter loads in `hearth serve --adapter-path` and changes
# the served logits, runs are deterministic across thread counts,
# --resume-adapter-file starts from the file's weights, -c config files
# (YAML and JSON), the three data formats, and one-line errors naming
# FILE:LINE for bad data; DPO and ORPO on preference pairs.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
log=$(mktemp); tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$log" "$tmp"' EXIT
tiny_chat_model "$tmp/m"
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "FAIL $*"; }

mkdir -p "$tmp/d" "$tmp/chat" "$tmp/text" "$tmp/pref"
python3 - "$tmp" <<'EOF'
import json, sys
t = sys.argv[1]
colors = ["red", "blue", "green", "yellow", "purple", "orange", "black", "white"]
def ex(i):
    return {"prompt": f"What is the secret word number {i}?",
            "completion": f"The secret word is {colors[i % 8]} banana."}
def write(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
write(f"{t}/d/train.jsonl", [ex(i) for i in range(16)])
write(f"{t}/d/valid.jsonl", [ex(i) for i in range(16, 24)])
chat = lambda e: {"messages": [{"role": "user", "content": e["prompt"]},
                               {"role": "assistant", "content": e["completion"]}]}
write(f"{t}/chat/train.jsonl", [chat(ex(i)) for i in range(8)])
write(f"{t}/chat/valid.jsonl", [chat(ex(i)) for i in range(8, 12)])
write(f"{t}/text/train.jsonl", [{"text": ex(i)["completion"]} for i in range(8)])
write(f"{t}/text/valid.jsonl", [{"text": ex(i)["completion"]} for i in range(8, 12)])
pref = lambda i: {"prompt": ex(i)["prompt"], "chosen": ex(i)["completion"],
                  "rejected": f"I will not tell you the word {i}."}
write(f"{t}/pref/train.jsonl", [pref(i) for i in range(16)])
write(f"{t}/pref/valid.jsonl", [dict(pref(i), system="Be brief.") for i in range(16, 24)])
EOF

train() { "$bin" train --model "$tmp/m" --lora-rank 4 --num-layers -1 --steps-per-report 5 "$@"; }

# ---- loss drops; the adapter serves
train --data "$tmp/d" --out "$tmp/ad" --iters 24 --batch-size 4 --learning-rate 1e-2 \
    --steps-per-eval 12 --save-every 12 --mask-prompt --threads 2 >"$tmp/out.txt"
python3 - "$tmp/out.txt" <<'EOF' && ok || bad "validation loss did not drop by 1.5: $(grep Val "$tmp/out.txt")"
import re, sys
v = [float(x) for x in re.findall(r"Val loss ([0-9.]+)", open(sys.argv[1]).read())]
assert len(v) == 3 and v[-1] < v[0] - 1.5, v
EOF
[ -f "$tmp/ad/adapters.safetensors" ] && [ -f "$tmp/ad/0000012_adapters.safetensors" ] \
    && grep -q '"fine_tune_type": "lora"' "$tmp/ad/adapter_config.json" && ok || bad "adapter files"

start_server "$log" --model "$tmp/m" --threads 2 --adapter-path "$tmp/ad"
port=$SERVER_PORT
post() {
    curl -s "http://127.0.0.1:$port/v1/completions" \
        -d "{\"prompt\": \"What is the secret word number 3?\", \"max_tokens\": 6, \"temperature\": 0, \"logprobs\": true $1}" |
        python3 -c '
import json, sys
lp = json.load(sys.stdin)["choices"][0]["logprobs"]["content"]
print(json.dumps([[e["id"] for e in lp], [round(e["logprob"], 4) for e in lp]]))'
}
trained=$(post "")
base=$(post ', "adapter": "base"')
[ -n "$trained" ] && [ "$trained" != "$base" ] && ok || bad "the trained adapter changes nothing: $trained"
curl -s "http://127.0.0.1:$port/v1/adapters" | grep -q '"format": *"mlx"' && ok || bad "adapter list"
stop_servers

# ---- deterministic: the same bits on 1 and 2 threads (and with checkpointing)
train --data "$tmp/d" --out "$tmp/a1" --iters 4 --learning-rate 1e-2 --threads 1 --seed 5 >/dev/null
train --data "$tmp/d" --out "$tmp/a2" --iters 4 --learning-rate 1e-2 --threads 2 --seed 5 \
    --grad-checkpoint >/dev/null
cmp -s "$tmp/a1/adapters.safetensors" "$tmp/a2/adapters.safetensors" && ok || bad "runs differ"
train --data "$tmp/d" --out "$tmp/a3" --iters 4 --learning-rate 1e-2 --threads 1 --seed 6 >/dev/null
cmp -s "$tmp/a1/adapters.safetensors" "$tmp/a3/adapters.safetensors" && bad "the seed changes nothing" || ok

# ---- resume without a training state (mlx-lm's semantics: a fresh optimizer):
# learning rate 0 keeps the file's weights exactly
cp "$tmp/ad/adapters.safetensors" "$tmp/plain_adapters.safetensors"
train --data "$tmp/d" --out "$tmp/r" --iters 1 --learning-rate 0 --threads 1 \
    --resume-adapter-file "$tmp/plain_adapters.safetensors" >/dev/null
cmp -s "$tmp/r/adapters.safetensors" "$tmp/ad/adapters.safetensors" && ok || bad "resume"

# ---- resume with the training state: the bits of an uninterrupted run, with a
# warmup + cosine schedule and gradient accumulation (the checkpoint at step 5
# falls inside an accumulation and the resumed run crosses a pass), SFT and DPO
cat >"$tmp/sched.yaml" <<EOF
lr_schedule:
  name: cosine_decay
  warmup: 2
  warmup_init: 1e-4
  arguments: [1e-2, 6, 1e-3]
EOF
for L in sft dpo; do
    data=$tmp/d; [ $L = dpo ] && data=$tmp/pref
    rt() { train --data "$data" --loss $L -c "$tmp/sched.yaml" --grad-accumulation-steps 2 \
        --batch-size 2 --iters 11 --steps-per-eval 100 --threads 2 "$@" >/dev/null; }
    rt --out "$tmp/full-$L" --save-every 5
    rt --out "$tmp/res-$L" --resume-adapter-file "$tmp/full-$L/0000005_adapters.safetensors"
    cmp -s "$tmp/full-$L/adapters.safetensors" "$tmp/res-$L/adapters.safetensors" \
        && cmp -s "$tmp/full-$L/optimizer_state.safetensors" "$tmp/res-$L/optimizer_state.safetensors" \
        && ok || bad "$L: the resumed run differs from the uninterrupted one"
done
grep -q '"grad_accumulation_steps": 2' "$tmp/full-sft/adapter_config.json" \
    && grep -q '"name": "cosine_decay"' "$tmp/full-sft/adapter_config.json" && ok \
    || bad "adapter_config.json: $(cat "$tmp/full-sft/adapter_config.json")"
out=$(train --data "$tmp/pref" --loss dpo --batch-size 4 --iters 1 --out "$tmp/x" \
    --resume-adapter-file "$tmp/full-dpo/0000005_adapters.safetensors" 2>&1) \
    && bad "a state of another batch count" || { echo "$out" | grep -q "not this run's" && ok || bad "$out"; }
out=$(train --data "$tmp/d" --out "$tmp/r2" --iters 1 --lora-rank 2 --threads 1 \
    --resume-adapter-file "$tmp/ad/adapters.safetensors" 2>&1) && bad "resume with another rank" \
    || { echo "$out" | grep -q "wrong shape" && ok || bad "resume error: $out"; }

# ---- Ctrl-C: the adapter is saved, one line says so
"$bin" train --model "$tmp/m" --lora-rank 4 --num-layers -1 --data "$tmp/d" --out "$tmp/int" \
    --iters 1000000 --steps-per-eval 1000000 --threads 1 >/dev/null 2>"$tmp/int.err" &
pid=$!
for _ in $(seq 100); do [ -f "$tmp/int/adapter_config.json" ] && break; sleep 0.1; done
sleep 0.5
kill -INT "$pid"
wait "$pid" && bad "interrupted run exited 0" || {
    grep -q "interrupted after step" "$tmp/int.err" && [ -f "$tmp/int/adapters.safetensors" ] \
        && ok || bad "interrupt: $(cat "$tmp/int.err")"; }

# ---- config files: YAML (mlx-lm's) and JSON; flags win
cat >"$tmp/c.yaml" <<EOF
# mlx-lm style
model: "$tmp/m"
data: $tmp/chat
iters: 2
batch_size: 2
learning_rate: 1e-3
num_layers: 2
lora_parameters:
  rank: 2
  scale: 10.0
  dropout: 0.0
  keys:
    - self_attn.q_proj
    - mlp.down_proj
EOF
"$bin" train -c "$tmp/c.yaml" --out "$tmp/cy" --iters 3 --threads 1 >"$tmp/cy.txt"
python3 - "$tmp/cy/adapter_config.json" <<'EOF' && ok || bad "yaml config: $(cat "$tmp/cy/adapter_config.json")"
import json, sys
c = json.load(open(sys.argv[1]))
lp = c["lora_parameters"]
assert lp["rank"] == 2 and lp["scale"] == 10.0 and c["num_layers"] == 2 and c["iters"] == 3, c
assert lp["keys"] == ["self_attn.q_proj", "mlp.down_proj"], lp
EOF
echo "{\"model\": \"$tmp/m\", \"data\": \"$tmp/text\", \"iters\": 2, \"batch_size\": 2, \"lora_parameters\": {\"rank\": 3}}" >"$tmp/c.json"
"$bin" train --config "$tmp/c.json" --out "$tmp/cj" --threads 1 --num-layers 1 >/dev/null \
    && grep -q '"rank": 3' "$tmp/cj/adapter_config.json" && ok || bad "json config (text data)"
"$bin" train --model "$tmp/m" --data "$tmp/text" --out "$tmp/x" --mask-prompt --iters 1 2>"$tmp/e" \
    && bad "--mask-prompt on text data" || { grep -q "train.jsonl:1: --mask-prompt" "$tmp/e" && ok || bad "$(cat "$tmp/e")"; }

# ---- DPO (the adapter starts as the base: log 2 at step 1) and ORPO: the loss drops
for L in dpo orpo; do
    train --data "$tmp/pref" --out "$tmp/$L" --loss $L --iters 20 --batch-size 2 \
        --learning-rate 1e-2 --steps-per-eval 10 --threads 2 >"$tmp/$L.txt"
    python3 - "$tmp/$L.txt" $L <<'EOF' && ok || bad "$L: $(grep Val "$tmp/$L.txt")"
import math, re, sys
v = [float(x) for x in re.findall(r"Val loss ([0-9.]+)", open(sys.argv[1]).read())]
assert len(v) == 3, v
if sys.argv[2] == "dpo":
    assert abs(v[0] - round(math.log(2), 3)) < 1e-9 and v[-1] < 0.1, v
else:
    assert v[-1] < v[0] - 1.0, v
EOF
done
"$bin" train --model "$tmp/m" --data "$tmp/d" --out "$tmp/x" --loss dpo --iters 1 --num-layers 1 \
    2>"$tmp/e" && bad "dpo on sft data" || { grep -q "needs preference data" "$tmp/e" && ok || bad "$(cat "$tmp/e")"; }
"$bin" train --model "$tmp/m" --data "$tmp/pref" --out "$tmp/x" --iters 1 --num-layers 1 \
    2>"$tmp/e" && bad "sft on pairs" || { grep -q "needs --loss dpo or orpo" "$tmp/e" && ok || bad "$(cat "$tmp/e")"; }
"$bin" train --model "$tmp/m" --data "$tmp/pref" --loss ppo --iters 1 2>"$tmp/e" && bad "--loss ppo" \
    || { grep -q "sft, dpo or orpo" "$tmp/e" && ok || bad "$(cat "$tmp/e")"; }

# ---- bad data: one line naming FILE:LINE
mkdir -p "$tmp/bad"
cp "$tmp/d/valid.jsonl" "$tmp/bad/"
err() { # NEEDLE TRAIN_JSONL_TEXT
    printf '%s' "$2" >"$tmp/bad/train.jsonl"
    local o
    o=$("$bin" train --model "$tmp/m" --data "$tmp/bad" --out "$tmp/x" --iters 1 --num-layers 1 2>&1) \
        && { bad "accepted: $2"; return; }
    [ "$(printf '%s\n' "$o" | wc -l)" = 1 ] && printf '%s' "$o" | grep -q "$1" && ok || bad "$1: $o"
}
good='{"prompt": "a", "completion": "b"}'
err "train.jsonl:2: " "$good
{\"prompt\": \"a\", \"completion\": "
err "train.jsonl:3: 'prompt' and 'completion' must be strings" "$good

{\"prompt\": 1, \"completion\": \"b\"}"
err "train.jsonl:1: unsupported data format" '{"input": "x"}'
err "train.jsonl:2: not a JSON object" "$good
[1, 2]"
err "train.jsonl:2: .*messages" "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}
{\"messages\": 3}"
err "at least batch_size=4" "$good"
err "train.jsonl:2: 'prompt', 'chosen' and 'rejected' must be strings" '{"prompt": "a", "chosen": "b", "rejected": "c"}
{"prompt": "a", "chosen": ["b"], "rejected": "c"}'
err "no examples" ""
out=$("$bin" train --model "$tmp/m" --data "$tmp/nonexistent" --iters 1 2>&1) && bad "no data dir" \
    || { echo "$out" | grep -q "train.jsonl: not found" && ok || bad "no data dir: $out"; }
out=$("$bin" train --model "$tmp/m" --data "$tmp/d" --iters 1 2>&1) && bad "num_layers 16 of 3" \
    || { echo "$out" | grep -q "requested to train 16 layers but the model has 3" && ok || bad "$out"; }

echo "train e2e: $pass passed, $fail failed"
[ "$fail" = 0 ]
