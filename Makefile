# dgemma — the two commands that work on a fresh machine: `make run` and `make test`.
BUILD ?= build
JOBS ?= 2
PORT ?= 8000

.PHONY: all setup configure build test run format clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/build.ninja: CMakeLists.txt
	cmake -S . -B $(BUILD) -G Ninja

configure: setup $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

run: build
	bash scripts/embedded_model.sh $(BUILD)
	$(BUILD)/dgemma serve $(BUILD)/embedded-model $$(test -f $(BUILD)/embedded-model/model.safetensors || echo --load-format dummy) \
	  --served-model-name dgemma-embedded --enable-auto-tool-choice --tool-call-parser gemma4 --reasoning-parser gemma4 \
	  --host 127.0.0.1 --port $(PORT)

format:
	find src tests -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
