#!/bin/bash
# tests/gpu/prepare.sh — run on the build machine before a GPU is lent: builds
# specd with CUDA (sm_90 + PTX) into build-cuda and stages into gpu-bin/ what
# tests/gpu/run.sh needs there, since only the checkout travels:
#   gpu-bin/bin/      specd, test_cuda, test_medusa_cuda (with lib/: packed into
#                     gpu-bin/pack.tar.xz; run.sh unpacks it)
#   gpu-bin/specd     a wrapper that runs bin/specd with gpu-bin/lib first on the
#                     library path (for that process only: the GPU image's own
#                     Python must not load Debian's libssl/libz)
#   gpu-bin/lib/      the Debian libraries specd links that a CUDA image lacks
#                     (libwebsockets, jansson, SQLite, yaml, curl, ...; glibc,
#                     the C++ runtime and the CUDA libraries stay the image's)
#   gpu-bin/models/   stories260K, llama2xs-281K, the TinyStories corpus and
#                     Medusa heads trained here for stories260K
#   gpu-bin/py/       Debian's python3-websockets (pure Python) for the server tests
# Then: the device tool's run with carry ["gpu-bin"] and `bash tests/gpu/run.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODELS=${SPECD_MODELS:-../shared/models}
[ -d build-cuda ] || meson setup build-cuda --buildtype=release -Dcuda=enabled >/dev/null
ninja -C build-cuda cli/specd tests/gpu/test_cuda tests/gpu/test_medusa_cuda >/dev/null
rm -rf gpu-bin && mkdir -p gpu-bin/bin gpu-bin/lib gpu-bin/models/corpora gpu-bin/py
cp build-cuda/cli/specd build-cuda/tests/gpu/test_cuda build-cuda/tests/gpu/test_medusa_cuda gpu-bin/bin/
strip gpu-bin/bin/*
cat >gpu-bin/specd <<'EOF'
#!/bin/sh
# runs gpu-bin/bin/specd with the staged libraries and the CUDA ones run.sh found
d=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$d/lib${SPECD_GPU_LIBS:+:$SPECD_GPU_LIBS}" exec "$d/bin/specd" "$@"
EOF
chmod +x gpu-bin/specd
# the libraries the binaries load, less glibc's own, the C++ runtime and CUDA's
for bin in gpu-bin/bin/*; do
  ldd "$bin" | awk '/=> \// {print $3}' |
    grep -vE '/(libc|libm|libdl|librt|libpthread|libresolv|libutil|libnsl|ld-linux[^/]*)\.so|libcuda|libcublas|libcudart|libnccl|libstdc\+\+|libgcc_s' || true
done | sort -u | while read -r lib; do cp -L "$lib" gpu-bin/lib/; done
cp "$MODELS/stories260K.gguf" "$MODELS/llama2xs-281K.gguf" gpu-bin/models/
cp "$MODELS/corpora/tinystories_valid_30K.txt" gpu-bin/models/corpora/
# Medusa heads good enough that their trees get accepted (seconds on the CPU)
build-cuda/cli/specd train-medusa -m "$MODELS/stories260K.gguf" -o gpu-bin/models/medusa-260K.gguf \
  --corpus "$MODELS/corpora/tinystories_valid_30K.txt" --heads 3 --epochs 10 --seed 3 --quiet >/dev/null
cp -r /usr/lib/python3/dist-packages/websockets gpu-bin/py/ 2>/dev/null || echo "no python3-websockets: the server stage will skip" >&2
find gpu-bin/py -name __pycache__ -prune -exec rm -rf {} +
# the binaries (CUDA fatbins) and libraries travel packed: 53 MB become about
# 8, and the checkout (with the 10 MB default pair) must stay under 64 MiB with
# them; run.sh unpacks gpu-bin/pack.tar.xz where bin/ is missing
ls gpu-bin/lib > gpu-bin/libs.txt
tar cf - -C gpu-bin bin lib | xz -T0 -6 > gpu-bin/pack.tar.xz
rm -rf gpu-bin/bin gpu-bin/lib
du -sh gpu-bin | awk '{print "gpu-bin: " $1 " (the device tool carries at most 64 MiB with the checkout)"}'
tr '\n' ' ' < gpu-bin/libs.txt; echo
