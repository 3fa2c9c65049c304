# The two commands: `make demo` and `make test`. Each installs what is missing first.
.PHONY: all demo test bench build deps clean

all: build

deps:
	scripts/setup.sh

build: deps
	scripts/build.sh release

test:
	scripts/test.sh

demo:
	scripts/demo.sh

# Codec throughput against the memory-bandwidth baseline.
bench: build
	build/release/bench/gcagent_codec_bench $(ARGS)

clean:
	rm -rf build
