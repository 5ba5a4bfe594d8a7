# Two commands on a fresh machine: `make demo` (the end-to-end run) and `make test` (what CI runs).
.PHONY: demo test test-slow setup lock

demo:
	scripts/demo

test:
	scripts/test

test-slow:
	scripts/test --slow

setup:
	scripts/setup

lock:
	python3 -m uv lock
