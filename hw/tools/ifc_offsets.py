#!/usr/bin/env python3
"""Computes bit offsets and widths of fields in Linux `mlx5_ifc.h`.

The header describes every layout as a sequence of `u8 name[WIDTH]` members whose offsets are the
running sum of the widths before them. This tool does that sum so the layouts in `cxdirect-hw`
can be checked against the header instead of against themselves.

Usage:
    ifc_offsets.py MLX5_IFC_H STRUCT [STRUCT ...]     print `STRUCT field offset width` rows
    ifc_offsets.py MLX5_IFC_H --size STRUCT           print the size of STRUCT in bits

The first row of each struct is `STRUCT @size 0x0 SIZE_IN_BITS`. Nested structs and unions appear as their own row (width = their size) and, with a dotted path,
as each of their fields. Unions take the size of their largest member.
"""
import re
import sys

MEMBER = re.compile(
    r"^\s*(?:(u8)|(struct|union)\s+mlx5_ifc_(\w+?)_bits)\s+(\w+)((?:\s*\[[^\]]*\])*)\s*;")
HEAD = re.compile(r"^\s*(struct|union)\s+mlx5_ifc_(\w+?)_bits\s*\{")


DEFINES = {}


def count_of(dim):
    """Element count of an array dimension; a flexible array (`[]`) has none in the size, and a
    named constant is looked up among the header's `#define`s and enumerators."""
    if not dim:
        return 0
    try:
        return int(DEFINES.get(dim, dim), 0)
    except ValueError:
        # An expression this tool does not evaluate: the struct holding it gets a wrong size, so
        # say so.
        print(f"warning: array size {dim} not understood; taken as 0", file=sys.stderr)
        return 0


def parse(path):
    types = {}
    cur = None
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.split("/*")[0]
        named = re.match(r"^\s*(?:#define\s+)?(\w+)\s*=?\s*(0x[0-9a-fA-F]+|\d+)\s*,?\s*$", line)
        if named:
            DEFINES[named.group(1)] = named.group(2)
        if cur is None:
            m = HEAD.match(line)
            if m:
                cur = (m.group(1), m.group(2), [])
            continue
        if re.match(r"^\s*\}\s*;", line):
            types[cur[1]] = (cur[0], cur[2])
            cur = None
            continue
        m = MEMBER.match(line)
        if not m:
            continue
        dims = [d.strip() for d in re.findall(r"\[([^\]]*)\]", m.group(5))]
        if m.group(1):
            # u8 name[WIDTH] or u8 name[COUNT][WIDTH]
            if dims == [""]:
                # u8 name[]: a flexible run of bytes
                width, count = 8, 0
            else:
                width = int(dims[-1], 0)
                count = count_of(dims[0]) if len(dims) == 2 else 1
            cur[2].append(("bits", m.group(4), width, count))
        else:
            count = count_of(dims[0]) if dims else 1
            cur[2].append((m.group(2), m.group(4), m.group(3), count))
    return types


def size_of(types, name):
    if name not in types:
        # Defined in another header (e.g. mlx5_ifc_fpga.h): counted as empty, and said so.
        print(f"warning: {name} is not defined in this header; taken as 0 bits", file=sys.stderr)
        return 0
    kind, members = types[name]
    sizes = []
    for m in members:
        if m[0] == "bits":
            sizes.append(m[2] * m[3])
        else:
            sizes.append(size_of(types, m[2]) * m[3])
    return max(sizes, default=0) if kind == "union" else sum(sizes)


def fields(types, name, base=0, prefix=""):
    if name not in types:
        return
    kind, members = types[name]
    off = base
    for m in members:
        if m[0] == "bits":
            yield prefix + m[1], off, m[2]
            step = m[2] * m[3]
        else:
            sub = size_of(types, m[2])
            yield prefix + m[1], off, sub
            if m[3] == 1:
                yield from fields(types, m[2], off, prefix + m[1] + ".")
            step = sub * m[3]
        if kind == "struct":
            off += step


def main():
    types = parse(sys.argv[1])
    if sys.argv[2] == "--size":
        print(size_of(types, sys.argv[3]))
        return
    for name in sys.argv[2:]:
        print(f"{name} @size 0x0 {size_of(types, name):#x}")
        for field, off, width in fields(types, name):
            if not field.split(".")[-1].startswith("reserved"):
                print(f"{name} {field} {off:#x} {width:#x}")


if __name__ == "__main__":
    main()
