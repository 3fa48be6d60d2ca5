"""Prints the constants of csrc/conv/silu_exact.cuh: ln2/32 split into three floats (C1 with 12
significant bits, so that n * C1 is exact for |n| < 4096), 32/ln2 as a float, and 2^(j/32),
j = 0..31, as float pairs (hi = RN(value), lo = RN(value - hi)). Exact arithmetic (decimal, 80
digits); tests/test_conv.py checks the header against this."""
from __future__ import annotations

import math
import struct
from decimal import Decimal, getcontext

getcontext().prec = 80
LN2 = Decimal(2).ln()


def f32(x: Decimal) -> float:
    """x rounded to the nearest float32 (ties to even), without a double rounding through float64."""
    d = struct.unpack("f", struct.pack("f", float(x)))[0]
    bits = struct.unpack("I", struct.pack("f", d))[0]
    cands = []
    for b in (bits - 1, bits, bits + 1):
        if 0 <= b < 2 ** 32:
            cands.append(struct.unpack("f", struct.pack("I", b))[0])
    if x < 0:  # bit patterns of negative floats order the other way; try both neighbours anyway
        nb = struct.unpack("I", struct.pack("f", -d))[0]
        cands += [-struct.unpack("f", struct.pack("I", b))[0] for b in (nb - 1, nb + 1)]
    best = min(cands, key=lambda c: (abs(Decimal(c) - x), struct.unpack("I", struct.pack("f", c))[0] & 1))
    return best


def hexf(x: float) -> str:
    if x == 0:
        return "0.0f"
    h = float(abs(x)).hex()     # '0x1.xxxxxp+e'
    mant, exp = h[2:].split("p")
    mant = mant.rstrip("0").rstrip(".")
    return f"{'-' if x < 0 else ''}0x{mant}p{exp}f"


def constants() -> dict:
    c = LN2 / 32
    e = math.floor(math.log2(float(c)))
    scale = Decimal(2) ** (11 - e)
    c1 = Decimal(int((c * scale).to_integral_value(rounding="ROUND_HALF_EVEN"))) / scale
    c2 = Decimal(f32(c - c1))
    c3 = Decimal(f32(c - c1 - c2))
    table = []
    for j in range(32):
        t = (Decimal(j) / 32 * LN2).exp()
        hi = f32(t)
        table.append((hi, f32(t - Decimal(hi))))
    return {"C1": float(c1), "C2": float(c2), "C3": float(c3), "INV": f32(Decimal(32) / LN2), "table": table}


def main() -> None:
    k = constants()
    print(f"C1 {hexf(k['C1'])}  C2 {hexf(k['C2'])}  C3 {hexf(k['C3'])}  32/ln2 {hexf(k['INV'])}")
    for j, (hi, lo) in enumerate(k["table"]):
        print(f"    {{{hexf(hi)}, {hexf(lo)}}},  // 2^({j}/32)")


if __name__ == "__main__":
    main()
