# The two commands of the quick start: `make run` and `make test`. Both install what they need.
BUILD      ?= build
BUILD_ASAN ?= build-asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS = -DSLUICE_WERROR=ON

.PHONY: all deps build build-asan test test-unit test-asan format-check run simulate bench install clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

build-asan: deps
	@cmake -S . -B $(BUILD_ASAN) $(CMAKE_FLAGS) -DCMAKE_BUILD_TYPE=Debug \
	    -DSLUICE_SANITIZE=address,undefined >/dev/null
	@cmake --build $(BUILD_ASAN) -j $(JOBS)

test-unit: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

test-asan: build-asan
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    ctest --test-dir $(BUILD_ASAN) --output-on-failure -j $(JOBS) -LE client

format-check: deps
	@scripts/check-format.sh

test: test-unit test-asan format-check

run: build
	@echo "sluice serve: RESP on 127.0.0.1:7379 with examples/sluice.yaml. In another terminal, try:"
	@echo "  redis-cli -p 7379 PING"
	@echo "  redis-cli -p 7379 THROTTLE emails alice          # a decision from a named limit"
	@echo "  redis-cli -p 7379 CL.THROTTLE user123 15 30 60 1  # redis-cell's command: 0 16 15 -1 2"
	@echo "  redis-cli -p 7379 LIMIT.SET api rate=100/1s,burst=20,key=explicit"
	@echo "  redis-cli -p 7379 LIMIT.LIST"
	@echo "  redis-cli -p 7379 INFO limits"
	@echo "  redis-cli -p 7379 TASK.ADD tenant.sync '{\"tenant_id\":\"acme\"}'"
	@echo "  redis-cli -p 7379 TASK.GET tenant.sync COUNT 10 TIMEOUT 1000"
	@echo "  redis-cli -p 7379 TASK.EXPLAIN 1"
	@echo "Dashboard: http://127.0.0.1:7380   Metrics: http://127.0.0.1:7380/metrics   Data: ./data"
	@echo "Commands: docs/commands.md. Stop with Ctrl-C."
	@exec $(BUILD)/sluice serve --config examples/sluice.yaml

simulate: build
	$(BUILD)/sluice simulate examples/seed003-burst.yaml

bench: build
	$(BUILD)/bench_core

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN)
