#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_npy into tests/fuzz/npy_corpus/ (run once; the files are committed).

Small valid and invalid .npy files, written byte by byte (no NumPy needed). The
names have no .npy extension because .gitignore ignores *.npy. Usage:
    python3 tests/fuzz/make_npy_corpus.py [output-directory]
"""
import os
import struct
import sys

MAGIC = b"\x93NUMPY"


def header(descr, shape, fortran=False, version=(1, 0), pad_to=64, text=None, quote="'"):
    """magic + version + length + dict, padded like np.save (data 64-byte aligned)."""
    if text is None:
        shape_text = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
        q = quote
        text = "{%sdescr%s: %s%s%s, %sfortran_order%s: %s, %sshape%s: %s, }" % (
            q, q, q, descr, q, q, q, "True" if fortran else "False", q, q, shape_text)
    body = text.encode("latin-1")
    length_bytes = 2 if version[0] == 1 else 4
    prefix = len(MAGIC) + 2 + length_bytes
    total = prefix + len(body) + 1
    if pad_to:
        total = (total + pad_to - 1) // pad_to * pad_to
    body = body + b" " * (total - prefix - len(body) - 1) + b"\n"
    fmt = "<H" if length_bytes == 2 else "<I"
    return MAGIC + bytes(version) + struct.pack(fmt, len(body)) + body


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def f16(values):
    return struct.pack("<%de" % len(values), *values)


def bf16_bits(values):
    return b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", v))[0] >> 16) for v in values)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "npy_corpus")
    os.makedirs(out, exist_ok=True)
    six = [0.5, -1.0, 2.0, 0.0, 3.25, -0.125]
    files = {
        # --- valid: what flashcl reads (f32, f16, bf16 as <u2, uint8 masks, int32 offsets) ---
        "valid_f32_2x3": header("<f4", (2, 3)) + f32(six),
        "valid_f32_bhsd_1x2x2x2": header("<f4", (1, 2, 2, 2)) + f32(six + [1.5, -2.5]),
        "valid_f16_1x1x2x3": header("<f2", (1, 1, 2, 3)) + f16(six),
        "valid_bf16_as_u2_3": header("<u2", (3,)) + bf16_bits([1.0, -2.0, 0.375]),
        "valid_u8_mask_2x2": header("|u1", (2, 2)) + bytes([1, 0, 0, 1]),
        "valid_u8_little_endian_descr": header("<u1", (3,)) + bytes([1, 1, 0]),
        "valid_i32_cu_seqlens": header("<i4", (4,)) + struct.pack("<4i", 0, 5, 5, 12),
        "valid_scalar_f32": header("<f4", ()) + f32([42.0]),
        "valid_empty_0x4": header("<f4", (0, 4)),
        "valid_v2_header": header("<f4", (2,), version=(2, 0)) + f32([1.0, 2.0]),
        "valid_v3_header": header("<f2", (2,), version=(3, 0)) + f16([1.0, 2.0]),
        "valid_unpadded_header": header("<f4", (1,), pad_to=0) + f32([7.0]),
        "valid_double_quotes": header("<f4", (1,), quote='"') + f32([1.0]),
        "valid_python2_long": header(None, None, text="{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 1L), }")
        + f32([1.0, 2.0]),
        "valid_key_order": header(None, None, text="{'shape': (1,), 'fortran_order': False, 'descr': '<f4'}") + f32([3.0]),
        "valid_rank8": header("<u2", (1,) * 8) + struct.pack("<H", 0x3F80),
        # --- invalid: each one error path of the reader ---
        "bad_fortran_order": header("<f4", (2, 3), fortran=True) + f32(six),
        "bad_big_endian_f4": header(">f4", (2,)) + struct.pack(">2f", 1.0, 2.0),
        "bad_dtype_f8": header("<f8", (1,)) + struct.pack("<d", 1.0),
        "bad_dtype_structured": header(None, None, text="{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }")
        + f32([1.0]),
        "bad_magic": b"\x93NUMPZ\x01\x00" + header("<f4", (1,))[8:] + f32([1.0]),
        "bad_version_4": MAGIC + bytes([4, 0]) + header("<f4", (1,))[8:] + f32([1.0]),
        "bad_version_minor": MAGIC + bytes([1, 1]) + header("<f4", (1,))[8:] + f32([1.0]),
        "bad_truncated_version": MAGIC + b"\x01",
        "bad_truncated_length": MAGIC + b"\x01\x00\x40",
        "bad_truncated_header": header("<f4", (2, 3))[:40],
        "bad_header_length_huge": MAGIC + b"\x02\x00" + struct.pack("<I", 0x7FFFFFFF) + b"{",
        "bad_truncated_data": header("<f4", (2, 3)) + f32(six[:5]),
        "bad_trailing_bytes": header("<f4", (2,)) + f32([1.0, 2.0, 3.0]),
        "bad_no_brace": header(None, None, text="'descr': '<f4', 'fortran_order': False, 'shape': (1,)") + f32([1.0]),
        "bad_duplicate_key": header(None, None, text="{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}")
        + f32([1.0]),
        "bad_missing_shape": header(None, None, text="{'descr': '<f4', 'fortran_order': False}") + f32([1.0]),
        "bad_unknown_key": header(None, None, text="{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}")
        + f32([1.0]),
        "bad_negative_dim": header(None, None, text="{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"),
        "bad_rank9": header("<f4", (1,) * 9) + f32([1.0]),
        "bad_dim_overflow": header(None, None, text="{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }"),
        "bad_size_overflow": header("<f4", (2**32, 2**32)),
        "bad_huge_shape_small_file": header("<f4", (1 << 40,)) + f32([1.0]),
        "bad_unterminated_string": header(None, None, text="{'descr: '<f4', 'fortran_order': False, 'shape': (1,)}"),
        "bad_escape_in_string": header(None, None, text="{'de\\scr': '<f4', 'fortran_order': False, 'shape': (1,)}"),
        "bad_fortran_order_value": header(None, None, text="{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}"),
        "bad_text_after_dict": header(None, None, text="{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x") + f32([1.0]),
        "bad_shape_not_tuple": header(None, None, text="{'descr': '<f4', 'fortran_order': False, 'shape': [1]}") + f32([1.0]),
        "bad_empty": b"",
    }
    for name, data in sorted(files.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("wrote %d files into %s" % (len(files), out))


if __name__ == "__main__":
    main()
