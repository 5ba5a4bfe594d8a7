# astra-qaenv: verifiable, code-executable RL environments from decomposed Q–A (paper §2.2, §3.2.2).
# Programmatic synthesis on the bundled knowledge base -> validate -> build-env (every sub-answer reproduced
# in the nsjail sandbox) -> merge -> export RL samples (irrelevant-tool mixing) + gold trajectories; then a
# tiny LLM-path run on the embedded model with its rejects, and dataset statistics with plots.
Q="$OUT/qaenv"
mkdir -p "$Q"

# 1. Programmatic Q–A synthesis (no LLM): walks of the KB's relations from every third entity.
astra-qaenv sample-data entities | awk 'NR % 3 == 1' > "$Q/starts.jsonl"
astra-qaenv programmatic "$Q/starts.jsonl" --max-hops 3 -o "$Q/qa_instances.jsonl" --rejects "$Q/rejects.programmatic.jsonl"

# 2. Validation: structure (ids, dependencies, hop levels) and tool necessity (leaf-only tool-free steps).
#    Programmatic instances carry their needs_tool flags and are correct by construction: no LLM judge here.
astra-qaenv validate --no-judge "$Q/qa_instances.jsonl" -o "$Q/validated.jsonl" --rejects "$Q/rejects.validate.jsonl"

# 3. Environments: generated lookup tools composed into one module; every call runs in nsjail and must
#    return its sub-answer (verified_calls keeps the real observations).
astra-qaenv build-env "$Q/validated.jsonl" -o "$Q/environments.jsonl" --rejects "$Q/rejects.build-env.jsonl"

# 4. Merging homogeneous sub-environments (table union), every member's call re-verified in the sandbox.
astra-qaenv merge "$Q/environments.jsonl" -o "$Q/merged.jsonl" --rejects "$Q/rejects.merge.jsonl"

# 5. RL samples with similarity-band distractors (local all-MiniLM-L6-v2 embeddings) + gold trajectories (SFT warm start).
#    One distractor per band (the default is up to 3): every tool is prompt tokens that SFT and GRPO pay for on CPU.
astra-qaenv export "$Q/merged.jsonl" --mixing bands --per-band 1 --embedder local -o "$Q/rl_samples.jsonl" \
  --gold-trajectories "$Q/gold_trajectories.jsonl" --rejects "$Q/rejects.export.jsonl"
python - "$Q" <<'EOF'
import json, sys
q = sys.argv[1]
envs = [json.loads(l) for l in open(f"{q}/merged.jsonl")]
samples = [json.loads(l) for l in open(f"{q}/rl_samples.jsonl")]
calls = sum(len(e["verified_calls"]) for e in envs)
merged = sum(e["merge"]["tools_before"] - e["merge"]["tools_after"] for e in envs)
print(f"qaenv: {len(envs)} environments, {calls} tool calls verified in nsjail, {merged} tools merged away")
s = samples[0]
print(f"qaenv: sample {s['id']}: {s['messages'][1]['content']!r}")
print(f"qaenv:   tools shown: {[t['function']['name'] for t in s['tools']]}")
print(f"qaenv:   distractors by band: {s['mixing']['bands']}")
EOF

# 6. The LLM path on the embedded SmolLM2, tiny: question-conditional synthesis and LLM-written tools.
#    Guided JSON gives every reply its schema's shape; a 135M model's decompositions and code rarely pass
#    validation and the sandbox check, and every drop lands in the rejects with its reason.
astra-qaenv sample-data questions | head -1 > "$Q/llm_rows.jsonl"
astra-qaenv synthesize "$Q/llm_rows.jsonl" --attempts 1 --max-tokens 48 --temperature 0 \
  -o "$Q/llm_qa_instances.jsonl" --rejects "$Q/rejects.llm.synthesize.jsonl"
head -1 "$Q/validated.jsonl" > "$Q/llm_build_input.jsonl"
astra-qaenv build-env "$Q/llm_build_input.jsonl" --source llm --attempts 1 --json-attempts 1 --no-scaling \
  --max-tokens 48 --temperature 0 -o "$Q/llm_environments.jsonl" --rejects "$Q/rejects.llm.build-env.jsonl"
python - "$Q"/rejects.llm.*.jsonl <<'PY'
import json, os, sys
for path in sys.argv[1:]:
    for line in open(path):
        reason, said, reply = json.loads(line)["reason"].partition("; last reply: ")
        print("qaenv: reject:", reason)
        if said:  # the model's reply can run long: its start, and where the whole of it is
            print(f"qaenv:   its last reply began {reply[:120]} ... ({len(reply)} characters in {os.path.relpath(path)})")
PY

# 7. Dataset statistics (paper A.1.2, Figures 11-13) with PNG plots.
astra-qaenv stats "$Q/rl_samples.jsonl" -o "$Q/stats.json" --plots "$Q/plots"
python -c "import json; s=json.load(open('$Q/stats.json')); print('qaenv: stats:', {k: s[k] for k in ('samples', 'scenario_types', 'tool_calls_per_sample', 'parallelizable_step_share')})"
