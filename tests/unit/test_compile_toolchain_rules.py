"""Which compiler a compile = true variant needs where its passes run (lab.passes.compile)."""
from __future__ import annotations

from lab.inputs.variants import Variant
from lab.passes.compile import compile_kinds, parse_compiler_probe


def test_compile_kinds_follow_the_device_and_name_the_first_variant():
    vs = [Variant(batch_size=1, name="b1"), Variant(batch_size=2, compile=True, device="cpu", name="c-cpu"),
          Variant(batch_size=4, compile=True, device="auto", name="c-auto"),
          Variant(batch_size=8, compile=True, device="cuda", name="c-cuda")]
    assert compile_kinds(vs, gpu_host=False) == {"cpu": "c-cpu", "gpu": "c-cuda"}
    assert compile_kinds(vs[:1] + vs[2:3], gpu_host=True) == {"gpu": "c-auto"}
    assert compile_kinds(vs[:1] + vs[2:3], gpu_host=False) == {"cpu": "c-auto"}
    assert compile_kinds(vs[:1], gpu_host=True) == {}  # no compile variant: nothing to probe


def test_the_probe_line_is_read_from_the_end():
    assert parse_compiler_probe("a warning\nfound /usr/bin/g++\n") == ""
    assert parse_compiler_probe("missing InvalidCxxCompiler: No working C++ compiler found") == \
        "InvalidCxxCompiler: No working C++ compiler found"
    assert parse_compiler_probe("") == "the compiler probe printed nothing"
