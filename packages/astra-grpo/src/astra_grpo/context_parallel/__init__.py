"""Ulysses context parallelism (CP) for the SFT and GRPO trainers (issue 8).

    grid.py         the DP x CP process grid (`init_grid`, `current_grid`)
    collectives.py  all-to-all and all-gathers, differentiable where the loss needs it
    attention.py    the Ulysses attention function registered with transformers (`enable(model, cp)`)
    forward.py      sequence sharding and the per-token log-probs under CP (`sharded_token_logprobs`)

Trainers set `context_parallel_size`; `runtime.make_accelerator` builds the grid,
`runtime.load_model` enables the attention, and `logprobs.token_logprobs` shards when the grid has
cp_size > 1. Submodules are imported explicitly (attention.py and forward.py import transformers).
"""
