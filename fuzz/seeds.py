#!/usr/bin/env python3
"""Writes the hand-made seed inputs of fuzz_api into fuzz/corpus/ (seed-*).

Each seed is a short scenario in fuzz_api's input encoding: one byte picks
the operation (through the weighted table built from op_weight[], read here
from fuzz_api.c), the next its slot, then the operation's own bytes (sizes,
alignments, variants), in the order fuzz_api.c reads them. The fuzzer
mutates from these; they only have to reach every operation in a sensible
state. Run after changing the encoding:  python3 fuzz/seeds.py
"""
import re
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = (HERE / "fuzz_api.c").read_text()


def op_bytes():
    """First byte value of each operation in fuzz_api's op_table."""
    names = re.search(r"enum \{\s*(OP_MALLOC.*?)OP_COUNT", SRC, re.S).group(1)
    names = [n.strip() for n in names.split(",") if n.strip()]
    weights = dict(re.findall(r"\[(OP_\w+)\] = (\d+)", SRC))
    first, n = {}, 0
    for name in names:
        first[name] = n
        n += int(weights.get(name, 0))
    assert n <= 256, n
    return first


OPS = op_bytes()


def op(name, slot=0, *rest):
    return bytes([OPS["OP_" + name], slot & 255]) + bytes(rest)


# ---- sizes (draw_size) and alignments (draw_align) --------------------------
def zero():
    return bytes([0])


def tiny(n):  # 1..64
    return bytes([2, n - 1])


def cls(c, d=0):  # class c's size + d (d in -4..4)
    return bytes([6, c - 1, d + 4])


def small(n):  # 0..8192
    return bytes([12]) + struct.pack("<H", n)


def medium(n):  # 8 KiB .. 256 KiB
    return bytes([16]) + struct.pack("<I", n - 8192)[:3]


def large(n):  # 128 KiB .. 8 MiB, even
    return bytes([20]) + struct.pack("<I", (n - 131072) // 2)[:3]


def slices(k, d=0):  # k * 64 KiB + d
    return bytes([24, k - 1, d + 4])


def huge():  # 256 MiB and a bit: a mapping of its own
    return bytes([28, 0, 1, 0])


def segments(m, d):  # m * 4 MiB + d (d in -65536..65534, even)
    return bytes([29, m - 1]) + struct.pack("<H", (d + 65536) // 2)


def align(e):  # 2^e
    return bytes([(e << 3) | 1]) if e <= 12 else bytes([0, e - 13])


def write(name, data):
    (HERE / "corpus" / ("seed-" + name)).write_bytes(data)


def main():
    (HERE / "corpus").mkdir(exist_ok=True)
    # the malloc family: every size range, then realloc up and down, frees of each kind
    d = b""
    for i, s in enumerate([zero(), tiny(1), tiny(24), cls(17), cls(33, 1), cls(49, -1), small(5000),
                           medium(70000), medium(131073), large(1 << 20), large(3 << 20), slices(32),
                           slices(33, 1), slices(64)]):
        d += op("MALLOC", i, *s)
    for i, s in enumerate([cls(33, 1), large(600000), tiny(3), medium(20000), slices(2), zero()]):
        d += op("REALLOC", i, *s)
    d += op("CALLOC", 20, *medium(50000), 3) + op("CALLOC", 21, *cls(20), 0)
    d += op("REALLOCARRAY", 20, *small(100), 1)
    for i in range(5):  # slot 5 went with realloc(p, 0)
        d += op("FREE", i, i, 255)
    write("family", d)

    # aligned allocation: every call, small to huge alignments
    d = b""
    for v in range(6):
        for j, (s, e) in enumerate([(tiny(40), 6), (small(3000), 12), (medium(100000), 16),
                                    (large(1 << 20), 20), (tiny(8), 22)]):
            d += op("ALIGNED", v * 8 + j, *s, *align(e), v) + (bytes([1]) if v == 3 else b"")
    for i in range(30):
        d += op("FREE", i // 5 * 8 + i % 5, i % 6, 7)
    write("aligned", d)

    # heaps: make, fill, collect (stats, visit), realloc across heaps, delete, destroy
    d = op("HEAP_NEW", 0) + op("HEAP_NEW", 1) + op("HEAP_NEW", 2)
    for i in range(12):
        d += op("HEAP_MALLOC", 30 + i, 1 + i % 3, *[tiny(16), medium(9000), large(300000)][i % 3], i % 3)
        if i % 3 == 2:
            d += align(13)
    d += op("HEAP_COLLECT", 1, 0) + op("HEAP_REALLOC", 31, 2, *large(400000))
    d += op("W_FREE", 32, 0, 0) + op("HEAP_COLLECT", 3, 1)
    d += op("HEAP_DELETE", 1) + op("HEAP_DESTROY", 2) + op("COLLECT", 1) + op("HEAP_DESTROY", 0)
    write("heaps", d)

    # pools: a small and a large object pool, objects from both threads, destroy with objects live
    d = op("POOL_NEW", 0, 0x62, 24, 3, 4)  # 24 bytes, 8-aligned, cache of 4, zeroed
    d += op("POOL_NEW", 1, 0x00, 0x00, 0x40, 0x00, 4)  # 16 KiB + 1, 16-aligned
    for i in range(20):
        d += op("POOL_ALLOC" if i % 2 else "W_POOL_ALLOC", 60 + i, i % 2)
    for i in range(0, 20, 3):
        d += op("POOL_FREE", 60 + i)
    d += op("W_FREE", 61, 0, 0) + op("W_FREE", 62, 0, 0) + op("POOL_STATS", 0) + op("POOL_STATS", 1)
    d += op("POOL_DESTROY", 1) + op("POOL_ALLOC", 90, 0)
    write("pools", d)

    # cross-thread: the worker allocates, frees ours, we free its, it exits, we free what it left
    d = b""
    for i in range(16):
        d += op("W_MALLOC", 100 + i, i % 5, *[tiny(32), small(2000), medium(40000), large(500000)][i % 4])
        if i % 5 == 1:
            d += align(12)
    for i in range(8):
        d += op("MALLOC", 120 + i, *cls(10 + 9 * i))
    for i in range(8):
        d += op("W_FREE", 120 + i, i, 3)
    d += op("W_REALLOC", 100, *medium(30000)) + op("W_MISUSE", 0, 100) + op("W_OWN", 2)
    d += op("W_RESTART", 0)
    for i in range(0, 16, 2):
        d += op("FREE", 100 + i, 0, 0)
    d += op("W_COLLECT", 1) + op("W_OWN", 1)
    write("threads", d)

    # bursts: fill pages of one class, free them from the other thread, then locally
    d = op("HEAP_NEW", 0)
    d += op("BURST_ALLOC", 0, *cls(30), 0, 63) + op("BURST_ALLOC", 64, *tiny(48), 1, 63)
    d += op("BURST_FREE", 0, 63, 0xC0) + op("BURST_FREE", 64, 63, 0x80)
    d += op("BURST_ALLOC", 128, *medium(16384), 0, 40) + op("BURST_FREE", 168, 40, 0x40)
    write("bursts", d)

    # the bulk set: thousands of blocks, freed in strides from either thread
    d = op("POOL_NEW", 0, 0x32, 32, 3, 0, 2)  # 32 bytes, 1 shard, cache of 2
    d += op("BULK_ALLOC", 0x96, *tiny(1), 0xa0, 0x0f)  # 4001 objects of pool 0, made by the worker
    d += op("BULK_FREE", 1, 1) + op("POOL_STATS", 0) + op("BULK_FREE", 0, 2)
    d += op("BULK_ALLOC", 0, *cls(4), 0xff, 0x0f) + op("BULK_FREE", 2 + 8, 1)  # 48 bytes, every 3rd freed remotely
    d += op("MALLOC", 3, *cls(4)) + op("BULK_FREE", 3, 0)
    d += op("HEAP_NEW", 1) + op("BULK_ALLOC", 0x44, *cls(30), 0x00, 0x02, 2) + op("HEAP_COLLECT", 2, 0)
    d += op("BULK_FREE", 1, 3) + op("HEAP_COLLECT", 2, 1) + op("HEAP_DESTROY", 1)
    d += op("BULK_ALLOC", 5, *small(2000), 0x00, 0x01) + op("W_RESTART", 0) + op("BULK_FREE", 0, 0)
    write("bulk", d)

    # options and the calls that must be refused
    d = b""
    for k in range(4):
        for v in range(4):
            d += op("OPTION", k, v) + op("MALLOC", 10 + v, *slices(3 + v)) + op("FREE", 10 + v, 0, 0)
    extra = {3: [1], 4: [1], 6: [1], 10: [40, 1, 0]}
    for k in range(12):
        d += op("MALLOC", 40, *small(77)) + op("REFUSED", 0, k, *extra.get(k, []))
    d += op("STATS", 0) + op("STATS", 1)
    write("options-refused", d)

    # a block in a mapping of its own, and around the 4 MiB segment size
    d = op("MALLOC", 1, *huge()) + op("REALLOC", 1, *large(6 << 20))
    d += op("MALLOC", 2, *segments(1, 0)) + op("REALLOC", 2, *segments(2, 65534)) + op("COLLECT", 1)
    write("big", d)


    # Regression: fw_malloc_aligned(0, alignment of 4 MiB or more) returned the
    # address just past its segment, where the free then wrote its link (a
    # fault, or another segment's header). First the default heap's check
    # (fw_heap_contains is false for such a block, whatever lies next to it);
    # then eight frees, each with a live block of a huge alignment in between
    # to move the next mapping, in case the check alone does not see it.
    d = b""
    for e in [22, 23, 24, 26]:
        d += op("ALIGNED", 5, *zero(), *align(e), 0) + op("HEAP_COLLECT", 0, 0) + op("FREE", 5, 0, 0)
    for i, e in enumerate([23, 24, 26, 23, 24, 26, 24, 26]):
        d += op("ALIGNED", 5, *zero(), *align(e), 0) + op("FREE", 5, 0, 0)
        d += op("ALIGNED", 10 + i, *tiny(2), *align(23 + i % 3), 0)
    (HERE / "corpus" / "regress-aligned-size0-huge-alignment").write_bytes(d)


if __name__ == "__main__":
    main()
