"""test_tensorio_numpy.py: kvc's .npy and .safetensors readers and writers against numpy, bit for bit.

Files written by numpy itself (np.save for float16/32/64, C and Fortran order, little- and big-endian,
np.lib.format.write_array with version (2, 0) and (3, 0)) and .safetensors files written by a small writer
below (8-byte little-endian header length + JSON header + raw little-endian data; F16, BF16, F32, F64) are
read by `build/tests/test_tensorio --dump FILE [NAME]`, which prints "shape d0 d1 ...\\n" and the values as
raw float64; they must equal numpy's own conversion to float64 bit for bit (every finite float16 and
bfloat16 pattern included). Files numpy writes that kvc must refuse (int32, complex, NaN, 0-d, 5-d) must
fail with exit 2 and a one-line message. Round trips: kvc's npy_write gives byte for byte the file np.save
writes for the same float64 array, and its safetensors_write output parses with the writer's own format.
Run from the project root with Debian's numpy (/usr/bin/python3); KVC_TESTBIN overrides build/tests.
Prints PASS/FAIL per check; exits 1 on any failure.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

import checks  # tests/checks.py: PASS/FAIL lines
from checks import report as result

BIN = os.path.join(os.environ.get("KVC_TESTBIN", "build/tests"), "test_tensorio")  # make sanitize: build-san/tests


def run(*args):
    return subprocess.run([BIN] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def dump(path, name=None):
    """(shape, float64 array) or raises RuntimeError with kvc's message."""
    proc = run("--dump", path, *([name] if name is not None else []))
    if proc.returncode != 0:
        raise RuntimeError("exit %d: %s" % (proc.returncode, proc.stderr.decode().strip()))
    head, _, body = proc.stdout.partition(b"\n")
    words = head.decode().split()
    assert words[0] == "shape", head
    shape = tuple(int(w) for w in words[1:])
    return shape, np.frombuffer(body, dtype="<f8").reshape(shape)


def compare(got, want):
    """None when got (float64) equals want converted by numpy to float64, bit for bit; else a message."""
    shape, arr = got
    want = np.asarray(want)
    if shape != want.shape:
        return "shape %s, numpy %s" % (shape, want.shape)
    ref = np.ascontiguousarray(want.astype(np.float64))
    g, w = arr.reshape(-1).view(np.uint64), ref.reshape(-1).view(np.uint64)
    bad = np.flatnonzero(g != w)
    if bad.size:
        i = int(bad[0])
        return "%d mismatches, first at flat index %d: kvc %r, numpy %r" % (
            bad.size, i, float(arr.reshape(-1)[i]), float(ref.reshape(-1)[i]))
    return None


def check_read(name, path, want, tname=None):
    try:
        result(name, compare(dump(path, tname), want))
    except RuntimeError as e:
        result(name, str(e))


def check_refused(name, path, needle, tname=None):
    proc = run("--dump", path, *([tname] if tname is not None else []))
    msg = proc.stderr.decode()
    if proc.returncode != 2:
        result(name, "exit %d, want 2 (stderr %r)" % (proc.returncode, msg))
    elif proc.stdout:
        result(name, "wrote %d bytes to stdout" % len(proc.stdout))
    elif msg.count("\n") != 1 or not msg.startswith(path + ":") or needle not in msg:
        result(name, "message %r lacks %r or is not one line naming the file" % (msg, needle))
    else:
        result(name, None)


# ---- safetensors writer (the format: u64 LE header length, JSON header, raw LE data) ----

def bf16_bits(x):
    """float32 -> bfloat16 bit patterns, round to nearest even (finite inputs)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f64(bits):
    with np.errstate(invalid="ignore"):  # NaN patterns
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def write_safetensors(path, tensors, metadata=None, reverse=False):
    """tensors: list of (name, dtype, array) with dtype F16/BF16/F32/F64 (BF16: uint16 bit patterns)."""
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, arr in tensors:
        raw = {"F16": lambda a: a.astype("<f2"), "BF16": lambda a: a.astype("<u2"),
               "F32": lambda a: a.astype("<f4"), "F64": lambda a: a.astype("<f8")}[dtype](arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    items = list(header.items())
    if reverse:
        items.reverse()
    text = json.dumps(dict(items)).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    """An independent reader for what kvc writes: {name: float64 array}."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode())
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        dt = {"F32": "<f4", "F64": "<f8"}[e["dtype"]]
        out[name] = (np.frombuffer(data[8 + n + b:8 + n + end], dtype=dt).reshape(e["shape"]), e["dtype"])
    return out


def main():
    with tempfile.TemporaryDirectory(prefix="kvc_tensorio_np_") as tmp:
        run_checks(tmp)
    return checks.status()


def run_checks(tmp):
    rng = np.random.default_rng(20240601)
    p = lambda name: os.path.join(tmp, name)

    # .npy from np.save: every dtype, the three kvc shapes, scale spread to reach subnormals of f2/f4.
    for dt in ("<f2", "<f4", "<f8"):
        for shape in ((7, 5), (3, 7, 5), (2, 3, 7, 5)):
            a = (rng.normal(size=shape) * np.exp2(rng.integers(-30, 10, size=shape))).astype(dt)
            name = "npy_save_%s_%dd" % (dt[1:], len(shape))
            np.save(p(name + ".npy"), a)
            check_read(name, p(name + ".npy"), a)

    # Every finite float16 pattern.
    h = np.arange(65536, dtype=np.uint16).view(np.float16)
    h = h[np.isfinite(h)].reshape(-1, 8)
    np.save(p("f16_all.npy"), h)
    check_read("npy_f16_all_finite_patterns", p("f16_all.npy"), h)

    # Fortran order and big-endian, as numpy writes them.
    for dt in ("<f4", ">f4", ">f8", ">f2"):
        for shape in ((6, 4), (2, 3, 4), (2, 3, 4, 5)):
            a = rng.normal(size=shape).astype(dt)
            name = "npy_fortran_%s_%dd" % (dt.replace(">", "be_").replace("<", ""), len(shape))
            np.save(p(name + ".npy"), np.asfortranarray(a))
            check_read(name, p(name + ".npy"), a)
    a = rng.normal(size=(5, 3)).astype(">f8")
    np.save(p("be.npy"), a)
    check_read("npy_big_endian_f8_c_order", p("be.npy"), a)

    # Header versions 2.0 and 3.0.
    for version in ((2, 0), (3, 0)):
        for dt in ("<f2", "<f4", "<f8"):
            a = rng.normal(size=(4, 6)).astype(dt)
            name = "npy_v%d_%s" % (version[0], dt[1:])
            with open(p(name + ".npy"), "wb") as f:
                np.lib.format.write_array(f, a, version=version)
            check_read(name, p(name + ".npy"), a)

    # What numpy writes but kvc refuses.
    refuse = [
        ("npy_refuse_i4", np.arange(6, dtype="<i4"), "unsupported dtype (got '<i4'"),
        ("npy_refuse_c16", np.zeros(3, dtype="<c16"), "unsupported dtype (got '<c16'"),
        ("npy_refuse_f16_longdouble", np.zeros(3, dtype=np.longdouble), "unsupported dtype"),
        ("npy_refuse_bool", np.zeros(3, dtype=bool), "unsupported dtype (got '|b1'"),
        ("npy_refuse_scalar", np.float64(1.0), "0-dimensional"),
        ("npy_refuse_5d", np.zeros((1, 1, 1, 1, 2)), "more than 4 dimensions"),
        ("npy_refuse_structured", np.zeros(2, dtype=[("a", "<f4")]), "structured"),
        ("npy_refuse_nan", np.array([[1.0, 2.0], [np.nan, 4.0]]), "flat index 2 (index [1, 0]) is not finite (got nan)"),
        ("npy_refuse_inf_f2", np.array([1, -np.inf], dtype="<f2"), "flat index 1 (index [1]) is not finite (got -inf)"),
    ]
    for name, arr, needle in refuse:
        np.save(p(name + ".npy"), arr)
        check_refused(name, p(name + ".npy"), needle)
    np.save(p("trunc.npy"), np.zeros((10, 100), dtype="<f4"))
    with open(p("trunc.npy"), "r+b") as f:
        f.truncate(os.path.getsize(p("trunc.npy")) - 4)
    check_refused("npy_refuse_truncated", p("trunc.npy"), "file is truncated: header says shape (10, 100) of <f4")
    with open(p("trunc.npy"), "ab") as f:
        f.write(b"\0" * 12)
    check_refused("npy_refuse_trailing", p("trunc.npy"), "trailing bytes after the data")

    # .safetensors from the writer above.
    a64 = rng.normal(size=(3, 4, 5))
    a32 = (rng.normal(size=(2, 3, 4, 5)) * np.exp2(rng.integers(-140, 10, size=(2, 3, 4, 5)))).astype("<f4")
    a16 = (rng.normal(size=(6, 5)) * 100).astype("<f2")
    abf = bf16_bits(rng.normal(size=(4, 7)).astype(np.float32)).reshape(4, 7)
    tensors = [("k", "F64", a64), ("v", "F32", a32), ("q", "F16", a16), ("b", "BF16", abf)]
    write_safetensors(p("multi.safetensors"), tensors, metadata={"format": "pt"})
    check_read("st_f64", p("multi.safetensors"), a64, "k")
    check_read("st_f32_4d_subnormals", p("multi.safetensors"), a32, "v")
    check_read("st_f16", p("multi.safetensors"), a16, "q")
    check_read("st_bf16", p("multi.safetensors"), bf16_to_f64(abf), "b")
    write_safetensors(p("rev.safetensors"), tensors, reverse=True)
    check_read("st_header_order_differs_from_data_order", p("rev.safetensors"), a32, "v")
    check_refused("st_refuse_no_name", p("multi.safetensors"), 'choose one by name (got none; available: "b", "k", "q", "v")')
    check_refused("st_refuse_unknown_name", p("multi.safetensors"), 'did you mean "k"?', "kk")

    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    finite = np.isfinite(bf16_to_f64(bits))
    write_safetensors(p("bf16_all.safetensors"), [("x", "BF16", bits[finite])])
    check_read("st_bf16_all_finite_patterns", p("bf16_all.safetensors"), bf16_to_f64(bits[finite]))
    write_safetensors(p("f16_all.safetensors"), [("x", "F16", h)])
    check_read("st_f16_all_finite_patterns", p("f16_all.safetensors"), h)
    write_safetensors(p("nan.safetensors"), [("x", "F32", np.array([0.0, np.inf], dtype="<f4"))])
    check_refused("st_refuse_inf", p("nan.safetensors"), 'tensor "x": value at flat index 1 (index [1]) is not finite')
    write_safetensors(p("i32.safetensors"), [("x", "F32", np.zeros(2, dtype="<f4"))])
    with open(p("i32.safetensors"), "r+b") as f:
        data = f.read().replace(b'"F32"', b'"I32"')
        f.seek(0)
        f.write(data)
    check_refused("st_refuse_i32", p("i32.safetensors"), 'unsupported dtype (got "I32"')

    # Round trips through kvc's writers.
    for dt in ("<f2", "<f4", ">f8"):
        a = rng.normal(size=(3, 5, 7)).astype(dt)
        src, out = p("src_%s.npy" % dt[1:]), p("out_%s.npy" % dt[1:])
        np.save(src, np.asfortranarray(a))
        proc = run("--write-npy", src, out)
        name = "npy_write_round_trip_%s" % dt.replace(">", "be_").replace("<", "")
        if proc.returncode != 0:
            result(name, proc.stderr.decode().strip())
            continue
        back = np.load(out)
        result(name, compare((back.shape, back), a) if back.dtype == np.dtype("<f8") else "dtype %s" % back.dtype)
        np.save(p("want.npy"), a.astype(np.float64))
        with open(out, "rb") as f1, open(p("want.npy"), "rb") as f2:
            same = f1.read() == f2.read()
        result(name + "_bytes_equal_np_save", None if same else "file differs from np.save's")
    for shape in ((1,), (12345,), (2, 1, 3), (1, 2, 3, 4), (10**6 + 1, 0)):
        a = rng.normal(size=shape)
        np.save(p("s.npy"), a)
        run("--write-npy", p("s.npy"), p("o.npy"))
        with open(p("o.npy"), "rb") as f1, open(p("s.npy"), "rb") as f2:
            same = f1.read() == f2.read()
        result("npy_write_bytes_equal_np_save_%s" % "x".join(map(str, shape)), None if same else "differs")

    for dt in ("F64", "F32"):
        src = p("multi.safetensors")
        out = p("out_%s.safetensors" % dt)
        proc = run("--write-st", src, out, dt, "v")
        name = "st_write_%s" % dt
        if proc.returncode != 0:
            result(name, proc.stderr.decode().strip())
            continue
        got = read_safetensors(out)
        arr, gdt = got["t"]
        want = a32.astype(np.float64) if dt == "F64" else a32
        err = None if gdt == dt else "dtype %s" % gdt
        result(name, err or compare((arr.shape, arr.astype(np.float64)), want))
        check_read(name + "_read_back", out, a32)



if __name__ == "__main__":
    sys.exit(main())
