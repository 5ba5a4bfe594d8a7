# astra-grpo context parallelism (issue 8): an SFT step with every sequence sharded over 2 CPU
# processes (DP=1 x CP=2, Ulysses all-to-all around attention), launched with `accelerate launch`
# through the trainer scripts; then a GRPO step (rollouts per process, old and new log-probs and the
# update under CP, one group dealt to two ranks). The embedded SmolLM2-135M has 9 attention heads, which 2 does not
# divide, so this uses a tiny random-init Llama (4 heads, 2 kv heads) with SmolLM2's tokenizer.
C="$OUT/cp"
mkdir -p "$C"
DATA="$OUT/grpo/sft_data.jsonl"   # the trajectories of the grpo step
# Run on its own (without the earlier steps): astra-reward's bundled trajectories.
RL_DATA="$OUT/grpo/rl_data.jsonl"  # and its RL samples
[ -s "$DATA" ] || DATA="$(astra-reward sample-data)/trajectories.jsonl"
[ -s "$RL_DATA" ] || RL_DATA="$(astra-reward sample-data)/samples.jsonl"
head -1 "$RL_DATA" > "$C/rl_data.jsonl"
python - "$C/tiny-llama" <<'PY'
import sys
from astra_core.local.model import default_model_dir
from astra_grpo.config import ConfigError
from astra_grpo.context_parallel.attention import check_heads
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LlamaConfig
try:  # the embedded model's heads don't split over 2 ranks: refused, with the reason
    check_heads(AutoConfig.from_pretrained(default_model_dir()), 2)
except ConfigError as error:
    print(f"cp: SmolLM2-135M with CP=2 is refused: {error}")

tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                     bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
AutoModelForCausalLM.from_config(config).save_pretrained(sys.argv[1])
tokenizer.save_pretrained(sys.argv[1])
PY

MAIN_PROCESS_PORT="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')" \
  packages/astra-grpo/scripts/train_sft.sh cpu_2proc.yaml sft_tiny_cpu.yaml "$DATA" --model "$C/tiny-llama" \
  --context-parallel-size 2 --output-dir "$C/sft" --batch-size 2 --micro-batch-size 1 --max-steps 2 \
  --max-length 1024 --learning-rate 1e-3 --warmup-ratio 0 --report-to none
python - "$C/sft" <<'PY'
import json, sys
for step in (json.loads(line) for line in open(f"{sys.argv[1]}/metrics.jsonl")):
    print(f"cp: step {step['step']}: loss {step['loss']:.4f} over {step['trainable_tokens']:.0f} assistant tokens, "
          f"grad norm {step['grad_norm']:.3f}")
PY

MAIN_PROCESS_PORT="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')" \
  packages/astra-grpo/scripts/train_grpo.sh cpu_2proc.yaml grpo_tiny_cpu.yaml "$C/rl_data.jsonl" --model "$C/tiny-llama" \
  --context-parallel-size 2 --output-dir "$C/grpo" --batch-size 1 --group-size 2 --mini-batch-size 1 \
  --micro-batch-size 2 --max-steps 1 --max-turns 2 --max-new-tokens 16 --max-response-length 256 --abf-max-rounds 1 \
  --sandbox-pool-size 2 --learning-rate 1e-3 --report-to none --rejects "$C/rejects.grpo.jsonl"
python - "$C/grpo" <<'PY'
import json, sys
for step in (json.loads(line) for line in open(f"{sys.argv[1]}/metrics.jsonl")):
    print(f"cp: grpo step {step['step']}: reward {step['rollout/reward_mean']:.3f} over "
          f"{step['rollout/turns_mean']:.1f} turns per episode, loss {step['loss']:.4f} (a random-init policy)")
PY
