#!/usr/bin/python3
"""test_files.py: data.source "files" and kvc synth, black box (README "Data from files").

1. Round trips: `kvc synth CFG -o DIR` (npy and safetensors) then `kvc run DIR/files.json` prints exactly the
   CSV of `kvc run CFG` but the id column, on configs/lesson.json and on a multi-layer GQA config with pre-RoPE
   keys, outlier channels and observation queries (also --per-head).
2. Files written by numpy (np.save: f2, f4, f8, v1 and v2 headers, Fortran order, big-endian, 2-D/3-D/4-D and a
   single (D,) query) and by the small .safetensors writer below (F16, BF16, F32, F64) load to the same metrics
   as the synthetic original: exactly for float64, and for the narrower types the numpy oracle
   (tests/oracle.py, run_arrays on the rounded arrays) within relative 1e-9 (bytes exact).
3. Bad files and shapes through `kvc run`: exit 2, one line "kvc: <where>: <what> (got <value>)" on stderr
   naming the file or the config key, nothing on stdout.

Run from the project root: /usr/bin/python3 tests/test_files.py  (KVC=path overrides ./kvc). Prints
"PASS <name>" / "FAIL <name>: <why>"; exits 1 on any failure. Writes only inside a temporary directory.
"""
import csv
import io
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

import checks  # tests/checks.py: PASS/FAIL lines
from checks import report

KVC = os.environ.get("KVC", "./kvc")
TMP = tempfile.mkdtemp(prefix="kvc-files-")
ERR_RE = re.compile(r"^kvc: (.+): (.+) \(got (.*)\)$")

MULTI = {
    "seed": 7,
    "data": {
        "layers": 2, "kv_heads": 2, "q_heads": 4, "tokens": 96, "head_dim": 16,
        "keys": {"generator": "lowrank", "rank": 6, "scale": 0.5, "noise": 0.1,
                 "outlier_channels": {"count": 2, "scale": [10, 50]}},
        "values": {"generator": "normal"},
        "rope": {"base": 10000, "cache": "pre"},
        "sinks": {"tokens": 2, "share": 0.3},
        "query": {"generator": "look_back", "count": 3, "weight": 0.5, "noise": 0.5, "bias": 0.5},
        "observe": {"window": 8},
    },
    "metrics": {"topk_recall_k": 8},
    "experiments": [
        {"label": "q{bits} {axis}", "method": "quantize", "bits": [4, 8], "axis": ["token", "channel"]},
        {"method": "sink_window", "sinks": 2, "window": 30},
        {"method": "topk_attention", "budget": 24},
        {"method": "lowrank", "rank": [4, 12], "apply_to": "kv"},
    ],
}


def run(*args):
    p = subprocess.run([KVC] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def write_json(path, obj):
    with open(path, "w") as fh:
        json.dump(obj, fh)
    return path


def csv_rows(text):
    """CSV rows without the id column (ids hash the config text, which differs)."""
    rows = list(csv.reader(io.StringIO(text)))
    assert rows and rows[0][-1] == "id", rows[:1]
    return [r[:-1] for r in rows]


def kvc_csv(cfg_path, *extra):
    rc, out, err = run("run", cfg_path, "--format", "csv", "--no-timing", *extra)   # rows compared exactly
    if rc != 0:
        raise RuntimeError("kvc run %s: exit %d: %s" % (cfg_path, rc, err.strip()))
    return csv_rows(out)


def same_csv(a, b):
    if len(a) != len(b):
        return "%d rows vs %d" % (len(a), len(b))
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return "row %d differs: %s vs %s" % (i, x, y)
    return None


def close_to_oracle(rows, want):
    """kvc CSV rows (header first, id dropped) against oracle dicts: bytes exact, numbers within rel 1e-9."""
    head, body = rows[0], rows[1:]
    if len(body) != len(want):
        return "%d rows, oracle %d" % (len(body), len(want))
    for i, (r, w) in enumerate(zip(body, want)):
        for c, cell in zip(head, r):
            v = w.get(c)
            if c in ("label", "method", "layer", "head"):
                if str(v) != cell:
                    return "row %d %s: %r vs oracle %r" % (i, c, cell, v)
                continue
            if v is None or cell == "":
                if not (v is None and cell == ""):
                    return "row %d %s: %r vs oracle %r" % (i, c, cell, v)
                continue
            x = float(cell)
            if c in ("bytes", "baseline_bytes"):
                if x != v:
                    return "row %d %s: %r vs oracle %r" % (i, c, cell, v)
            elif not (x == v or abs(x - v) <= 1e-9 * abs(v) or (abs(v) < 1e-12 and abs(x) < 1e-12)):
                return "row %d %s: %r vs oracle %r" % (i, c, cell, v)
    return None


def check(name, fn):
    try:
        report(name, fn())
    except Exception as e:  # a crash of one check is its failure, not the end of the run
        report(name, "%s: %s" % (type(e).__name__, e))


# ---------------------------------------------------------------- .safetensors writer (the format, by hand)

def st_write(path, tensors):
    """tensors: list of (name, dtype, array); dtypes F16, BF16, F32, F64 (BF16: round to nearest even)."""
    hdr, buf = {}, b""
    for name, dtype, a in tensors:
        a = np.ascontiguousarray(a, dtype=np.float64)
        if dtype == "BF16":
            raw = bf16_bits(a).astype("<u2").tobytes()
        else:
            raw = a.astype({"F16": "<f2", "F32": "<f4", "F64": "<f8"}[dtype]).tobytes()
        hdr[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [len(buf), len(buf) + len(raw)]}
        buf += raw
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)) + h + buf)
    return path


def bf16_bits(a):
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_round(a):
    return (bf16_bits(np.asarray(a)).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def np_save(path, a, dtype="<f8", version=None, fortran=False):
    a = np.asarray(a).astype(dtype)
    if fortran:
        a = np.asfortranarray(a)
    if version is None:
        np.save(path, a)
    else:
        with open(path, "wb") as fh:
            np.lib.format.write_array(fh, a, version=version)
    return path


# ---------------------------------------------------------------- 1. round trips through kvc synth

def synth(cfg_path, out, *extra):
    rc, stdout, err = run("synth", cfg_path, "-o", out, *extra)
    if rc != 0 or stdout:
        raise RuntimeError("kvc synth: exit %d, stdout %r, stderr %s" % (rc, stdout, err.strip()))
    return os.path.join(out, "files.json")


def round_trips():
    multi = write_json(os.path.join(TMP, "multi.json"), MULTI)
    for name, cfg in (("lesson", "configs/lesson.json"), ("multi", multi)):
        for fmt in ("npy", "safetensors"):
            out = os.path.join(TMP, "rt-%s-%s" % (name, fmt))
            files = synth(cfg, out, "--format", fmt)
            want = sorted(["keys.npy", "values.npy", "queries.npy"] + (["observe.npy"] if name == "multi" else [])
                          if fmt == "npy" else ["cache.safetensors"]) + ["files.json"]
            check("synth-%s-%s-files" % (name, fmt),
                  lambda: None if sorted(os.listdir(out)) == sorted(want) else "files %s" % sorted(os.listdir(out)))
            check("roundtrip-%s-%s" % (name, fmt), lambda: same_csv(kvc_csv(cfg), kvc_csv(files)))
            if name == "multi":
                check("roundtrip-%s-%s-per-head" % (name, fmt),
                      lambda: same_csv(kvc_csv(cfg, "--per-head"), kvc_csv(files, "--per-head")))
    # what synth wrote, read by numpy: 4-D float64, pre-RoPE keys, the queries as attention reads them
    d = oracle.make_data(MULTI)
    out = os.path.join(TMP, "rt-multi-npy")

    def arrays_equal():
        for name, want in (("keys", d.K), ("values", d.V), ("queries", d.Q), ("observe", d.O)):
            got = np.load(os.path.join(out, name + ".npy"))
            if got.dtype != np.float64 or got.shape != want.shape:
                return "%s: %s %s, oracle %s" % (name, got.dtype, got.shape, want.shape)
            if not np.allclose(got, want, rtol=1e-9, atol=1e-12):
                return "%s: values differ from the oracle's data" % name
        return None
    check("synth-arrays-match-oracle", arrays_equal)

    def files_json():
        with open(os.path.join(out, "files.json")) as fh:
            j = json.load(fh)
        want_data = {"source": "files",
                     "files": {"keys": "keys.npy", "values": "values.npy", "queries": "queries.npy",
                               "observe": "observe.npy"},
                     "rope": {"base": 10000, "dims": 16, "style": "half", "cache": "pre"}}
        oc = j["data"].pop("outlier_channels", None)
        mask = np.zeros((2, 16), dtype=bool)
        for l, chans in enumerate(oc if oc and isinstance(oc[0], list) else [oc, oc]):
            mask[l, chans] = True
        if j["data"] != want_data:
            return "data block %s" % j["data"]
        if not (mask == d.outlier_mask).all():
            return "outlier_channels %s, oracle mask %s" % (oc, d.outlier_mask.nonzero())
        if j["seed"] != 7 or j["metrics"] != MULTI["metrics"] or j["experiments"] != MULTI["experiments"]:
            return "seed, metrics or experiments changed: %s" % j
        return None
    check("synth-files-json", files_json)
    # --set values are applied before synth and carried into files.json
    sets = ["--set", "data.tokens=300", "--set", "experiments.1.window=20"]
    check("roundtrip-with-set", lambda: same_csv(kvc_csv("configs/lesson.json", *sets),
                                                 kvc_csv(synth("configs/lesson.json", os.path.join(TMP, "rt-set"),
                                                               *sets))))
    check("synth-list", lambda: None if run("run", os.path.join(TMP, "rt-set", "files.json"), "--list")[0] == 0
          else "kvc run --list failed")


# ---------------------------------------------------------------- 2. files written by numpy and by hand

def from_numpy():
    rt = os.path.join(TMP, "rt-lesson-npy")
    K, V, Q = (np.load(os.path.join(rt, n + ".npy")) for n in ("keys", "values", "queries"))
    with open("configs/lesson.json") as fh:
        lesson = json.load(fh)
    exps = lesson["experiments"]
    base = kvc_csv("configs/lesson.json")
    d = os.path.join(TMP, "np")
    os.mkdir(d)

    def files_cfg(name, files, **data):
        data = dict({"source": "files", "files": files}, **data)
        return write_json(os.path.join(d, name + ".json"), {"seed": 42, "data": data, "experiments": exps})

    # float64: exactly the synthetic run, whatever the header version, order or rank of the arrays
    exact = {
        "f8-v1-2d": (K[0, 0], V[0, 0], Q[0, 0, 0], {}),
        "f8-v2-3d": (K[0], V[0], Q[0, 0], {"version": (2, 0)}),
        "f8-v3-4d": (K, V, Q, {"version": (3, 0)}),
        "f8-fortran": (K[0, 0], V[0, 0], Q[0, 0], {"fortran": True}),
        "f8-big-endian": (K[0, 0], V[0, 0], Q[0, 0], {"dtype": ">f8"}),
    }
    for name, (k, v, q, kw) in exact.items():
        paths = {r: np_save(os.path.join(d, "%s-%s.npy" % (name, r)), a, **kw)
                 for r, a in (("keys", k), ("values", v), ("queries", q))}
        cfg = files_cfg(name, {r: os.path.basename(p) for r, p in paths.items()})
        check("numpy-" + name, lambda: same_csv(base, kvc_csv(cfg)))
    st = st_write(os.path.join(d, "f64.safetensors"), [("k", "F64", K[0, 0]), ("v", "F64", V[0, 0]),
                                                       ("q", "F64", Q[0, 0])])
    cfg = files_cfg("st-f64", {r: {"path": os.path.basename(st), "name": n} for r, n in
                               (("keys", "k"), ("values", "v"), ("queries", "q"))})
    check("safetensors-F64", lambda: same_csv(base, kvc_csv(cfg)))

    # narrower types: the oracle on the rounded arrays
    rounders = {"f4": lambda a: a.astype(np.float32).astype(np.float64),
                "f2": lambda a: a.astype(np.float16).astype(np.float64)}
    for dt in ("f4", "f2"):
        for ver in ((1, 0), (2, 0)):
            name = "%s-v%d" % (dt, ver[0])
            paths = {r: np_save(os.path.join(d, "%s-%s.npy" % (name, r)), a, dtype="<" + dt, version=ver)
                     for r, a in (("keys", K), ("values", V), ("queries", Q))}
            cfg = files_cfg(name, {r: os.path.basename(p) for r, p in paths.items()})
            rd = rounders[dt]
            check("numpy-" + name, lambda: close_to_oracle(kvc_csv(cfg), oracle.run_arrays(
                rd(K), rd(V), rd(Q), exps)))
    rounders = {"F32": rounders["f4"], "F16": rounders["f2"], "BF16": bf16_round}
    for dt, rd in rounders.items():
        st = st_write(os.path.join(d, "%s.safetensors" % dt), [("layer0.k", dt, K), ("layer0.v", dt, V),
                                                              ("layer0.q", dt, Q)])
        cfg = files_cfg("st-" + dt, {r: {"path": os.path.basename(st), "name": "layer0." + n}
                                     for r, n in (("keys", "k"), ("values", "v"), ("queries", "q"))})
        check("safetensors-" + dt, lambda: close_to_oracle(kvc_csv(cfg), oracle.run_arrays(rd(K), rd(V), rd(Q),
                                                                                           exps)))

    # multi-head: the oracle's own data saved with numpy as float32, pre-RoPE keys, GQA, observation queries
    m = oracle.make_data(MULTI)
    f32 = rounders["F32"]
    paths = {r: np_save(os.path.join(d, "m-%s.npy" % r), a, dtype="<f4")
             for r, a in (("keys", m.K), ("values", m.V), ("queries", m.Q), ("observe", m.O))}
    chans = [list(map(int, np.flatnonzero(m.outlier_mask[l]))) for l in range(2)]
    cfg = write_json(os.path.join(d, "m.json"), {
        "data": {"source": "files", "files": {r: os.path.basename(p) for r, p in paths.items()},
                 "rope": MULTI["data"]["rope"], "outlier_channels": chans},
        "metrics": MULTI["metrics"], "experiments": MULTI["experiments"]})
    for ph in (False, True):
        check("numpy-multi-f4" + ("-per-head" if ph else ""), lambda: close_to_oracle(
            kvc_csv(cfg, *(["--per-head"] if ph else [])),
            oracle.run_arrays(f32(m.K), f32(m.V), f32(m.Q), MULTI["experiments"], O=f32(m.O),
                              rope=MULTI["data"]["rope"], outlier_channels=chans, metrics=MULTI["metrics"],
                              per_head=ph)))
    # the oracle reads a files config itself, too (np.load and its own .safetensors reader)
    check("oracle-reads-files-config", lambda: close_to_oracle(
        kvc_csv(cfg), oracle.run_config(json.load(open(cfg)), cfg_dir=d)))

    # paths are relative to the config file's directory, whatever the working directory
    sub = os.path.join(TMP, "np", "sub")
    os.mkdir(sub)
    rel = write_json(os.path.join(sub, "rel.json"), {
        "seed": 42, "data": {"source": "files", "files": {"keys": "../f8-v1-2d-keys.npy",
                                                          "values": "../f8-v1-2d-values.npy",
                                                          "queries": "../f8-v1-2d-queries.npy"}},
        "experiments": exps})

    def relative():
        p = subprocess.run([os.path.abspath(KVC), "run", "sub/rel.json", "--format", "csv", "--no-timing"], cwd=d,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if p.returncode != 0:
            return "exit %d: %s" % (p.returncode, p.stderr.decode().strip())
        return same_csv(base, csv_rows(p.stdout.decode()))
    check("paths-relative-to-config", relative)
    check("set-file-path", lambda: same_csv(base, kvc_csv(
        rel, "--set", 'data.files.queries="../f8-v2-3d-queries.npy"')))


# ---------------------------------------------------------------- 3. bad files and shapes

def npy_bytes(header, data=b"", version=(1, 0)):
    h = header.encode("latin1")
    fmt = "<H" if version[0] == 1 else "<I"
    pre = 6 + 2 + struct.calcsize(fmt)
    h += b" " * ((-(pre + len(h) + 1)) % 64) + b"\n"
    return b"\x93NUMPY" + bytes(version) + struct.pack(fmt, len(h)) + h + data


def bad_cases():
    d = os.path.join(TMP, "bad")
    os.mkdir(d)
    T, D = 8, 4
    k = np.arange(T * D, dtype=np.float64).reshape(T, D) / 7
    good = {"k": k, "v": k[::-1].copy(), "q": k[:2] * 0.5}
    for n, a in good.items():
        np.save(os.path.join(d, n + ".npy"), a)
    raw = open(os.path.join(d, "k.npy"), "rb").read()

    def put(name, data):
        with open(os.path.join(d, name), "wb") as fh:
            fh.write(data)
        return name

    nan = k.copy()
    nan[2, 1] = np.nan
    inf = k.astype(np.float32)
    inf[7, 3] = -np.inf
    files = {
        "truncated.npy": raw[:-8],
        "header-longer.npy": raw[:8] + struct.pack("<H", 5000) + raw[10:],
        "wrong-magic.npy": b"\x93NUMPX" + raw[6:],
        "int32.npy": npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (8, 4), }", b"\0" * 128),
        "overflow.npy": npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"),
        "zero.npy": npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 4), }"),
    }
    for n, b in files.items():
        put(n, b)
    with open(os.path.join(d, "big.npy"), "wb") as fh:   # 2^27 + 2^14 values; sparse, so no disk is used
        h = npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (16384, 8193), }")
        fh.write(h)
        fh.truncate(len(h) + 16384 * 8193 * 8)
    np.save(os.path.join(d, "nan.npy"), nan)
    np.save(os.path.join(d, "inf-f4.npy"), inf)
    for n, a in (("k-5x4", k[:5]), ("k-8x3", k[:, :3]), ("q-3", good["q"][:, :3]), ("k-1d", k[0]),
                 ("k-2x2x8x4", np.stack([np.stack([k, k])] * 2)), ("q-3x2x4", np.stack([good["q"]] * 3)),
                 ("o-9", np.zeros((9, 4)) + 0.1), ("o-2x2x4", np.stack([good["q"]] * 2)),
                 ("k-3x8x4", np.stack([k] * 3)), ("k-2x8x4", np.stack([k] * 2)), ("q-2x8x2x4", np.stack([np.stack([good["q"]] * 8)] * 2))):
        np.save(os.path.join(d, n + ".npy"), a)
    np.save(os.path.join(d, "huge-k.npy"), np.full((T, D), 1e160))
    np.save(os.path.join(d, "huge-q.npy"), np.full((2, D), 1e160))
    st_write(os.path.join(d, "two.safetensors"), [("k", "F32", k), ("v", "F32", good["v"])])
    with open(os.path.join(d, "i32.safetensors"), "wb") as fh:
        h = json.dumps({"k": {"dtype": "I32", "shape": [8, 4], "data_offsets": [0, 128]}}).encode()
        h += b" " * (-len(h) % 8)
        fh.write(struct.pack("<Q", len(h)) + h + b"\0" * 128)
    with open(os.path.join(d, "st-overflow.safetensors"), "wb") as fh:
        h = json.dumps({"k": {"dtype": "F64", "shape": [2 ** 40, 2 ** 40, 2 ** 40], "data_offsets": [0, 8]}}).encode()
        h += b" " * (-len(h) % 8)
        fh.write(struct.pack("<Q", len(h)) + h + b"\0" * 8)
    with open(os.path.join(d, "st-header-longer.safetensors"), "wb") as fh:
        fh.write(struct.pack("<Q", 4096) + b"{}")
    os.mkdir(os.path.join(d, "adir.npy"))

    # (name, files or whole data block, where (regex; {cfg} and {d} expanded), what (regex), extra run args)
    cases = [
        ("truncated", {"keys": "truncated.npy"}, "{d}/truncated.npy", "file is truncated"),
        ("header-longer-than-file", {"keys": "header-longer.npy"}, "{d}/header-longer.npy",
         "header length runs past the end of the file"),
        ("wrong-magic", {"keys": "wrong-magic.npy"}, "{d}/wrong-magic.npy", "not a .npy file"),
        ("unsupported-dtype-npy", {"values": "int32.npy"}, "{d}/int32.npy", "unsupported dtype"),
        ("unsupported-dtype-safetensors", {"keys": "i32.safetensors"}, "{d}/i32.safetensors: tensor \"k\"",
         "unsupported dtype"),
        ("shape-overflow-npy", {"keys": "overflow.npy"}, "{d}/overflow.npy", "more values than fit in memory"),
        ("shape-overflow-safetensors", {"keys": "st-overflow.safetensors"},
         "{d}/st-overflow.safetensors: tensor \"k\"", "more values than fit in memory"),
        ("too-many-values", {"keys": "big.npy"}, "{d}/big.npy", "tensor too large"),
        ("header-longer-safetensors", {"keys": "st-header-longer.safetensors"}, "{d}/st-header-longer.safetensors",
         "header length runs past the end of the file"),
        ("nan", {"keys": "nan.npy"}, "{d}/nan.npy", r"flat index 9 \(index \[2, 1\]\) is not finite"),
        ("inf-f4-in-queries", {"queries": "inf-f4.npy"}, "{d}/inf-f4.npy", "flat index 31 .*is not finite"),
        ("missing-file", {"keys": "nope.npy"}, "{d}/nope.npy", "cannot open"),
        ("directory", {"keys": "adir.npy"}, "{d}/adir.npy", "not a regular file"),
        ("two-tensors-no-name", {"keys": "two.safetensors"}, "{d}/two.safetensors", "choose one by name"),
        ("unknown-tensor-name", {"keys": {"path": "two.safetensors", "name": "kk"}},
         "{d}/two.safetensors.*", "no tensor named \"kk\""),
        ("name-for-npy", {"keys": {"path": "k.npy", "name": "k"}}, "{d}/k.npy", "tensor names are for .safetensors"),
        ("values-tokens-differ", {"values": "k-5x4.npy"}, "{cfg}: data.files.values",
         r"shape \(5, 4\) disagrees with data.files.keys \(8, 4\): tokens 5 != 8"),
        ("values-head-dim-differs", {"values": "k-8x3.npy"}, "{cfg}: data.files.values",
         r"disagrees with data.files.keys \(8, 4\): head_dim 3 != 4"),
        ("values-layers-differ", {"values": "k-3x8x4.npy"}, "{cfg}: data.files.values", "kv_heads 3 != 1"),
        ("queries-head-dim-differs", {"queries": "q-3.npy"}, "{cfg}: data.files.queries", "head_dim 3 != 4"),
        ("queries-layers-differ", {"queries": "q-2x8x2x4.npy"}, "{cfg}: data.files.queries", "layers 2 != 1"),
        ("queries-gqa-not-multiple", {"keys": "k-2x8x4.npy", "values": "k-2x8x4.npy", "queries": "q-3x2x4.npy"},
         "{cfg}: data.files.queries", "q_heads 3 is not a multiple of kv_heads 2"),
        ("queries-3d-vs-keys-4d", {"keys": "k-2x2x8x4.npy", "values": "k-2x2x8x4.npy", "queries": "q-3x2x4.npy"},
         "{cfg}: data.files.queries", "layers 1 != 2"),
        ("observe-more-than-tokens", {"observe": "o-9.npy"}, "{cfg}: data.files.observe",
         "9 observation queries but 8 tokens"),
        ("observe-heads-differ", {"queries": "q-3x2x4.npy", "keys": "k-3x8x4.npy", "values": "k-3x8x4.npy",
                                  "observe": "o-2x2x4.npy"}, "{cfg}: data.files.observe",
         r"disagrees with data.files.queries \(3, 2, 4\): q_heads 2 != 3"),
        ("keys-1d", {"keys": "k-1d.npy", "values": None, "queries": None}, "{cfg}: data.files.keys", "1 dimension"),
        ("zero-dimension", {"keys": "zero.npy"}, "{cfg}: data.files.keys", "dimension of 0"),
        ("queries-without-values", {"values": None}, "{cfg}: data.files.queries", "need data.files.values"),
        ("keys-missing", {"keys": None}, "{cfg}: data.files.keys", "missing required key"),
        ("unknown-role", {"query": "q.npy"}, "{cfg}: data.files.query", "unknown key; did you mean \"queries\""),
        ("synthetic-key-with-files", {"@data": {"tokens": 8}}, "{cfg}: data.tokens",
         "unknown key with \"source\": \"files\""),
        ("rope-post-with-files", {"@data": {"rope": {"cache": "post"}}}, "{cfg}: data.rope.cache", "\"pre\""),
        ("outlier-channel-range", {"@data": {"outlier_channels": [4]}}, "{cfg}: data.outlier_channels.0",
         r"must be in 0\.\.3"),
        ("rank-after-loading", {"@exp": {"method": "lowrank", "rank": 5}}, "{cfg}: experiments.0.rank",
         r"1\.\.min\(tokens, head_dim\) = 4"),
        ("budget-after-loading", {"@exp": {"method": "topk_attention", "budget": 9}}, "{cfg}: experiments.0.budget",
         r"1\.\.tokens = 8"),
        ("recall-k-after-loading", {"@metrics": {"topk_recall_k": 9}}, "{cfg}: metrics.topk_recall_k",
         r"must be in 1\.\.8"),
        ("scores-could-overflow", {"keys": "huge-k.npy", "queries": "huge-q.npy"}, "data.files",
         "attention scores q.k could overflow"),
        ("bad-source", {"@data": {"source": "file"}}, "{cfg}: data.source", "did you mean \"files\""),
    ]
    for name, spec, where, what in cases:
        files = {"keys": "k.npy", "values": "v.npy", "queries": "q.npy"}
        data_extra, exp, metrics = {}, {"method": "quantize", "bits": 4}, None
        for key, val in spec.items():
            if key == "@data":
                data_extra = val
            elif key == "@exp":
                exp = val
            elif key == "@metrics":
                metrics = val
            elif val is None:
                files.pop(key, None)
            else:
                files[key] = val
        cfg = {"seed": 1, "data": dict({"source": "files", "files": files}, **data_extra), "experiments": [exp]}
        if metrics:
            cfg["metrics"] = metrics
        path = write_json(os.path.join(d, "bad-%s.json" % name), cfg)
        check("bad-" + name, lambda: one_line_error(run("run", path), where.replace("{cfg}", path).replace(
            "{d}", d), what))
    # kvc synth's own errors
    out = os.path.join(d, "synth-out")
    check("synth-missing-o", lambda: one_line_error(run("synth", "configs/lesson.json"), "synth",
                                                    "missing the output directory"))
    check("synth-bad-format", lambda: one_line_error(run("synth", "configs/lesson.json", "-o", out, "--format",
                                                         "h5"), "synth: --format", "npy or safetensors"))
    check("synth-o-is-a-file", lambda: one_line_error(run("synth", "configs/lesson.json", "-o",
                                                          os.path.join(d, "k.npy")), d + "/k.npy: -o",
                                                      "not a directory"))
    check("synth-bad-config-writes-nothing", lambda: one_line_error(
        run("synth", "configs/lesson.json", "-o", out, "--set", "data.tokens=0"), "configs/lesson.json: data.tokens",
        "must be in")
        or (None if not os.path.exists(out) else "created %s" % out))


def one_line_error(res, where, what):
    rc, out, err = res
    if rc != 2:
        return "exit %d, want 2 (stderr %r)" % (rc, err)
    if out:
        return "stdout not empty: %r" % out[:200]
    if err.count("\n") != 1 or not err.endswith("\n"):
        return "stderr is not one line: %r" % err
    line = err[:-1]
    if not ERR_RE.match(line):
        return "not 'kvc: <where>: <what> (got <value>)': %r" % line
    pat = re.escape(where[:-2]) + ".*?" if where.endswith(".*") else re.escape(where)   # literal, or prefix.*
    m = re.match(r"kvc: (?:%s): " % pat, line)
    if not m:
        return "want <where> %r: %r" % (where, line)
    if not re.search(what, line[m.end():]):
        return "<what> does not match %r: %r" % (what, line)
    return None


def main():
    if not os.access(KVC, os.X_OK):
        report("kvc-binary", "%s is missing; run make first" % KVC)
        return 1
    round_trips()
    from_numpy()
    bad_cases()
    return checks.status()


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
