#!/bin/bash
# tests/gpu/prepare.sh — run on the build machine before lending a GPU: builds
# specd with CUDA (sm_90 + PTX) into build-cuda and stages what the GPU machine
# needs into gpu-bin/ (the specd binary, the CUDA test, and the Debian shared
# libraries specd links that a CUDA image lacks). Then run tests/gpu/run.sh
# there with gpu-bin carried along.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -d build-cuda ] || meson setup build-cuda --buildtype=release -Dcuda=enabled >/dev/null
ninja -C build-cuda cli/specd tests/gpu/test_cuda >/dev/null
rm -rf gpu-bin && mkdir -p gpu-bin/lib
cp build-cuda/cli/specd build-cuda/tests/gpu/test_cuda gpu-bin/
# the non-CUDA, non-libc libraries the two binaries load
for bin in gpu-bin/specd gpu-bin/test_cuda; do
  ldd "$bin" | awk '/=> \// {print $3}' | grep -vE 'libc\.so|libm\.so|libdl\.so|librt\.so|libpthread|ld-linux|libcuda|libcublas|libcudart|libnccl|libstdc\+\+|libgcc_s' || true
done | sort -u | while read -r lib; do cp -L "$lib" gpu-bin/lib/; done
# the models and corpus the GPU tests read (../shared does not travel to a lent machine)
mkdir -p gpu-bin/models/corpora
cp ../shared/models/stories260K.gguf ../shared/models/llama2xs-281K.gguf gpu-bin/models/
cp ../shared/models/corpora/tinystories_valid_30K.txt gpu-bin/models/corpora/
du -sh gpu-bin | awk '{print "gpu-bin: " $1}'
ls gpu-bin/lib
