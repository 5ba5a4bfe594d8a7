"""Ulysses context parallelism (CP) for the SFT and GRPO trainers (issue 8).

    grid.py         the DP x CP process grid (`init_grid`, `current_grid`)
    collectives.py  all-to-all and all-gathers, differentiable where the loss needs it
    attention.py    the Ulysses attention function registered with transformers (`enable(model, cp)`);
                    it attends padded rows itself and packed or tree rows with `layout_attention`
    forward.py      the log-probs each CP rank computed, gathered over the group (`gather_pairs`)

Trainers set `context_parallel_size`; `runtime.make_accelerator` builds the grid,
`runtime.load_model` enables the attention, and `logprobs.token_logprobs` gives each rank its slice
of the row (`layout.Layout.part`) when the grid has cp_size > 1. Every layout works under CP.
Submodules are imported explicitly (attention.py imports transformers).
"""
