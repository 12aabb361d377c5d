#!/bin/sh
# Build Citus from the vendored source (../shared/vendor, see its README) and
# install it into the embedded PostgreSQL of the virtual environment.
# Usage: scripts/build_citus.sh TARBALL PG_CONFIG BUILD_DIR
# The compile takes about a minute on 2 cores; `make citus` runs it once (stamp).
set -eu
tarball=$1; pg_config=$2; build=$3

rm -rf "$build"
mkdir -p "$build/stage"
tar xzf "$tarball" -C "$build"
src=$(find "$build" -mindepth 1 -maxdepth 1 -type d -name 'citus-*' | head -n 1)
cd "$src"
./configure PG_CONFIG="$pg_config" --without-libcurl --without-lz4 --without-zstd >"$build/configure.log" 2>&1 \
    || { tail -n 30 "$build/configure.log"; exit 1; }
# The embedded server was compiled by a newer gcc whose CFLAGS carry warnings
# (-Wmissing-variable-declarations) unknown to Debian 12's gcc 12: override them.
make -j2 CFLAGS='-O2 -fno-strict-aliasing -fwrapv -fexcess-precision=standard' >"$build/make.log" 2>&1 \
    || { tail -n 30 "$build/make.log"; exit 1; }
make install DESTDIR="$build/stage" >"$build/install.log" 2>&1 || { tail -n 30 "$build/install.log"; exit 1; }

libdir=$("$pg_config" --pkglibdir)
sharedir=$("$pg_config" --sharedir)
cp -R "$build/stage$libdir/." "$libdir/"
cp "$build/stage$sharedir/extension/"* "$sharedir/extension/"
echo "citus installed into $libdir"
