# astra-grpo: the paper's two training stages on CPU with the embedded SmolLM2-135M-Instruct.
# SFT warm start on the gold trajectories of the qaenv step, then online multi-turn GRPO on its RL
# samples (episodes in nsjail sessions, F1 reward, Adaptive Batch Filling), then replaying the trained
# policy as a stage and plotting the curves. A short SFT (4 steps of 2) teaches the tool-call format, so GRPO's
# groups have reward variance: non-zero advantages, loss and gradients. A few steps only: the signal, not
# the learning curve (benchmarks/learning.py measures that).
# Torch uses every core: the steps run one at a time and the model server idles meanwhile.
G="$OUT/grpo"
mkdir -p "$G"
head -16 "$OUT/qaenv/gold_trajectories.jsonl" > "$G/sft_data.jsonl"
head -2 "$OUT/qaenv/rl_samples.jsonl" > "$G/rl_data.jsonl"

# 1. SFT: loss on assistant tokens only, cosine schedule with warmup; weights in HF format. Stopped after its
#    first step as a batch scheduler's time limit would (SIGTERM): it finishes the step it is in, saves its
#    state and exits 143; --resume finishes the run exactly as an uninterrupted one (tested).
SFT=(astra-grpo sft "$G/sft_data.jsonl" --config sft_tiny_cpu.yaml --output-dir "$G/sft"
  --batch-size 2 --micro-batch-size 2 --max-steps 4 --warmup-ratio 0 --max-length 1024 --learning-rate 2e-4)
rm -rf "$G/sft"
"${SFT[@]}" 2> "$G/sft_stopped.txt" & trainer=$!
until [ -s "$G/sft/metrics.jsonl" ] || ! kill -0 "$trainer" 2> /dev/null; do sleep 0.2; done
kill -TERM "$trainer"; status=0; wait "$trainer" || status=$?
[ "$status" = 143 ] || { cat "$G/sft_stopped.txt"; echo "expected exit 143 after SIGTERM, got $status"; exit 1; }
grep "SIGTERM: stopped after step" "$G/sft_stopped.txt"
"${SFT[@]}" --resume

#    A base model's tokenizer has no chat template: SFT says which option gives one, and with --chat-template-path
#    (here a copy of the embedded model without its template, given the original's) it trains; the checkpoint's
#    tokenizer carries the template.
MODEL_DIR="$(python -c 'from astra_core.local.model import resolve_model_path; print(resolve_model_path(None))')"
BASE="$G/base-model"
rm -rf "$BASE" "$G/sft-base" && mkdir -p "$BASE"
for file in "$MODEL_DIR"/*; do
  case "$(basename "$file")" in chat_template.jinja|tokenizer_config.json) ;; *) ln -s "$file" "$BASE/" ;; esac
done
python -c "import json, sys; c = json.load(open(sys.argv[1])); c.pop('chat_template', None); json.dump(c, open(sys.argv[2], 'w'))" \
  "$MODEL_DIR/tokenizer_config.json" "$BASE/tokenizer_config.json"
BASE_SFT=(astra-grpo sft "$G/sft_data.jsonl" --config sft_tiny_cpu.yaml --model "$BASE" --output-dir "$G/sft-base"
  --batch-size 2 --micro-batch-size 2 --max-steps 1 --warmup-ratio 0 --learning-rate 2e-4 --max-length 1024 --report-to "")
if "${BASE_SFT[@]}" 2> "$G/base_refused.txt"; then echo "expected a model without a chat template to be refused"; exit 1; fi
tail -n 1 "$G/base_refused.txt"
"${BASE_SFT[@]}" --chat-template-path "$MODEL_DIR"
python -c "
from transformers import AutoTokenizer
same = AutoTokenizer.from_pretrained('$G/sft-base/final').chat_template == open('$MODEL_DIR/chat_template.jinja').read()
print('the base model\'s checkpoint carries the template it was trained with:', same)
assert same"

# 2. GRPO from the SFT weights: 1 prompt x 4 rollouts per step, every rollout written as a record (a group
#    without reward variance is discarded by Adaptive Batch Filling; at its round cap the batch is topped up);
#    the full training state is saved at the last step (resume with --resume). The update lays each group out as
#    a prefix tree (layout: tree, the default): its prompt is forwarded once for its 4 episodes.
astra-grpo train "$G/rl_data.jsonl" --config grpo_tiny_cpu.yaml --model "$G/sft/final" --output-dir "$G/train" \
  --batch-size 1 --group-size 4 --mini-batch-size 1 --micro-batch-size 4 --max-steps 2 --max-turns 2 \
  --max-new-tokens 64 --max-response-length 512 --abf-max-rounds 1 --learning-rate 1e-5 --save-state-steps 2 --keep-last-states 1 \
  --sandbox-pool-size 2 --rollouts-out "$G/train_rollouts.jsonl" --rejects "$G/rejects.train.jsonl"

# 3. The trained policy as a JSONL stage: one rollout record per episode, scored by the F1 reward.
head -1 "$G/rl_data.jsonl" | astra-grpo rollout --model "$G/train/final" -n 1 --max-turns 2 --max-new-tokens 64 \
  --sandbox-pool-size 2 -o "$G/rollouts.jsonl" --rejects "$G/rejects.rollout.jsonl"

# 4. Curves (paper Figure 8 style: turns per trajectory over training, reward, lengths, ABF).
astra-grpo plot "$G/train" -o "$G/curves.png" --title "astra-grpo demo (SmolLM2-135M, CPU)"
python - "$G" <<'PY'
import json, sys
g = sys.argv[1]
steps = [json.loads(l) for l in open(f"{g}/train/metrics.jsonl")]
for s in steps:
    print(f"grpo: step {s['step']}: reward {s['rollout/reward_mean']:.3f}, turns {s['rollout/turns_mean']:.2f}, "
          f"valid groups {s['valid_fraction']:.2f} in {int(s['abf/rounds'])} round(s), loss {s['loss']:.4f}, "
          f"grad norm {s['grad_norm']:.3f}; the update forwarded {s['update_forwarded_tokens']:.0f} tokens for the "
          f"episodes' {s['update_tokens']:.0f} (each group's prompt once: layout tree)")
rollouts = [json.loads(l) for l in open(f"{g}/rollouts.jsonl")]
print(f"grpo: replayed {len(rollouts)} episodes with the trained policy; finish reasons:",
      sorted({r['finish_reason'] for r in rollouts}))
PY
