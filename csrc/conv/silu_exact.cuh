// silu in float64 rounded to fp32 - the conv's contract, round_fp32(s / (1 + exp(-s))) with each
// double operation rounded to nearest - computed in fp32 arithmetic where that gives the same bits,
// in float64 elsewhere. Torch-free; compiles for the device and the host (the host emulation and
// tests/native/silu_check.cpp, which compares the two paths over fp32 inputs).
//
// Why: float64 runs at a small fraction of the fp32 rate on GB10 (sm_121) and at half of it on
// the H200, and a verify evaluates silu once per (node, channel): ~100 float64 operations each.
//
// The fp32 path evaluates y = s / (1 + e^-s) as an unevaluated pair of floats (hi + lo) with a
// relative error below 2^-40: e^-s by the table method (x = -s = (32 m + j) ln2/32 + r, |r| <=
// ln2/64; ln2/32 in three floats, so r is exact to ~2^-60; e^r = 1 + r + r^2/2 in float pairs plus
// r^3 (1/6 + r/24 + r^2/120) in fp32; 2^(j/32) as a float pair), then 1 + e^-s and the division
// with fma-exact remainders. Rounding test: RN_fp32(y) is hi unless y lies within 2^-40 |y| + |lo|
// of a midpoint between hi and a neighbour, i.e. unless |lo| + 2^-39 |hi| reaches half the gap to
// the neighbour on lo's side. The float64 contract value has a relative error below 2^-50 (exp
// within 1 ulp, then an add and a divide rounded to nearest), so where the test passes it rounds to
// hi too; where it fails (about 2^-14 of inputs), and outside s in [-64, 80] with |s| >= 2^-60
// (underflow and overflow of the pairs, zeros, infinities, NaN), the float64 formula itself runs. Every
// operation below is an IEEE fp32 operation rounded to nearest (explicit fma where written, no
// contraction), so the host and the device compute the same bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define QWEN38_SILU_HD __host__ __device__
#else
#define QWEN38_SILU_HD
#endif

namespace qwen38::conv::silu_detail {

QWEN38_SILU_HD inline float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
QWEN38_SILU_HD inline float fsub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
QWEN38_SILU_HD inline float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
QWEN38_SILU_HD inline float ffma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
QWEN38_SILU_HD inline float fdiv(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
QWEN38_SILU_HD inline uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
QWEN38_SILU_HD inline float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

// s + e exactly (Knuth's two-sum; any magnitudes), and (|a| >= |b|) the faster form.
QWEN38_SILU_HD inline void two_sum(float a, float b, float& s, float& e) {
  s = fadd(a, b);
  const float bb = fsub(s, a);
  e = fadd(fsub(a, fsub(s, bb)), fsub(b, bb));
}
QWEN38_SILU_HD inline void fast_two_sum(float a, float b, float& s, float& e) {
  s = fadd(a, b);
  e = fsub(b, fsub(s, a));
}

struct Pair {
  float hi, lo;
};

// 2^(j/32), j = 0..31, as (hi, lo): hi = RN(value), lo = RN(value - hi) (scripts/gen_exp2_table.py).
#define QWEN38_EXP2_TABLE(X) \
  X(0x1p+0f, 0.0f)  /* 2^(0/32) */ \
  X(0x1.059b0ep+0f, -0x1.9d4f52p-25f)  /* 2^(1/32) */ \
  X(0x1.0b5586p+0f, 0x1.9f3122p-25f)  /* 2^(2/32) */ \
  X(0x1.11301ep+0f, -0x1.fdb496p-25f)  /* 2^(3/32) */ \
  X(0x1.172b84p+0f, -0x1.c15742p-27f)  /* 2^(4/32) */ \
  X(0x1.1d4874p+0f, -0x1.d2e8cap-25f)  /* 2^(5/32) */ \
  X(0x1.2387a6p+0f, 0x1.ceac48p-25f)  /* 2^(6/32) */ \
  X(0x1.29e9ep+0f, -0x1.5c0424p-25f)  /* 2^(7/32) */ \
  X(0x1.306fep+0f, 0x1.4636e2p-25f)  /* 2^(8/32) */ \
  X(0x1.371a74p+0f, -0x1.18aac6p-25f)  /* 2^(9/32) */ \
  X(0x1.3dea64p+0f, 0x1.824684p-25f)  /* 2^(10/32) */ \
  X(0x1.44e086p+0f, 0x1.8624b4p-30f)  /* 2^(11/32) */ \
  X(0x1.4bfdaep+0f, -0x1.593abcp-25f)  /* 2^(12/32) */ \
  X(0x1.5342b6p+0f, -0x1.2c561p-25f)  /* 2^(13/32) */ \
  X(0x1.5ab07ep+0f, -0x1.5bd5ecp-27f)  /* 2^(14/32) */ \
  X(0x1.6247ecp+0f, -0x1.f8b55p-25f)  /* 2^(15/32) */ \
  X(0x1.6a09e6p+0f, 0x1.9fcef4p-26f)  /* 2^(16/32) */ \
  X(0x1.71f75ep+0f, 0x1.1d8beep-25f)  /* 2^(17/32) */ \
  X(0x1.7a1148p+0f, -0x1.829fdp-25f)  /* 2^(18/32) */ \
  X(0x1.82589ap+0f, -0x1.accc7cp-26f)  /* 2^(19/32) */ \
  X(0x1.8ace54p+0f, 0x1.15506ep-27f)  /* 2^(20/32) */ \
  X(0x1.93737cp+0f, -0x1.e64744p-25f)  /* 2^(21/32) */ \
  X(0x1.9c4918p+0f, 0x1.51f848p-27f)  /* 2^(22/32) */ \
  X(0x1.a5503cp+0f, -0x1.b83b54p-25f)  /* 2^(23/32) */ \
  X(0x1.ae89fap+0f, -0x1.a94b14p-26f)  /* 2^(24/32) */ \
  X(0x1.b7f77p+0f, -0x1.a09438p-25f)  /* 2^(25/32) */ \
  X(0x1.c199bep+0f, -0x1.3d56b2p-27f)  /* 2^(26/32) */ \
  X(0x1.cb720ep+0f, -0x1.8837ccp-27f)  /* 2^(27/32) */ \
  X(0x1.d5818ep+0f, -0x1.822dbcp-27f)  /* 2^(28/32) */ \
  X(0x1.dfc974p+0f, -0x1.908c94p-25f)  /* 2^(29/32) */ \
  X(0x1.ea4afap+0f, 0x1.52486cp-27f)  /* 2^(30/32) */ \
  X(0x1.f50766p+0f, -0x1.246ebp-26f)  /* 2^(31/32) */ \

#define QWEN38_EXP2_HI(hi, lo) hi,
#define QWEN38_EXP2_LO(hi, lo) lo,
#if defined(__CUDACC__)
__device__ const float kExp2HiDev[32] = {QWEN38_EXP2_TABLE(QWEN38_EXP2_HI)};  // read through L1 (__ldg): a
__device__ const float kExp2LoDev[32] = {QWEN38_EXP2_TABLE(QWEN38_EXP2_LO)};  // warp's lanes index it apart
#endif
inline constexpr float kExp2Hi[32] = {QWEN38_EXP2_TABLE(QWEN38_EXP2_HI)};
inline constexpr float kExp2Lo[32] = {QWEN38_EXP2_TABLE(QWEN38_EXP2_LO)};
#undef QWEN38_EXP2_HI
#undef QWEN38_EXP2_LO

QWEN38_SILU_HD inline Pair exp2_table(int j) {
#if defined(__CUDA_ARCH__)
  return Pair{__ldg(kExp2HiDev + j), __ldg(kExp2LoDev + j)};
#else
  return Pair{kExp2Hi[j], kExp2Lo[j]};
#endif
}

// ln2 / 32 = kC1 + kC2 + kC3 (kC1 with 12 significant bits: n kC1 is exact for |n| < 4096).
constexpr float kC1 = 0x1.62ep-6f, kC2 = 0x1.0bfbe8p-20f, kC3 = 0x1.cf79acp-45f;
constexpr float kInvLn2x32 = 0x1.715476p+5f;  // 32 / ln2

// e^x for |x| <= 80 as a pair, relative error below ~2^-43.
QWEN38_SILU_HD inline Pair exp_pair(float x) {
  const float nf = rintf(fmul(x, kInvLn2x32));  // |n| <= 3694
  const int n = int(nf);
  const int j = n & 31, m = (n - j) / 32;      // n = 32 m + j, j in [0, 32)
  // r = x - n ln2/32: x - n kC1 is exact (fma; the result needs fewer than 24 bits), n kC2 exact
  // as a pair, n kC3 below 2^-30
  const float r0 = ffma(-nf, kC1, x);
  const float p = fmul(nf, kC2), pe = ffma(nf, kC2, -p);
  float th, tl;
  two_sum(r0, -p, th, tl);
  tl = fsub(fsub(tl, pe), fmul(nf, kC3));
  float rh, rl;
  fast_two_sum(th, tl, rh, rl);
  // e^r = 1 + r + r^2/2 + r^3 (1/6 + r (1/24 + r/120)) (+ r^6/720 < 2^-47): the cubic tail in fp32
  const float tail = fmul(fmul(fmul(rh, rh), rh), ffma(rh, ffma(rh, 1.0f / 120.0f, 1.0f / 24.0f), 1.0f / 6.0f));
  const float q = fmul(rh, rh), qe = ffma(rh, rh, -q);  // rh^2 exactly
  float ah, al, bh, bl;
  fast_two_sum(1.0f, rh, ah, al);
  two_sum(ah, fmul(0.5f, q), bh, bl);
  const float lo = fadd(fadd(fadd(fadd(ffma(rh, rl, tail), fmul(0.5f, qe)), rl), al), bl);
  float sh, sl;
  fast_two_sum(bh, lo, sh, sl);
  // times 2^(j/32) (a pair) and 2^m (exact: no overflow or underflow of hi for |x| <= 80)
  const Pair t = exp2_table(j);
  const float eh = fmul(sh, t.hi);
  const float el = ffma(sh, t.lo, ffma(sl, t.hi, ffma(sh, t.hi, -eh)));
  float oh, ol;
  fast_two_sum(eh, el, oh, ol);
  return Pair{ldexpf(oh, m), ldexpf(ol, m)};
}

// The contract's float64 formula.
QWEN38_SILU_HD inline float silu_f64(float s) {
  const double d = double(s);
#if defined(__CUDA_ARCH__)
  return __double2float_rn(__ddiv_rn(d, __dadd_rn(1.0, exp(-d))));
#else
  return float(d / (1.0 + std::exp(-d)));
#endif
}

// The fp32 path: true and the result when its rounding is certain, false otherwise.
QWEN38_SILU_HD inline bool silu_fast(float s, float& out) {
  if (!(fabsf(s) >= 0x1p-60f && s >= -64.0f && s <= 80.0f)) return false;  // (NaN fails too)
  const Pair e = exp_pair(-s);
  float dh, dl;
  two_sum(1.0f, e.hi, dh, dl);
  dl = fadd(dl, e.lo);
  fast_two_sum(dh, dl, dh, dl);  // D = 1 + e^-s
  const float q = fdiv(s, dh);
  const float rem = ffma(-q, dl, ffma(-q, dh, s));  // s - q D (the first fma exact)
  const float ql = fdiv(rem, dh);
  float yh, yl;
  fast_two_sum(q, ql, yh, yl);
  // half the gap from yh to its neighbour on yl's side (|yh| >= 2^-100 here, else the float64
  // path: |y| >= 2^-61 for s >= -40 and ~|s| e^s below that)
  const uint32_t ub = bits_of(yh) & 0x7fffffffu;
  if (ub < 0x0d800000u) return false;  // |yh| < 2^-100
  float half = float_of((ub & 0x7f800000u) - (24u << 23));
  if ((ub & 0x007fffffu) == 0 && (bits_of(yl) ^ bits_of(yh)) >> 31 && yl != 0.0f) half = fmul(half, 0.5f);
  if (!(fadd(fabsf(yl), fmul(fabsf(yh), 0x1p-39f)) < half)) return false;
  out = yh;
  return true;
}

}  // namespace qwen38::conv::silu_detail

namespace qwen38::conv {

// round_fp32(silu_f64(s)), the contract (see the top of this file).
QWEN38_SILU_HD inline float silu_exact(float s) {
  float y;
  return silu_detail::silu_fast(s, y) ? y : silu_detail::silu_f64(s);
}

}  // namespace qwen38::conv
