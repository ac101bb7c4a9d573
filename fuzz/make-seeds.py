#!/usr/bin/env python3
"""fuzz/make-seeds.py SHARED_DIR OUT_DIR: seed corpus for fuzz-gguf, made at
run time from the shared GGUF files (never committed):
  - prefixes of each file (header region and the first 4/16/64 KiB);
  - a small *valid* file per source: the header's KVs that fit in ~8 KiB
    copied byte for byte, plus up to four of its small tensors re-laid out;
  - one synthetic file with every value type, nested arrays and alignment 64.
"""
import glob
import os
import struct
import sys

FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
TYPE_SIZE = {0: (1, 4), 1: (1, 2), 30: (1, 2)}  # f32, f16, bf16: (block, bytes)


def skip_value(b, pos, t):
    if t in FIXED:
        return pos + FIXED[t]
    if t == 8:
        (n,) = struct.unpack_from("<Q", b, pos)
        return pos + 8 + n
    et, n = struct.unpack_from("<IQ", b, pos)
    pos += 12
    if et in FIXED:
        return pos + n * FIXED[et]
    for _ in range(n):
        pos = skip_value(b, pos, et)
    return pos


def s(x):
    x = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(x)) + x


def build(kv_blobs, tensors, align=32):
    """tensors: list of (name, dims, type, data bytes)."""
    out = bytearray(struct.pack("<IIQQ", 0x46554747, 3, len(tensors), len(kv_blobs)))
    for kb in kv_blobs:
        out += kb
    off = 0
    offs = []
    for name, dims, typ, data in tensors:
        offs.append(off)
        out += s(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
        out += struct.pack("<IQ", typ, off)
        off += (len(data) + align - 1) // align * align
    out += b"\0" * ((-len(out)) % align)
    for (name, dims, typ, data), o in zip(tensors, offs):
        out += data + b"\0" * ((-len(data)) % align)
    return bytes(out)


def reduced(b):
    _, _, nt, nk = struct.unpack_from("<IIQQ", b, 0)
    pos = 24
    kvs = []
    for _ in range(nk):
        start = pos
        (kl,) = struct.unpack_from("<Q", b, pos)
        pos += 8 + kl
        (t,) = struct.unpack_from("<I", b, pos)
        pos = skip_value(b, pos + 4, t)
        if pos - start <= 2048 and sum(map(len, kvs)) < 8192:
            kvs.append(b[start:pos])
    infos = []
    for _ in range(nt):
        (nl,) = struct.unpack_from("<Q", b, pos)
        name = b[pos + 8 : pos + 8 + nl]
        pos += 8 + nl
        (nd,) = struct.unpack_from("<I", b, pos)
        dims = struct.unpack_from("<%dQ" % nd, b, pos + 4)
        pos += 4 + 8 * nd
        typ, off = struct.unpack_from("<IQ", b, pos)
        pos += 12
        infos.append((name, dims, typ, off))
    data0 = pos + (-pos) % 32
    tensors = []
    for name, dims, typ, off in infos:
        if typ not in TYPE_SIZE or len(tensors) >= 4:
            continue
        n = 1
        for d in dims:
            n *= d
        nbytes = n * TYPE_SIZE[typ][1]
        if nbytes <= 1024:
            tensors.append((name, dims, typ, b[data0 + off : data0 + off + nbytes]))
    return build(kvs, tensors)


def synthetic():
    kv = []
    kv.append(s("general.alignment") + struct.pack("<II", 4, 64))
    kv.append(s("general.architecture") + struct.pack("<I", 8) + s("llama"))
    for t, fmt, v in [(0, "B", 7), (1, "b", -7), (2, "H", 700), (3, "h", -700), (5, "i", -70000),
                      (6, "f", 0.5), (7, "B", 1), (10, "Q", 1 << 40), (11, "q", -(1 << 40)),
                      (12, "d", 0.25)]:
        kv.append(s("t.scalar.%d" % t) + struct.pack("<I" + fmt, t, v))
    kv.append(s("t.strs") + struct.pack("<IIQ", 9, 8, 3) + s("a") + s("") + s("ccc"))
    inner = struct.pack("<IQ", 5, 2) + struct.pack("<ii", 1, -1)
    inner2 = struct.pack("<IQ", 8, 1) + s("x")
    kv.append(s("t.nested") + struct.pack("<IIQ", 9, 9, 2) + inner + inner2)
    kv.append(s("t.empty") + struct.pack("<IIQ", 9, 6, 0))
    tensors = [("a", (32,), 0, bytes(128)), ("b", (4, 2), 1, bytes(16)), ("c", (32, 1, 1, 2), 8, bytes(68))]
    return build(kv, [(n.encode(), d, t, x) for n, d, t, x in tensors], align=64)


def main():
    shared, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    files = sorted(glob.glob(os.path.join(shared, "models", "*.gguf")) +
                   glob.glob(os.path.join(shared, "fixtures", "vocab", "*.gguf")))
    n = 0
    for path in files:
        b = open(path, "rb").read()
        base = os.path.basename(path)
        for cut in (24, 64, 256, 4096, 16384, 65536):
            open(os.path.join(out, "%s.head%d" % (base, cut)), "wb").write(b[:cut])
            n += 1
        open(os.path.join(out, "%s.reduced" % base), "wb").write(reduced(b))
        n += 1
    open(os.path.join(out, "synthetic.gguf"), "wb").write(synthetic())
    print("seeds: %d files in %s" % (n + 1, out))


if __name__ == "__main__":
    main()
