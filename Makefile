# The two commands: `make demo` and `make test`. Both set up everything they need first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SYSTEM_PACKAGES := fio gcc g++ make cmake git libc6-dev openssh-server

.PHONY: demo test test-fast setup system-deps venv native lint clean

demo: setup
	$(BIN)/harness run experiments/quickstart.yaml --target local
	@# the dashboard of every set in results/ (a few seconds): open the printed index.html in a browser
	$(BIN)/harness results publish results/site --results results

# everything (the README's command and CI's); -ra ends with the reason of every skip
test: setup
	$(BIN)/python -m pytest -q -ra

# the edit loop: no campaign, runner run, build, sshd, adb, jtop or labgrid coordinator, on two workers (under a minute here)
test-fast: setup
	$(BIN)/python -m pytest -q -ra -m "not slow" -n 2 --dist worksteal

setup: system-deps venv native

# Missing system tools: installed with apt when running as root, otherwise one clear message.
# adb (the real adb host server the adb transport tests use) is optional: without it those tests skip; so is
# ccache (runner/enginebuild builds through it when present), and chromium with chromium-driver (the dashboard's
# browser tests, tests/test_site.py: Debian's browser, never a download).
system-deps:
	@missing=""; \
	command -v fio >/dev/null || missing="$$missing fio"; \
	command -v cc >/dev/null || missing="$$missing gcc libc6-dev"; \
	command -v c++ >/dev/null || missing="$$missing g++"; \
	command -v make >/dev/null || missing="$$missing make"; \
	command -v cmake >/dev/null || missing="$$missing cmake"; \
	command -v git >/dev/null || missing="$$missing git"; \
	[ -x /usr/sbin/sshd ] || missing="$$missing openssh-server"; \
	$(PYTHON) -c "import ensurepip, venv" 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing:$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null; \
	  else \
	    echo "error: missing system packages:$$missing (install them: sudo apt-get install$$missing)" >&2; exit 2; \
	  fi; \
	fi; \
	optional() { \
	  command -v $$1 >/dev/null && return 0; \
	  pkg=$${4:-$$1}; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing: $$pkg ($$2)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkg) >/dev/null 2>&1 || \
	      echo "note: $$pkg could not be installed; $$3 will skip"; \
	  else \
	    echo "note: $$pkg is not installed (sudo apt-get install $$pkg); $$3 will skip"; \
	  fi; \
	}; \
	optional bpftrace "the offcpu ground-truth collector and its tests" "the offcpu collector tests"; \
	optional adb "the real adb server for the adb transport tests" "the adb transport tests"; \
	optional ccache "the compiler cache engine builds go through (a one-patch rebuild in seconds)" \
	  "the compiler cache of engine builds"; \
	optional chromium "the headless browser the dashboard tests open its pages in" "the dashboard browser tests"; \
	optional chromedriver "chromium's WebDriver, which selenium drives" "the dashboard browser tests" chromium-driver

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

native:
	$(MAKE) -s -C runner/native

lint: setup
	$(BIN)/ruff check harness runner tests bench notebooks
	$(BIN)/lint-imports
	$(BIN)/mypy

clean:
	$(MAKE) -s -C runner/native clean
	rm -rf $(VENV)
