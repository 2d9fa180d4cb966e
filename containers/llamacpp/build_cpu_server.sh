#!/usr/bin/env bash
# A CPU build of llama.cpp's llama-server for the tests (make test-llamacpp), from the llama.cpp sources that
# the llama-cpp-python sdist on PyPI carries in vendor/llama.cpp (no other download source is reachable from
# the development machines or CI). Cached: a second run with the same version does nothing.
#
#   containers/llamacpp/build_cpu_server.sh CACHE_DIR LLAMA_CPP_PYTHON_VERSION PIP
set -euo pipefail
cache=$1 version=$2 pip=$3
binary="$cache/llama-server-$version"
if [ -x "$binary" ]; then
  echo "llama-server (llama-cpp-python $version sources) is cached at $binary"
  exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$pip" download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
  "llama-cpp-python==$version" -d "$work"
tar -xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
start=$(date +%s)
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$work/configure.log"
cmake --build "$work/build" --target llama-server -j"$(nproc)" >"$work/build.log"
install -m 0755 "$work/build/bin/llama-server" "$binary"
echo "built $binary in $(($(date +%s) - start)) s"
