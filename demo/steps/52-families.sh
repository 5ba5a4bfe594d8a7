# Every model family's own tool calls (issue 53; docs/model-families.md). The trainer, `astra-grpo rollout` and
# `astra-core serve --model` read a reply the way its model writes it: through the chat template's own tool
# rendering and the family's response template (transformers' parser), its turns ending on the family's own
# tokens. The embedded SmolLM2 knows no tools, so it is read as Hermes JSON (steps 50 and 55); here, every template
# of the trl wheel and how it is read, then a template whose calls nothing reads, refused at start in one line.
F="$OUT/families"
mkdir -p "$F"
python scripts/model_families_doc.py > "$F/model-families.md"
python - "$F/model-families.md" <<'EOF'
import sys
rows = [line.split(" | ") for line in open(sys.argv[1]) if line.startswith("| `") and ".jinja`" in line]
readers = {}
for row in rows:
    readers.setdefault(row[1].strip("`"), []).append(row[0].strip("| `").removesuffix(".jinja"))
print(f"families: {len(rows)} tool-capable chat templates of the trl wheel, read as:")
for reader, templates in readers.items():
    print(f"  {reader:13} {', '.join(templates)}")
EOF

# A template whose calls no known format reads: `<call>` blocks (Qwen2.5's template, renamed tags), given to the
# grpo step's policy. `astra-grpo rollout` stops before it plays an episode, naming the fix.
python -c "
import importlib.resources
text = (importlib.resources.files('trl') / 'chat_templates' / 'qwen2_5.jinja').read_text()
open('$F/calls.jinja', 'w').write(text.replace('<tool_call>', '<call>').replace('</tool_call>', '</call>'))"
RL_DATA="$OUT/grpo/rl_data.jsonl"  # run on its own (without step 50): astra-reward's samples, the embedded model
[ -s "$RL_DATA" ] || RL_DATA="$(astra-reward sample-data)/samples.jsonl"
POLICY=()
[ -d "$OUT/grpo/sft/final" ] && POLICY=(--model "$OUT/grpo/sft/final")
if head -1 "$RL_DATA" | astra-grpo rollout "${POLICY[@]}" --chat-template-path "$F/calls.jinja" \
    --sandbox-pool-size 1 -o "$F/rollouts.jsonl" 2> "$F/refused.txt"; then
  echo "expected a template whose calls cannot be read to be refused"; exit 1
fi
grep -o "cannot load the policy.*" "$F/refused.txt" | cut -c1-240
