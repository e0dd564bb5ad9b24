"""The ctypes mirrors of dfa_attn_desc and dfa_dist_desc against the C header: sizes, every
field's offset (a tiny C program compiled against include/distflash.h), and the bytes that
dfa_attn_desc_init / dfa_dist_desc_init produce (called through ctypes)."""
import ctypes
import os
import re
import shutil
import subprocess

import pytest

from distflash import _capi
from conftest import REPO

ATTN_FIELDS = [f[0] for f in _capi.AttnDesc._fields_]
DIST_FIELDS = [f[0] for f in _capi.DistDesc._fields_]


def _header():
    path = os.path.join(REPO, "include", "distflash.h")
    return open(path).read() if os.path.exists(path) else None


def _header_version(header):
    line = next(l for l in header.splitlines() if l.startswith("#define DFA_DESC_VERSION "))
    return int(line.split()[2].rstrip("uU"), 0)


def _fields_of_header():
    """The mirror's fields that the header beside this checkout declares: all of them, less the
    newer version's when the header is older than the mirror (the mirror runs ahead of it)."""
    header = _header()
    if header is not None and _header_version(header) < 3:
        return [f for f in ATTN_FIELDS if f not in _capi.V3_FIELDS]
    return ATTN_FIELDS


def test_sizes_match_the_header_constants():
    assert ctypes.sizeof(_capi.AttnDesc) == _capi.DFA_ATTN_DESC_SIZE_V1 == 136
    assert ctypes.sizeof(_capi.DistDesc) == _capi.DFA_DIST_DESC_SIZE_V1 == 192
    assert ctypes.alignment(_capi.AttnDesc) == 8 and ctypes.alignment(_capi.DistDesc) == 8


def test_constants_match_the_header():
    header = _header()
    if header is None:
        pytest.skip("include/distflash.h not beside this checkout")
    names = ["DFA_DESC_MAGIC", "DFA_ATTN_DESC_SIZE_V1", "DFA_DIST_DESC_SIZE_V1", "DFA_FLAG_DETERMINISTIC",
             "DFA_FLAG_WINDOW", "DFA_FLAG_SAME_DOCS"]
    if _header_version(header) >= 3:
        names.append("DFA_ATTN_DESC_SIZE_V3")
    for name in names:
        line = next(l for l in header.splitlines() if l.startswith(f"#define {name} "))
        value = int(line.split()[2].rstrip("uU"), 0)
        assert getattr(_capi, name) == value, name
    # the mirror knows every field of the header's version (and may run ahead of it)
    assert _header_version(header) <= _capi.DFA_DESC_VERSION


def test_descriptors_say_the_newest_version_both_sides_know():
    lib = _capi.library_desc_version()
    assert _capi.desc_version() == min(lib, _capi.DFA_DESC_VERSION)
    assert _capi.attn_desc(1, 1, 1, 1, 1, 8).version == _capi.desc_version()
    assert _capi.dist_desc(1, 1, 1, 1, 8).attn.version == _capi.desc_version()


def test_the_version_3_fields_sit_where_the_layout_puts_them():
    """softcap, head_dim_v, sinks, dsinks carved out of version 2's reserved[5] (bytes 96-136):
    the size stays 136 and reserved keeps its last 16 bytes."""
    want = {"softcap": (96, 4), "head_dim_v": (100, 4), "sinks": (104, 8), "dsinks": (112, 8), "reserved": (120, 16)}
    for f, (off, size) in want.items():
        assert (getattr(_capi.AttnDesc, f).offset, getattr(_capi.AttnDesc, f).size) == (off, size), f
    assert ctypes.sizeof(_capi.AttnDesc) == _capi.DFA_ATTN_DESC_SIZE_V3 == 136


def _c_offsets():
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    inc = os.path.join(REPO, "include")
    if not cc or not os.path.exists(os.path.join(inc, "distflash.h")):
        pytest.skip("needs a C compiler and include/distflash.h")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "distflash.h"', "int main(void) {",
             '  printf("attn sizeof %zu\\n", sizeof(dfa_attn_desc));',
             '  printf("dist sizeof %zu\\n", sizeof(dfa_dist_desc));']
    lines += [f'  printf("attn {f} %zu %zu\\n", offsetof(dfa_attn_desc, {f}), sizeof(((dfa_attn_desc *)0)->{f}));'
              for f in _fields_of_header()]
    lines += [f'  printf("dist {f} %zu %zu\\n", offsetof(dfa_dist_desc, {f}), sizeof(((dfa_dist_desc *)0)->{f}));'
              for f in DIST_FIELDS]
    lines += ["  return 0;", "}"]
    return cc, inc, "\n".join(lines)


def _render_version_header(into):
    """distflash.h includes distflash_version.h, which CMake generates from its template and the
    project() line; a checkout without a build has only the template, so render it the same way."""
    cmake = open(os.path.join(REPO, "CMakeLists.txt")).read()
    major, minor, patch = re.search(r"project\(distflash\s+VERSION\s+(\d+)\.(\d+)\.(\d+)", cmake).groups()
    text = open(os.path.join(REPO, "include", "distflash_version.h.in")).read()
    for name, value in (("MAJOR", major), ("MINOR", minor), ("PATCH", patch)):
        text = text.replace(f"@PROJECT_VERSION_{name}@", value)
    (into / "distflash_version.h").write_text(text)


def test_field_offsets_match_c(tmp_path):
    cc, inc, src = _c_offsets()
    (tmp_path / "offsets.c").write_text(src)
    _render_version_header(tmp_path)
    exe = tmp_path / "offsets"
    subprocess.run([cc, "-std=c11", "-I", inc, "-I", str(tmp_path), str(tmp_path / "offsets.c"), "-o", str(exe)],
                   check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    c = {}
    for line in filter(None, out):
        which, field, *nums = line.split()
        c[(which, field)] = tuple(int(n) for n in nums)
    assert c[("attn", "sizeof")] == (ctypes.sizeof(_capi.AttnDesc),)
    assert c[("dist", "sizeof")] == (ctypes.sizeof(_capi.DistDesc),)
    for which, cls, fields in (("attn", _capi.AttnDesc, _fields_of_header()), ("dist", _capi.DistDesc, DIST_FIELDS)):
        for f in fields:
            desc = getattr(cls, f)
            if f == "reserved" and which == "attn" and fields is not ATTN_FIELDS:
                assert c[(which, f)] == (96, 40)  # version 2's reserved[5], where version 3's fields now sit
                continue
            assert c[(which, f)] == (desc.offset, desc.size), f"{which}.{f}: C {c[(which, f)]}, ctypes {(desc.offset, desc.size)}"


def test_attn_desc_bytes_match_dfa_attn_desc_init():
    ours = _capi.attn_desc(2, 3, 5, 8, 4, 64)
    theirs = _capi.fn("dfa_attn_desc_init")(2, 3, 5, 8, 4, 64)
    assert bytes(ours) == bytes(theirs)
    assert ours.struct_size == 136 and ours.magic == _capi.DFA_DESC_MAGIC and ours.version == _capi.desc_version()
    assert bytes(ours)[4:8] == b"DFA1"  # little-endian, as the header says


def test_dist_desc_bytes_match_dfa_dist_desc_init():
    ours = _capi.dist_desc(2, 7, 8, 2, 32, causal=False, overlap=0)
    theirs = _capi.fn("dfa_dist_desc_init")(2, 7, 8, 2, 32)
    assert bytes(ours) == bytes(theirs)
    assert ours.struct_size == 192 and ours.attn.struct_size == 136 and ours.attn.magic == _capi.DFA_DESC_MAGIC


def test_a_filled_descriptor_is_accepted_and_a_bad_header_refused():
    """The library accepts our descriptor and refuses a corrupt header or reserved bytes the way
    the header says (whichever checks this build enforces), always with a DistflashError."""
    import torch
    q = torch.randn(1, 4, 2, 8)
    o = torch.empty_like(q)
    lse = torch.empty(1, 2, 4)
    good = _capi.attn_desc(1, 4, 4, 2, 2, 8)
    _capi.call("dfa_attn_fwd", ctypes.byref(good), q.data_ptr(), q.data_ptr(), q.data_ptr(), o.data_ptr(),
               lse.data_ptr())
    zero = _capi.AttnDesc()  # a zero-initialised descriptor is valid forever
    zero.batch, zero.seqlen_q, zero.seqlen_k, zero.num_heads, zero.num_kv_heads, zero.head_dim = 1, 4, 4, 2, 2, 8
    _capi.call("dfa_attn_fwd", ctypes.byref(zero), q.data_ptr(), q.data_ptr(), q.data_ptr(), o.data_ptr(),
               lse.data_ptr())
    for tweak in ("magic", "struct_size", "reserved"):
        bad = _capi.attn_desc(1, 4, 4, 2, 2, 8)
        if tweak == "magic":
            bad.magic = 0x12345678
        elif tweak == "struct_size":
            bad.struct_size = 7
        else:
            bad.reserved[1] = 1
        status = _capi.fn("dfa_attn_fwd")(ctypes.byref(bad), q.data_ptr(), q.data_ptr(), q.data_ptr(),
                                          o.data_ptr(), lse.data_ptr())
        if status == _capi.DFA_OK:
            pytest.skip("this library does not check descriptor headers yet")
        with pytest.raises(_capi.DistflashError):
            _capi.check(status, "dfa_attn_fwd")
