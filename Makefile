# The two commands: `make demo` and `make test`. Each installs what is missing first.
.PHONY: all demo test bench build deps wheel clean

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

# The wheel users install (dist/gcagent-*-manylinux_*.whl): the agent and client library built
# in, their non-system libraries bundled by auditwheel, UCX as the libucx-cu13 dependency.
wheel:
	GCAGENT_VENVS="wheel" scripts/setup.sh
	scripts/wheel.sh dist

clean:
	rm -rf build
