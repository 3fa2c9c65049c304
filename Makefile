# The two commands: `make demo` and `make test`. Each installs what is missing first.
.PHONY: all demo test build deps clean

all: build

deps:
	scripts/setup.sh

build: deps
	scripts/build.sh release

test:
	scripts/test.sh

demo:
	scripts/demo.sh $(ARGS)

clean:
	rm -rf build
