// NVFP4 decode: e2m1 nibbles and e4m3 block scales -> exact 16-bit products for mma operands.
// Torch-free. The bit-placement helpers are __host__ __device__ so a host test can check all 256
// byte values (tests/test_nvfp4_decode.py builds csrc/common/nvfp4_decode_check.cpp).
//
// e2m1 nibble: bit 3 sign, bits 2:0 = (e1 e0 m) indexing {0, 0.5, 1, 1.5, 2, 3, 4, 6}
// (exponent bias 1, one mantissa bit, e = 0 subnormal). In a packed byte the LOW nibble is the
// element with the lower k.
//
// Software decode (sm_90a, which has no e2m1 conversion): place the sign at bit 15 and the three
// magnitude bits at the bottom of the exponent field and the top of the mantissa of a 16-bit
// float. Exponent field e and mantissa bit m then encode 2^(e - bias) * (1 + m/2), or the
// subnormal 2^(1 - bias) * m/2 when e = 0: the e2m1 value times 2^(1 - bias) exactly, zero included.
//
//   fp16  (bias 15): s eeeee mmmmmmmmmm   magnitude at bits 11:9  -> value * 2^-14
//   bf16  (bias 127): s eeeeeeee mmmmmmm  magnitude at bits 8:6   -> value * 2^-126
//
// The 2^14 (2^126) is put back together with the block scale in two exact multiplies
// (raw * 2^7) * (scale * 2^7) (bf16: 2^63 twice), so no intermediate overflows (scale <= 448) or
// leaves the normal range. Every e2m1 x e4m3 product has at most 6 significant bits: exact in
// fp16 (range 2^-10 .. 2688) and in bf16.
// Hardware decode (sm_100a/sm_120a/sm_121a): cvt.rn.f16x2.e2m1x2 (one F2FP.F16.E2M1.UNPACK_B per
// byte) yields the same values; the products are identical bit for bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace qwen38::nvfp4 {

// Two e2m1 nibbles of `byte` (bits 7:0) as fp16x2 bit patterns (low nibble in the low half),
// each equal to the e2m1 value times 2^-14.
__host__ __device__ __forceinline__ uint32_t e2m1x2_raw_f16(uint32_t byte) {
  const uint32_t t = byte | (byte << 12);  // low nibble at bits 3:0, high nibble at bits 19:16
  return ((t & 0x00070007u) << 9) | ((t & 0x00080008u) << 12);
}

// The same as bf16x2 bit patterns, each equal to the e2m1 value times 2^-126.
__host__ __device__ __forceinline__ uint32_t e2m1x2_raw_bf16(uint32_t byte) {
  const uint32_t t = byte | (byte << 12);
  return ((t & 0x00070007u) << 6) | ((t & 0x00080008u) << 12);
}

// The same bits as e2m1x2_raw_bf16 in one multiply-add, one mask, one multiply and one mask: after
// byte * (1 + 2^12) the two nibbles sit 16 bits apart (bits 3:0 and 19:16), and times 2^6 + 2^12
// each nibble's two copies share no bit (bits 9:6 and 15:12), so nothing carries (equal for all 256
// bytes: tests/test_nvfp4_decode.py). For the prefill kernel, whose B pairs are the two nibbles of
// one byte (k 2t, 2t + 1).
__host__ __device__ __forceinline__ uint32_t e2m1x2_raw_bf16_mul(uint32_t byte) {
  return (((byte * 0x1001u) & 0x000F000Fu) * 0x1040u) & 0x81C081C0u;
}

// QWEN38_HW_E2M1: compiling device code for an arch-specific target with the e2m1 conversion.
#if defined(__CUDA_ARCH_FEAT_SM121_ALL) || defined(__CUDA_ARCH_FEAT_SM120_ALL) || \
    defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL)
#define QWEN38_HW_E2M1 1
#endif

__device__ __forceinline__ uint32_t as_u32(__half2 v) { return *reinterpret_cast<uint32_t*>(&v); }
__device__ __forceinline__ uint32_t as_u32(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t*>(&v); }
__device__ __forceinline__ __half2 as_h2(uint32_t v) { return *reinterpret_cast<__half2*>(&v); }
__device__ __forceinline__ __nv_bfloat162 as_b2(uint32_t v) { return *reinterpret_cast<__nv_bfloat162*>(&v); }

// Two e4m3 scale bytes (low byte first) -> fp16x2 (exact: e4m3 is a subset of fp16).
__device__ __forceinline__ __half2 e4m3x2_to_h2(uint16_t two) {
  uint32_t r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(two));
  return as_h2(r);
}

// Two e4m3 bytes (low byte = lower k) -> the 16-bit pair of an mma operand in T (fp16 or bf16),
// exactly: e4m3 is a subset of both (bf16 through fp32).
template <typename T> __device__ __forceinline__ uint32_t e4m3x2_to(uint16_t two);
template <> __device__ __forceinline__ uint32_t e4m3x2_to<__half>(uint16_t two) { return as_u32(e4m3x2_to_h2(two)); }
template <> __device__ __forceinline__ uint32_t e4m3x2_to<__nv_bfloat16>(uint16_t two) {
  const float2 f = __half22float2(e4m3x2_to_h2(two));
  return as_u32(__floats2bfloat162_rn(f.x, f.y));
}

// Per-block multiplier for the decode below: scale * 2^7 (fp16) or scale * 2^63 (bf16) in both
// halves, from one e4m3 scale already in fp16. Exact.
template <typename T> struct ScaleOf;
template <> struct ScaleOf<__half> {
  using T2 = __half2;
  static __device__ __forceinline__ T2 make(__half s) {
#ifdef QWEN38_HW_E2M1
    return __half2half2(s);  // the hardware decode gives true values: multiply by the scale alone
#else
    return __hmul2(__half2half2(s), __float2half2_rn(128.0f));  // 2^7
#endif
  }
};
template <> struct ScaleOf<__nv_bfloat16> {
  using T2 = __nv_bfloat162;
  static __device__ __forceinline__ T2 make(__half s) {
    const float f = __half2float(s);  // exact
#ifdef QWEN38_HW_E2M1
    return __float2bfloat162_rn(f);
#else
    return __float2bfloat162_rn(f * 9.2233720368547758e18f);  // * 2^63, exact in fp32 and bf16
#endif
  }
};

// Byte of two e2m1 -> the 16-bit pair (low nibble in the low half) times the block scale `s2`
// (as made by ScaleOf<T>::make), exactly e2m1 * scale.
template <typename T>
__device__ __forceinline__ uint32_t decode_scaled(uint32_t byte, typename ScaleOf<T>::T2 s2);

template <>
__device__ __forceinline__ uint32_t decode_scaled<__half>(uint32_t byte, __half2 s2) {
#ifdef QWEN38_HW_E2M1
  uint32_t h;
  asm("{\n .reg .b8 b;\n cvt.u8.u32 b, %1;\n cvt.rn.f16x2.e2m1x2 %0, b;\n}" : "=r"(h) : "r"(byte));
  return as_u32(__hmul2(as_h2(h), s2));
#else
  const __half2 raw = as_h2(e2m1x2_raw_f16(byte));
  return as_u32(__hmul2(__hmul2(raw, __float2half2_rn(128.0f)), s2));  // (v 2^-14 * 2^7) * (s 2^7)
#endif
}

template <>
__device__ __forceinline__ uint32_t decode_scaled<__nv_bfloat16>(uint32_t byte, __nv_bfloat162 s2) {
#ifdef QWEN38_HW_E2M1
  uint32_t h;
  asm("{\n .reg .b8 b;\n cvt.u8.u32 b, %1;\n cvt.rn.f16x2.e2m1x2 %0, b;\n}" : "=r"(h) : "r"(byte));
  const float2 f = __half22float2(as_h2(h));  // exact
  return as_u32(__hmul2(__floats2bfloat162_rn(f.x, f.y), s2));
#else
  const __nv_bfloat162 raw = as_b2(e2m1x2_raw_bf16(byte));
  const __nv_bfloat162 k63 = __float2bfloat162_rn(9.2233720368547758e18f);  // 2^63
  return as_u32(__hmul2(__hmul2(raw, k63), s2));  // (v 2^-126 * 2^63) * (s 2^63)
#endif
}

// ---- word-level decode for the skinny kernel ---------------------------------------------------
// A 32-bit word holds 8 e2m1 nibbles (nibble i = element i, bits 4i..4i+3). pair<I>(word) is the
// 16-bit pair (element I in the low half, element I + 4 in the high half), I = 0..3, as raw bit
// patterns that are exactly the e2m1 value times 2^-14 (fp16) or 2^-126 (bf16): magnitude bits
// (e1 e0 m) at the bottom of the exponent field / top of the mantissa, sign at bit 15. Both
// nibbles of a pair sit 16 bits apart in the word's halves' positions after one shift, so a pair
// costs two shifts and two logic ops.
template <int I>
__host__ __device__ __forceinline__ uint32_t shl(uint32_t w) {
  if constexpr (I >= 0) return w << I; else return w >> (-I);
}
template <int I>
__host__ __device__ __forceinline__ uint32_t pair_raw_f16(uint32_t w) {
  return (shl<9 - 4 * I>(w) & 0x0E000E00u) | (shl<12 - 4 * I>(w) & 0x80008000u);
}
// bf16: (shl<6 - 4I>(w) & 0x01C001C0) | (shl<12 - 4I>(w) & 0x80008000), computed as one mask, one
// multiply and one mask: the pair's two nibbles (one in each half) times 2^a + 2^(a+6) put their
// magnitude bits at 6..8 and their sign at 15 (of each half) from two copies that share no bit
// position (a + 3 < a + 6), so the sum carries nothing; pairs 2, 3 share one shift of the word.
// Equal to the two-shift form for all 2^32 words (checked exhaustively on the host); 3 instructions
// a pair instead of 4.
template <int I>
__host__ __device__ __forceinline__ uint32_t pair_raw_bf16(uint32_t w) {
  const uint32_t v = I >= 2 ? w >> 8 : w;
  constexpr uint32_t kNibbles = I % 2 == 0 ? 0x000F000Fu : 0x00F000F0u;
  constexpr uint32_t kCopies = I % 2 == 0 ? (1u << 6) + (1u << 12) : (1u << 2) + (1u << 8);
  return ((v & kNibbles) * kCopies) & 0x81C081C0u;
}

// One e4m3 block scale (as fp16, exact) -> the pair multiplier of PairDecode<T>.
//   software decode: raw (v 2^-14 | v 2^-126) * (s 2^7 | s 2^119) = v s 2^-7
//   hardware decode: v * (s 2^-7)                                  = v s 2^-7
// Every v*s (at most 6 significant bits, a multiple of 2^-10, at most 2688) times 2^-7 is exact in
// fp16 and bf16, so B = v s 2^-7 exactly; the kernel multiplies its fp32 sums by 2^7 (exact).
constexpr float kPairUnscale = 128.0f;

template <typename T> struct PairDecode;
template <> struct PairDecode<__half> {
  using T2 = __half2;
  static __device__ __forceinline__ T2 scale(__half s) {
#ifdef QWEN38_HW_E2M1
    return __hmul2(__half2half2(s), __float2half2_rn(0.0078125f));  // s 2^-7 (exact, >= 2^-16)
#else
    return __hmul2(__half2half2(s), __float2half2_rn(128.0f));  // s 2^7 <= 57344
#endif
  }
};
template <> struct PairDecode<__nv_bfloat16> {
  using T2 = __nv_bfloat162;
  static __device__ __forceinline__ T2 scale(__half s) {
    const float f = __half2float(s);
#ifdef QWEN38_HW_E2M1
    return __float2bfloat162_rn(f * 0.0078125f);
#else
    return __float2bfloat162_rn(f * 6.6461399789245794e35f);  // s 2^119 < 2^128
#endif
  }
};

// The four pairs of a word, each times the block multiplier: out[i] = (elem i, elem i+4) * v s 2^-7.
template <typename T>
__device__ __forceinline__ void decode_word(uint32_t (&out)[4], uint32_t w, typename PairDecode<T>::T2 s2);

#ifdef QWEN38_HW_E2M1
__device__ __forceinline__ uint32_t cvt_e2m1x2(uint32_t byte) {
  uint32_t h;
  asm("{\n .reg .b8 b;\n cvt.u8.u32 b, %1;\n cvt.rn.f16x2.e2m1x2 %0, b;\n}" : "=r"(h) : "r"(byte));
  return h;
}
// fp16 pairs (elements 2j, 2j+1) of the four bytes -> (i, i+4) pairs, true values.
__device__ __forceinline__ void hw_pairs(uint32_t (&h)[4], uint32_t w) {
  const uint32_t b0 = cvt_e2m1x2(w & 0xffu), b1 = cvt_e2m1x2((w >> 8) & 0xffu);
  const uint32_t b2 = cvt_e2m1x2((w >> 16) & 0xffu), b3 = cvt_e2m1x2(w >> 24);
  h[0] = __byte_perm(b0, b2, 0x5410);  // (e0, e4)
  h[1] = __byte_perm(b0, b2, 0x7632);  // (e1, e5)
  h[2] = __byte_perm(b1, b3, 0x5410);  // (e2, e6)
  h[3] = __byte_perm(b1, b3, 0x7632);  // (e3, e7)
}
#endif

template <>
__device__ __forceinline__ void decode_word<__half>(uint32_t (&out)[4], uint32_t w, __half2 s2) {
#ifdef QWEN38_HW_E2M1
  uint32_t h[4];
  hw_pairs(h, w);
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = as_u32(__hmul2(as_h2(h[i]), s2));
#else
  out[0] = as_u32(__hmul2(as_h2(pair_raw_f16<0>(w)), s2));
  out[1] = as_u32(__hmul2(as_h2(pair_raw_f16<1>(w)), s2));
  out[2] = as_u32(__hmul2(as_h2(pair_raw_f16<2>(w)), s2));
  out[3] = as_u32(__hmul2(as_h2(pair_raw_f16<3>(w)), s2));
#endif
}

template <>
__device__ __forceinline__ void decode_word<__nv_bfloat16>(uint32_t (&out)[4], uint32_t w, __nv_bfloat162 s2) {
#ifdef QWEN38_HW_E2M1
  uint32_t h[4];
  hw_pairs(h, w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(as_h2(h[i]));  // exact
    out[i] = as_u32(__hmul2(__floats2bfloat162_rn(f.x, f.y), s2));
  }
#else
  out[0] = as_u32(__hmul2(as_b2(pair_raw_bf16<0>(w)), s2));
  out[1] = as_u32(__hmul2(as_b2(pair_raw_bf16<1>(w)), s2));
  out[2] = as_u32(__hmul2(as_b2(pair_raw_bf16<2>(w)), s2));
  out[3] = as_u32(__hmul2(as_b2(pair_raw_bf16<3>(w)), s2));
#endif
}

// The two e2m1 of one byte (low nibble in the low half) times the pair multiplier of PairDecode<T>
// (made from the element's block scale): exactly v s 2^-7, like decode_word (the prefill kernel).
template <typename T>
__device__ __forceinline__ uint32_t decode_byte(uint32_t byte, typename PairDecode<T>::T2 s2);

template <>
__device__ __forceinline__ uint32_t decode_byte<__half>(uint32_t byte, __half2 s2) {
#ifdef QWEN38_HW_E2M1
  return as_u32(__hmul2(as_h2(cvt_e2m1x2(byte)), s2));
#else
  return as_u32(__hmul2(as_h2(e2m1x2_raw_f16(byte)), s2));
#endif
}

template <>
__device__ __forceinline__ uint32_t decode_byte<__nv_bfloat16>(uint32_t byte, __nv_bfloat162 s2) {
#ifdef QWEN38_HW_E2M1
  const float2 f = __half22float2(as_h2(cvt_e2m1x2(byte)));  // exact
  return as_u32(__hmul2(__floats2bfloat162_rn(f.x, f.y), s2));
#else
  return as_u32(__hmul2(as_b2(e2m1x2_raw_bf16_mul(byte)), s2));
#endif
}

}  // namespace qwen38::nvfp4
