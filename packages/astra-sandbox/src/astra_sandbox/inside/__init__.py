"""Code that runs inside the jail: standard library only, mounted read-only at /astra/inside.

- `framing`: length-prefixed JSON frames (also used by the host side).
- `environment`, `program`: the code process: an environment's tools, or a `run_code` program.
- `zygote`: the supervisor that forks, isolates and ends every episode.
"""
