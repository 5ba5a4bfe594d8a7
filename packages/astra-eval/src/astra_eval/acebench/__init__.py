"""ACEBench's agent category (multi_turn 30, multi_step 20; English and Chinese), run and scored as ACEBench does.

`envs` holds our own implementation of the sandbox classes the tasks need, `scoring` the
end-to-end (final state) and process (milestone) accuracies, `play` the agent loop with an LLM
user simulator for the multi-turn split.
"""
