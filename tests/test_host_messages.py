"""House rule of the host code (csrc/common/host.h, ``num``): numbers in an error message are
formatted with ``num(...)``, never streamed by TORCH_CHECK's ostream. On the H200 machine's torch
build an integer streamed into an extension's error message crashes the process instead of raising
(seen twice: session 2, and session 9's QWEN38_GDN_TREE_SPLIT message). This scans every
TORCH_CHECK* call in csrc for message arguments that are integer constants, casts or literals."""
from __future__ import annotations

import re
from pathlib import Path

CSRC = Path(__file__).resolve().parents[1] / "csrc"
STRING_CONSTANTS = {"kOp"}  # k-prefixed names that are const char*
_INT_ARG = re.compile(r"^(\(?(int|unsigned|long|int64_t|int32_t|size_t|uint32_t|uint64_t)\)?\s*\(.*|k[A-Z]\w*|-?\d+)$")


def _skip_string(s: str, k: int) -> int:
    """Index just past the string literal that starts at s[k] == '"'."""
    e = k + 1
    while s[e] != '"':
        e += 2 if s[e] == "\\" else 1
    return e + 1


def _check_calls(src: str):
    """(line, body) of every TORCH_CHECK*( ... ) call."""
    for m in re.finditer(r"\bTORCH_CHECK\w*\s*\(", src):
        j, depth = m.end(), 1
        while depth:
            c = src[j]
            if c == '"':
                j = _skip_string(src, j)
                continue
            depth += c in "([{"
            depth -= c in ")]}"
            j += 1
        yield src[: m.start()].count("\n") + 1, src[m.end(): j - 1]


def _top_level_args(body: str) -> list[str]:
    out, depth, cur, k = [], 0, "", 0
    while k < len(body):
        c = body[k]
        if c == '"':
            e = _skip_string(body, k)
            cur, k = cur + body[k:e], e
            continue
        depth += c in "([{"
        depth -= c in ")]}"
        if c == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += c
        k += 1
    return out + [cur.strip()]


def streamed_integers(src: str) -> list[tuple[int, str]]:
    bad = []
    for line, body in _check_calls(src):
        for a in _top_level_args(body)[1:]:  # [0] is the condition
            if a not in STRING_CONSTANTS and _INT_ARG.match(a):
                bad.append((line, a))
    return bad


def test_the_scan_finds_streamed_integers():
    src = ('TORCH_CHECK_VALUE(r <= kMaxSplits, "qwen38.", op, ": 1..", kMaxSplits, ", got ", v);\n'
           'TORCH_CHECK(st == 0, "qwen38.", kOp, ": failed (status ", int(st), ")");\n'
           'TORCH_CHECK(ok(a, b), "x", num(kMaxSplits), f(1, 2), kOp, "(", 3, ")");\n')
    assert streamed_integers(src) == [(1, "kMaxSplits"), (2, "int(st)"), (3, "3")]


def test_no_integer_is_streamed_into_a_host_message():
    bad = []
    for p in sorted(CSRC.rglob("*")):
        if p.suffix in (".cpp", ".h", ".cu", ".cuh"):
            bad += [f"{p.relative_to(CSRC.parent)}:{line}: {a}" for line, a in streamed_integers(p.read_text())]
    assert not bad, "wrap these in num(...) (csrc/common/host.h):\n" + "\n".join(bad)
