"""fixtures.py: writes the tensor files of the bad-input catalogue (tests/bad-input/cases) into a directory.

A fixture is named by a spec string "<kind>" (see FIXTURES below); write(spec, path) writes it. Good files
(the K, V and Q a case does not break) are "npy:good-k", "npy:good-v", "npy:good-q" (T=8 tokens, D=4).
Everything is written by hand from the two formats (numpy is used only to encode values), so a fixture can
be exactly as broken as the case needs. Standard library and numpy only.
"""
import io
import json
import struct

import numpy as np

T, D = 8, 4


def _npy(arr=None, header=None, descr="<f8", shape=None, fortran=False, version=(1, 0), data=None,
         magic=b"\x93NUMPY", pad=True, hlen=None):
    """A .npy file; every part can be overridden (header text, length field, data bytes)."""
    if arr is not None:
        arr = np.asarray(arr)
        shape = arr.shape if shape is None else shape
        if data is None:
            data = arr.astype(descr).tobytes(order="F" if fortran else "C")
    if header is None:
        header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
            descr, "True" if fortran else "False", repr(tuple(shape)))
    h = header.encode("latin1")
    lenfmt = "<H" if version[0] == 1 else "<I"
    pre = len(magic) + 2 + struct.calcsize(lenfmt)
    if pad:
        h += b" " * ((-(pre + len(h) + 1)) % 64) + b"\n"
    n = len(h) if hlen is None else hlen
    return magic + bytes(version) + struct.pack(lenfmt, n) + h + (data or b"")


def _st(tensors, header=None, hlen=None, data=None):
    """A .safetensors file. tensors: list of (name, dtype, shape, raw bytes) or (name, entry dict, raw)."""
    hdr, buf = {}, b""
    for t in tensors:
        if len(t) == 3:
            name, entry, raw = t
            hdr[name] = entry
        else:
            name, dtype, shape, raw = t
            hdr[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(buf), len(buf) + len(raw)]}
        buf += raw
    h = json.dumps(hdr).encode() if header is None else header if isinstance(header, bytes) else header.encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h) if hlen is None else hlen) + h + (buf if data is None else data)


def _k():
    return (np.arange(T * D, dtype=np.float64).reshape(T, D) - 10) / 7


def _npy_save(arr, version=None):
    b = io.BytesIO()
    if version is None:
        np.save(b, arr)
    else:
        np.lib.format.write_array(b, arr, version=version)
    return b.getvalue()


def _nan_at(arr, idx, value):
    a = np.array(arr, dtype=np.float64)
    a.flat[idx] = value
    return a


FIXTURES = {
    # good files
    "npy:good-k": lambda: _npy_save(_k()),
    "npy:good-v": lambda: _npy_save(_k()[::-1].copy()),
    "npy:good-q": lambda: _npy_save(_k()[3] * 0.5),
    "npy:good-k-5x4": lambda: _npy_save(_k()[:5]),
    "npy:good-k-8x3": lambda: _npy_save(_k()[:, :3].copy()),
    "npy:good-q-3": lambda: _npy_save(_k()[3, :3].copy()),
    "npy:good-k-2x8x4": lambda: _npy_save(np.stack([_k(), _k()])),
    "npy:good-v-3x8x4": lambda: _npy_save(np.stack([_k(), _k(), _k()])),
    "safetensors:good-k": lambda: _st([("k", "F32", (T, D), _k().astype("<f4").tobytes())]),
    # .npy: broken files
    "npy:empty": lambda: b"",
    "npy:truncated-preamble": lambda: b"\x93NUMP",
    "npy:truncated-length-field": lambda: b"\x93NUMPY\x01\x00\x76",
    "npy:truncated-data": lambda: _npy_save(_k())[:-12],
    "npy:truncated-header": lambda: _npy_save(_k())[:40],
    "npy:header-longer-than-file": lambda: _npy(_k(), hlen=5000),
    "npy:header-too-long-v2": lambda: _npy(_k(), version=(2, 0), hlen=0x7fffffff),
    "npy:wrong-magic": lambda: b"\x93NUMPX" + _npy_save(_k())[6:],
    "npy:zip-magic": lambda: b"PK\x03\x04" + b"\0" * 60,
    "npy:text-file": lambda: b"1.0 2.0 3.0\n4.0 5.0 6.0\n",
    "npy:version-4": lambda: _npy(_k(), version=(4, 0)),
    "npy:dtype-int32": lambda: _npy_save(np.arange(T * D, dtype=np.int32).reshape(T, D)),
    "npy:dtype-complex": lambda: _npy_save(np.zeros((T, D), dtype=np.complex128)),
    "npy:dtype-f16-quad": lambda: _npy(_k(), descr="<f16", data=b"\0" * (T * D * 16)),
    "npy:dtype-object": lambda: _npy(header="{'descr': '|O', 'fortran_order': False, 'shape': (8, 4), }",
                                     data=b"\0" * (T * D * 8)),
    "npy:dtype-structured": lambda: _npy_save(np.zeros(4, dtype=[("a", "<f8"), ("b", "<f8")])),
    "npy:shape-overflow": lambda: _npy(header="{'descr': '<f8', 'fortran_order': False, "
                                              "'shape': (4294967296, 4294967296), }", data=b"\0" * 64),
    "npy:shape-dim-beyond-u64": lambda: _npy(header="{'descr': '<f8', 'fortran_order': False, "
                                                    "'shape': (18446744073709551617, 4), }", data=b"\0" * 64),
    "npy:shape-negative": lambda: _npy(header="{'descr': '<f8', 'fortran_order': False, 'shape': (-8, 4), }",
                                       data=b"\0" * 256),
    "npy:shape-scalar": lambda: _npy_save(np.float64(1.5)),
    "npy:shape-5d": lambda: _npy_save(np.zeros((1, 1, 2, 2, 2))),
    "npy:header-not-dict": lambda: _npy(header="[('descr', '<f8')]", data=b"\0" * 8),
    "npy:header-missing-shape": lambda: _npy(header="{'descr': '<f8', 'fortran_order': False, }", data=b"\0" * 8),
    "npy:header-unknown-key": lambda: _npy(header="{'descr': '<f8', 'fortran_order': False, 'shape': (1,), "
                                                  "'evil': __import__('os'), }", data=b"\0" * 8),
    "npy:fortran-order-bad": lambda: _npy(header="{'descr': '<f8', 'fortran_order': 0, 'shape': (1,), }",
                                          data=b"\0" * 8),
    "npy:trailing-bytes": lambda: _npy_save(_k()) + b"\0" * 8,
    "npy:nan": lambda: _npy_save(_nan_at(_k(), 9, np.nan)),
    "npy:inf-f4": lambda: _npy_save(_nan_at(_k(), 30, -np.inf).astype(np.float32)),
    "npy:inf-f2-overflow": lambda: _npy(descr="<f2", shape=(T, D),
                                        data=_k().astype("<f2").tobytes()[:-2] + b"\x00\x7c"),
    # .safetensors: broken files
    "safetensors:empty": lambda: b"",
    "safetensors:truncated-length": lambda: b"\x40\0\0\0\0",
    "safetensors:header-longer-than-file": lambda: _st([("k", "F32", (T, D), b"\0" * 128)], hlen=4096),
    "safetensors:header-length-huge": lambda: struct.pack("<Q", 2 ** 63) + b"{}",
    "safetensors:npy-bytes": lambda: _npy_save(_k()),
    "safetensors:header-not-json": lambda: _st([], header="{'k': 1}"),
    "safetensors:header-not-object": lambda: _st([], header="[1, 2]"),
    "safetensors:no-tensors": lambda: _st([], header="{}"),
    "safetensors:dtype-int32": lambda: _st([("k", "I32", (T, D), b"\0" * (T * D * 4))]),
    "safetensors:dtype-fp8": lambda: _st([("k", "F8_E4M3", (T, D), b"\0" * (T * D))]),
    "safetensors:shape-overflow": lambda: _st([("k", {"dtype": "F64", "shape": [2 ** 40, 2 ** 40, 2 ** 40],
                                                      "data_offsets": [0, 64]}, b"\0" * 64)]),
    "safetensors:shape-negative": lambda: _st([("k", {"dtype": "F32", "shape": [-8, 4], "data_offsets": [0, 128]},
                                                b"\0" * 128)]),
    "safetensors:offsets-past-end": lambda: _st([("k", {"dtype": "F32", "shape": [T, D], "data_offsets": [0, 4096]},
                                                  b"\0" * 128)]),
    "safetensors:offsets-reversed": lambda: _st([("k", {"dtype": "F32", "shape": [0], "data_offsets": [64, 0]},
                                                  b"\0" * 128)]),
    "safetensors:size-mismatch": lambda: _st([("k", {"dtype": "F32", "shape": [T, D], "data_offsets": [0, 120]},
                                               b"\0" * 128)]),
    "safetensors:truncated-data": lambda: _st([("k", "F32", (T, D), _k().astype("<f4").tobytes())])[:-16],
    "safetensors:nan-f32": lambda: _st([("k", "F32", (T, D), _nan_at(_k(), 5, np.nan).astype("<f4").tobytes())]),
    "safetensors:inf-f16": lambda: _st([("k", "F16", (T, D), _k().astype("<f2").tobytes()[:-2] + b"\x00\xfc")]),
    "safetensors:nan-bf16": lambda: _st([("k", "BF16", (T, D), b"\x80\x3f" * (T * D - 1) + b"\xc0\x7f")]),
    "safetensors:two-tensors": lambda: _st([("k", "F32", (T, D), _k().astype("<f4").tobytes()),
                                            ("v", "F32", (T, D), _k().astype("<f4").tobytes())]),
    # tensor names kvc cannot carry: an escaped NUL (a C string would end there) and bytes that are not UTF-8
    "safetensors:name-nul": lambda: _st([], header='{"k\\u0000x": {"dtype": "F32", "shape": [%d, %d], '
                                                   '"data_offsets": [0, %d]}}' % (T, D, T * D * 4),
                                        data=_k().astype("<f4").tobytes()),
    "safetensors:name-bad-utf8": lambda: _st([], header=b'{"k\xff": {"dtype": "F32", "shape": [%d, %d], '
                                                        b'"data_offsets": [0, %d]}}' % (T, D, T * D * 4),
                                             data=_k().astype("<f4").tobytes()),
    "safetensors:metadata-not-object": lambda: _st([("k", "F32", (T, D), _k().astype("<f4").tobytes())],
                                                   header=json.dumps({"__metadata__": 5, "k": {
                                                       "dtype": "F32", "shape": [T, D],
                                                       "data_offsets": [0, T * D * 4]}})),
    # the data buffer must be the tensors' data back to back (F08)
    "safetensors:overlap": lambda: _st([("k", {"dtype": "F32", "shape": [T, D], "data_offsets": [0, T * D * 4]},
                                         _k().astype("<f4").tobytes()),
                                        ("v", {"dtype": "F32", "shape": [2], "data_offsets": [64, 72]}, b"")]),
    "safetensors:hole": lambda: _st([("k", {"dtype": "F32", "shape": [T, D], "data_offsets": [0, T * D * 4]},
                                      _k().astype("<f4").tobytes() + b"\0" * 8),
                                     ("v", {"dtype": "F32", "shape": [2], "data_offsets": [T * D * 4 + 8,
                                                                                           T * D * 4 + 16]},
                                      b"\0" * 8)]),
    "safetensors:hole-before-first": lambda: _st([("k", {"dtype": "F32", "shape": [T, D],
                                                         "data_offsets": [16, 16 + T * D * 4]},
                                                   b"\0" * 16 + _k().astype("<f4").tobytes())]),
    "safetensors:trailing-bytes": lambda: _st([("k", "F32", (T, D), _k().astype("<f4").tobytes())],
                                              data=_k().astype("<f4").tobytes() + b"\0" * 12),
    "safetensors:duplicate-name": lambda: _st([], header='{"k": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},'
                                                      ' "k": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
                                              data=b"\0" * 4),
}


def write(spec, path):
    if spec not in FIXTURES:
        raise KeyError("unknown fixture %r (see tests/bad-input/fixtures.py)" % spec)
    with open(path, "wb") as fh:
        fh.write(FIXTURES[spec]())
    return path


# ---- model directories for data.source "model" (write_model(spec, dir)) ---------------------------------------
# A tiny Llama model in Hugging Face's layout (config.json + model.safetensors, F32), byte-level (vocab 256);
# each spec breaks one thing. Beside it the case directory gets t.txt (a good text), ids.npy (good int32 ids),
# ids-2x100.npy (two sequences) and ids-oov.npy (an id outside the vocabulary).
MODEL_CFG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 16, "num_hidden_layers": 1,
             "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "intermediate_size": 24,
             "vocab_size": 256, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
             "tie_word_embeddings": False}


def _model_tensors(cfg):
    rng = np.random.default_rng(5)
    E, I, V, Hq, Hkv, D = (cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"],
                           cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"])
    w = lambda *s: (rng.uniform(-1, 1, s) / np.sqrt(s[-1])).astype("<f4")
    t = {"model.embed_tokens.weight": w(V, E), "model.norm.weight": np.ones(E, "<f4"), "lm_head.weight": w(V, E)}
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        t.update({p + "input_layernorm.weight": np.ones(E, "<f4"), p + "post_attention_layernorm.weight":
                  np.ones(E, "<f4"), p + "self_attn.q_proj.weight": w(Hq * D, E),
                  p + "self_attn.k_proj.weight": w(Hkv * D, E), p + "self_attn.v_proj.weight": w(Hkv * D, E),
                  p + "self_attn.o_proj.weight": w(E, Hq * D), p + "mlp.gate_proj.weight": w(I, E),
                  p + "mlp.up_proj.weight": w(I, E), p + "mlp.down_proj.weight": w(E, I)})
    return t


def _model_st(tensors):
    return _st([(n, "F32", a.shape, a.astype("<f4").tobytes()) for n, a in tensors.items()])


MODEL_FIXTURES = {   # spec -> (config changes, tensor changes: name -> array or None to drop, files to remove)
    "good": ({}, {}, []),
    "vocab1000": ({"vocab_size": 1000}, {}, []),
    "no-config": ({}, {}, ["config.json"]),
    "no-weights": ({}, {}, ["model.safetensors"]),
    "gpt2": ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}, {}, []),
    "missing-tensor": ({}, {"model.layers.0.mlp.up_proj.weight": None}, []),
    "misshaped-tensor": ({}, {"model.layers.0.self_attn.k_proj.weight": np.zeros((16, 16), "<f4")}, []),
    "hidden-not-divisible": ({"hidden_size": 15, "head_dim": None}, {}, []),
    "kv-not-dividing": ({"num_attention_heads": 3, "num_key_value_heads": 2}, {}, []),
    "nonfinite": ({}, {"model.norm.weight": np.array([1.0] * 5 + [np.inf] + [1.0] * 10, "<f4")}, []),
}


def write_model(spec, d):
    import os
    if spec not in MODEL_FIXTURES:
        raise KeyError("unknown model fixture %r (see tests/bad-input/fixtures.py)" % spec)
    changes, tchanges, remove = MODEL_FIXTURES[spec]
    cfg = dict(MODEL_CFG)
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    os.makedirs(d, exist_ok=True)
    t = _model_tensors(dict(MODEL_CFG, vocab_size=cfg["vocab_size"]))
    for k, v in tchanges.items():
        if v is None:
            del t[k]
        else:
            t[k] = v
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(cfg, fh)
    with open(os.path.join(d, "model.safetensors"), "wb") as fh:
        fh.write(_model_st(t))
    for name in remove:
        os.remove(os.path.join(d, name))
    parent = os.path.dirname(d.rstrip("/"))
    with open(os.path.join(parent, "t.txt"), "w") as fh:
        fh.write("A short text for a byte-level model, long enough for its context. " * 2)
    with open(os.path.join(parent, "ids.npy"), "wb") as fh:
        fh.write(_npy(np.arange(100) % 256, descr="<i4"))
    with open(os.path.join(parent, "ids-2x100.npy"), "wb") as fh:
        fh.write(_npy(np.arange(200).reshape(2, 100) % 256, descr="<i4"))
    with open(os.path.join(parent, "ids-oov.npy"), "wb") as fh:
        fh.write(_npy(np.array(list(range(10)) + [256] + list(range(89))), descr="<i8"))
    return d
