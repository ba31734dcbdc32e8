#!/bin/sh
# device-bundle.sh: build the test programs and the clremat tool statically
# against libclremat (no MPI) in a scratch clone, and pack them with the
# shared libraries they need (except glibc's) into DIR/bundle.tar.xz, for a
# machine that has an OpenCL driver but none of the build's dependencies
# (a borrowed GPU machine). tools/device-check.sh runs the bundle there.
#
# usage: tools/device-bundle.sh DIR    (run in the repository root; builds
#        the committed HEAD, so commit first)
set -eu
dir=${1:?usage: tools/device-bundle.sh DIR}
top=$(pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

git clone -q "$top" "$scratch/src"
cd "$scratch/src"
./autogen.sh > "$scratch/autogen.log" 2>&1
./configure -q --disable-shared --without-mpi CFLAGS="-O2 -g0" > "$scratch/configure.log" 2>&1
make -j"$(nproc)" > "$scratch/make.log" 2>&1
make -j"$(nproc)" check TESTS= >> "$scratch/make.log" 2>&1

stage=$scratch/stage
mkdir -p "$stage/bin/tests" "$stage/bin/tools" "$stage/lib" "$stage/libfb"
for f in tests/test_*; do
    case "$f" in *.c|*.h|*.o) continue ;; esac
    [ -x "$f" ] && file "$f" | grep -q ELF && cp "$f" "$stage/bin/tests/"
done
cp tools/clremat "$stage/bin/tools/"
strip "$stage"/bin/tests/* "$stage"/bin/tools/clremat
git rev-parse HEAD > "$stage/COMMIT"

# The shared libraries the programs load, but not glibc's own (the target's
# must be used); libstdc++ and libgcc_s go to libfb/, a fallback used only
# where the target has none.
for f in "$stage"/bin/tests/* "$stage"/bin/tools/clremat; do ldd "$f"; done |
    awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
        case "$(basename "$lib")" in
            libc.so*|libm.so*|libresolv.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*) ;;
            libstdc++.so*|libgcc_s.so*) cp -L "$lib" "$stage/libfb/" ;;
            *) cp -L "$lib" "$stage/lib/" ;;
        esac
    done

cd "$top"
mkdir -p "$dir"
tar -C "$stage" -cJf "$dir/bundle.tar.xz.tmp" . && mv "$dir/bundle.tar.xz.tmp" "$dir/bundle.tar.xz"
ls -l "$dir/bundle.tar.xz"
