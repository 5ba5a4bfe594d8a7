# Two commands on a fresh machine: `make demo` (the end-to-end run) and `make test` (what CI runs).
.PHONY: demo test test-slow setup lock wheels

demo:
	scripts/demo

test:
	scripts/test

test-slow:
	scripts/test --slow

setup:
	scripts/setup --tests

lock:
	python3 -m uv lock

# A wheel and an sdist of every package in dist/ (pip install --find-links dist/ astra-reward).
wheels:
	python3 -m uv build --all-packages --out-dir dist
