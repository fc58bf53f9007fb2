#!/usr/bin/python3
"""make_seeds.py: writes the seed corpora tests/fuzz/<target>/corpus/ (about a dozen small files each).

Run from the project root with Debian's numpy (/usr/bin/python3 tests/fuzz/make_seeds.py); the output is
deterministic, so the committed files can be regenerated and compared. The .safetensors seeds are written
by hand from the format (8-byte little-endian header length, JSON header, data), as tests do elsewhere. The
results seeds are cut from what the built kvc ($KVC, default ./kvc) writes for tests/data/sweep/grid.json
(without timing, so they do not change between runs); without a kvc they are left as they are.
"""
import io
import json
import os
import struct
import subprocess

import numpy as np

ROOT = "tests/fuzz"


def put(target, name, data):
    d = os.path.join(ROOT, target, "corpus")
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as fh:
        fh.write(data)


def config_seeds():
    lesson = open("configs/lesson.json").read()
    practice = open("configs/practice.json").read()
    put("config", "lesson.json", lesson)
    put("config", "practice.json", practice)
    tiny = {"seed": 1, "data": {"tokens": 8, "head_dim": 4, "keys": {"generator": "normal"},
                                "values": {"generator": "normal"},
                                "query": {"generator": "look_back", "token": 2, "weight": 0.5, "noise": 0.1}},
            "experiments": [{"method": "quantize", "bits": [2, 8], "axis": ["token", "channel"]},
                            {"method": "sink_window", "sinks": 1, "window": [2, 3]},
                            {"method": "topk_attention", "budget": 4},
                            {"method": "lowrank", "rank": [1, 4], "apply_to": "kv", "label": "r{rank} {apply_to}"}]}
    put("config", "tiny.json", json.dumps(tiny))
    lowrank = {"seed": "18446744073709551615",
               "data": {"tokens": 16, "head_dim": 8,
                        "keys": {"generator": "lowrank", "rank": 2, "scale": 1e-30, "noise": 0,
                                 "outliers": [{"channel": 0, "scale": 0}, {"channel": 7, "scale": -1e30}]}},
               "experiments": [{"method": "lowrank", "rank": 8, "apply_to": "k"}]}
    put("config", "lowrank-outliers.json", json.dumps(lowrank, indent=1))
    keys_only = {"data": {"tokens": 1, "head_dim": 1, "keys": {"generator": "normal"}},
                 "experiments": [{"method": "quantize", "apply_to": "k"}]}
    put("config", "keys-only-1x1.json", json.dumps(keys_only))
    put("config", "realistic.json", open("configs/realistic.json").read())
    multi = {"seed": 5, "data": {"layers": 2, "kv_heads": 2, "q_heads": 4, "tokens": 12, "head_dim": 4,
                                 "keys": {"generator": "lowrank", "rank": 2, "scale": 0.5, "noise": 0.1,
                                          "outlier_channels": {"count": 1, "scale": [2, 8]}},
                                 "values": {"generator": "normal"},
                                 "head_correlation": {"rho": 0.5, "group": 2},
                                 "rope": {"base": 10000, "dims": 4, "style": "interleaved", "cache": "pre"},
                                 "sinks": {"tokens": 1, "share": 0.3}, "recent": {"tokens": 2, "share": 0.3},
                                 "heavy_hitters": {"count": 2, "share": 0.2, "spread": 0.5},
                                 "query": {"generator": "key_gaussian", "count": 2, "weight": 0.5, "noise": 0.5,
                                           "head_correlation": 0.5, "bias": 1.0},
                                 "observe": {"generator": "look_back", "window": 3}},
             "metrics": {"topk_recall_k": 4},
             "experiments": [{"method": "topk_attention", "budget": [1, 12]},
                             {"method": "sink_window", "sinks": 0, "window": 12}]}
    put("config", "multi-head.json", json.dumps(multi))
    put("config", "query-tokens.json", json.dumps(
        {"data": {"tokens": 6, "head_dim": 2, "keys": {"generator": "normal"}, "values": {"generator": "normal"},
                  "query": {"generator": "look_back", "tokens": [0, 5, 5]}},
         "experiments": [{"method": "quantize", "bits": 2, "axis": "channel"}]}))
    # with --set arguments before the NUL byte
    put("config", "set-practice.bin", "experiments.0.bits=[2,3,8]\ndata.keys.outliers=[]\nseed=\"7\"\0" + practice)
    put("config", "set-lesson.bin", "data.tokens=20\nexperiments.1.window=3\nexperiments.2.budget=20\n"
        "experiments.3.rank=[1,4]\0" + lesson)
    put("config", "set-new-key.bin", "data.values={\"generator\":\"normal\"}\nexperiments.0.apply_to=\"kv\"\0"
        + practice)
    put("config", "set-bad.bin", "data..x=1\nexperiments.9.bits=1\0{}")
    put("config", "escapes.json", '{"seed": 0, "data": {"tokens": 4, "head_dim": 2, "keys": {"generator": '
        '"normal"}}, "experiments": [{"method": "quantize", "apply_to": "k", "label": "\\u00e9\\ud83d\\ude00 '
        '{bits} {nope} \\"q\\"\\n"}]}')
    put("config", "malformed.json", '{"seed": 1, "data": {"tokens": 01, "head_dim": 1.e5}, [}')
    put("config", "numbers.json", '{"seed": 1e3, "data": {"tokens": 1E2, "head_dim": -0, "keys": {"generator":'
        ' "normal"}}, "experiments": [{"method": "quantize", "bits": [2.0, 8e0, 4]}]}')


def npy_bytes(arr, version=None):
    buf = io.BytesIO()
    if version is None:
        np.save(buf, arr)
    else:
        np.lib.format.write_array(buf, arr, version=version)
    return buf.getvalue()


def npy_seeds():
    x = np.arange(32, dtype=np.float64).reshape(4, 8) / 7
    put("npy", "f8-4x8.npy", npy_bytes(x))
    put("npy", "f4-2x3.npy", npy_bytes(x[:2, :3].astype(np.float32)))
    put("npy", "f2-3.npy", npy_bytes(np.array([1.5, -0.0, 65504], dtype=np.float16)))
    put("npy", "f8-big-endian.npy", npy_bytes(x[:2].astype(">f8")))
    put("npy", "f4-fortran.npy", npy_bytes(np.asfortranarray(x.astype(np.float32))))
    put("npy", "f8-4d.npy", npy_bytes(np.ones((1, 2, 2, 2))))
    put("npy", "f8-empty-dim.npy", npy_bytes(np.zeros((0, 4))))
    put("npy", "v2-f8.npy", npy_bytes(x[:1], version=(2, 0)))
    put("npy", "v3-f4.npy", npy_bytes(x[:1].astype(np.float32), version=(3, 0)))
    put("npy", "i4-unsupported.npy", npy_bytes(np.arange(4, dtype=np.int32)))
    put("npy", "truncated.npy", npy_bytes(x)[:-5])
    put("npy", "nan.npy", npy_bytes(np.array([1.0, np.nan])))
    # a shape whose product overflows 64 bits (its message once lacked "(got ...)": the bad-input catalogue found it)
    h = b"{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"
    h += b" " * (-(10 + len(h) + 1) % 64) + b"\n"
    put("npy", "shape-overflow.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + b"\0" * 16)


def st_bytes(tensors, metadata=None, pad=True):
    """tensors: list of (name, dtype, shape, raw bytes)."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    x = np.arange(12, dtype=np.float64).reshape(3, 4) / 3
    put("safetensors", "f32-k.safetensors", st_bytes([("k", "F32", (3, 4), x.astype("<f4").tobytes())]))
    put("safetensors", "f64-k.safetensors", st_bytes([("k", "F64", (3, 4), x.astype("<f8").tobytes())]))
    put("safetensors", "f16-k.safetensors", st_bytes([("k", "F16", (2, 2), x[:1].astype("<f2").tobytes()[:8])]))
    bf16 = (x.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
    put("safetensors", "bf16-k.safetensors", st_bytes([("k", "BF16", (3, 4), bf16)]))
    put("safetensors", "two-tensors.safetensors", st_bytes([("k", "F32", (3, 4), x.astype("<f4").tobytes()),
                                                            ("v", "F64", (2, 2), x[:1].tobytes()[:32])]))
    put("safetensors", "metadata.safetensors", st_bytes([("k", "F32", (4,), x[0].astype("<f4").tobytes())],
                                                        metadata={"format": "pt"}))
    put("safetensors", "other-name.safetensors", st_bytes([("keys", "F32", (1, 4), x[0].astype("<f4").tobytes())]))
    put("safetensors", "4d.safetensors", st_bytes([("k", "F64", (1, 1, 3, 4), x.tobytes())]))
    put("safetensors", "empty-dim.safetensors", st_bytes([("k", "F32", (0, 4), b"")]))
    put("safetensors", "i32-other.safetensors", st_bytes([("k", "F32", (1,), b"\0\0\x80\x3f"),
                                                          ("ids", "I32", (2,), b"\1\0\0\0\2\0\0\0")]))
    put("safetensors", "unpadded.safetensors", st_bytes([("k", "F32", (2,), b"\0\0\x80\x3f\0\0\0\x40")], pad=False))
    put("safetensors", "nan.safetensors", st_bytes([("k", "F32", (2,), b"\0\0\x80\x3f\0\0\xc0\x7f")]))
    hdr = {"k": {"dtype": "F64", "shape": [2 ** 40, 2 ** 40, 2 ** 40], "data_offsets": [0, 8]}}
    h = json.dumps(hdr, separators=(",", ":")).encode()
    put("safetensors", "shape-overflow.safetensors", struct.pack("<Q", len(h)) + h + b"\0" * 8)
    put("safetensors", "truncated.safetensors", st_bytes([("k", "F64", (3, 4), x.tobytes())])[:-3])


def results_seeds():
    kvc = os.environ.get("KVC", "./kvc")
    if not os.path.exists(kvc):
        print("make_seeds: no %s: results seeds left as they are" % kvc)
        return

    def out(*args):
        return subprocess.run([kvc, "run", "tests/data/sweep/grid.json", "--no-timing"] + list(args),
                              stdout=subprocess.PIPE, check=True).stdout

    csv, jsonl = out("--format", "csv"), out("--format", "jsonl")
    ph = out("--format", "csv", "--per-head", "--set", "data.layers=2", "--set", "data.kv_heads=2")
    phj = out("--format", "jsonl", "--per-head", "--set", "data.layers=2", "--set", "data.kv_heads=2")
    lines = csv.split(b"\n")
    put("results", "grid-head.csv", b"\n".join(lines[:4]) + b"\n")
    put("results", "grid-quoted-newline.csv", lines[0] + b"\n" + b"\n".join(lines[14:18]) + b"\n")
    put("results", "grid-torn.csv", csv[:700])
    put("results", "grid-torn-header.csv", csv[:30])
    put("results", "grid-zeros.csv", b"\n".join(lines[:3]) + b"\n" + b"\0" * 40)
    put("results", "grid-head.jsonl", b"\n".join(jsonl.split(b"\n")[:3]) + b"\n")
    put("results", "grid-torn.jsonl", jsonl[:900])
    put("results", "per-head.csv", b"\n".join(ph.split(b"\n")[:5]) + b"\n")
    put("results", "per-head.jsonl", b"\n".join(phj.split(b"\n")[:3]) + b"\n")
    put("results", "bad-cells.csv", lines[0] + b"\n" + lines[1].replace(b",1152,", b",19x2,") + b"\n")
    put("results", "bad-cell.jsonl", jsonl.split(b"\n")[0].replace(b'"bytes":1152', b'"bytes":"1152"') + b"\n")
    put("results", "notes.txt", b"my notes, not kvc's")


if __name__ == "__main__":
    config_seeds()
    npy_seeds()
    safetensors_seeds()
    results_seeds()
