#!/bin/sh
# Prints cxdirect.pc for a library installed under PREFIX: the header in PREFIX/include, the
# libraries in LIBDIR (default PREFIX/lib). The version comes from the generated header.
#
#   capi/pkgconfig.sh /usr/local > /usr/local/lib/pkgconfig/cxdirect.pc
set -eu
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 PREFIX [LIBDIR]" >&2
    exit 2
fi
here=$(dirname "$0")
prefix=$1
libdir=${2:-$prefix/lib}
version=$(awk '/#define CXD_VERSION_(MAJOR|MINOR|PATCH) /{v = v (v == "" ? "" : ".") $3} END {print v}' \
    "$here/include/cxdirect.h")
sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" -e "s|@VERSION@|$version|g" \
    "$here/cxdirect.pc.in"
