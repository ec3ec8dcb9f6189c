# donto-pg: the README's two commands are `make demo` and `make test`.
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: setup demo test lint unit db-tests extension clean

setup:
	@bash scripts/setup.sh

demo: setup
	$(BIN)/donto-pg demo

test: setup lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint:
	$(BIN)/ruff check donto_pg tests benchmarks
	$(BIN)/sqlfluff lint sql migrations --disable-progress-bar

extension: setup
	$(BIN)/donto-pg extension build

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
