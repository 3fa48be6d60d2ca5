// Launch variants of the skinny weight-GEMM kernels (nvfp4_linear, fp8_block_linear), torch-free.
//
// A variant is (ksplit, nt_narrow, nt_wide, prefill_rows): warps per block splitting K (this fixes
// the order of the fp32 sums, so it is a function of the weight shape (N, K) only: row invariance),
// the 8-row weight tiles each warp walks for 1..16 rows (narrow) and 17..32 rows (wide) (NT changes
// no sum: any NT gives the same bits), and the row count from which the op's "auto" prefill choice
// leaves the 32-row slices of the skinny kernel for its prefill strategy (NVFP4: dequantize + one
// GEMM; FP8: the tensor-core kernel), measured per shape by the sweep; 0: the op's built-in rule. The tile tables (tables/<arch>/nvfp4_skinny.json,
// nvfp4_skinny_wide.json, fp8_block.json; qwen38_kernels/tables.py) register measured variants per
// (N, K) at import; other shapes get skinny_default().
#pragma once

#include <cstdint>

namespace qwen38::gemm {

enum class SkinnyOp : int { kNvfp4 = 0, kFp8Block = 1 };

struct SkinnyVariant {
  int ksplit = 1;     // 1, 2, 4, 8
  int nt_narrow = 1;  // 1, 2, 4
  int nt_wide = 1;    // 1, 2, 4 (17..32 rows hold twice the activation registers)
  int64_t prefill_rows = 0;  // 0 (the op's rule) or more than 32
};

// The rule for shapes without a table entry: a pure function of (N, K), the same on every GPU.
SkinnyVariant skinny_default(int64_t n, int64_t k);

// True when v's values are ones the kernels are compiled for.
bool skinny_variant_valid(const SkinnyVariant& v);

// Registry (thread-safe). set() replaces an entry; clear() drops an op's entries and its "table
// loaded" mark. lookup() returns the registered variant or the default; *from_table says which.
void set_skinny_variant(SkinnyOp op, int64_t n, int64_t k, const SkinnyVariant& v);
void clear_skinny_variants(SkinnyOp op);
SkinnyVariant lookup_skinny_variant(SkinnyOp op, int64_t n, int64_t k, bool* from_table);
// Whether any entry is registered for op (a table was loaded).
bool skinny_table_loaded(SkinnyOp op);
// True the first time a (op, N, K) missing from a loaded table is seen (for one warning per shape).
bool skinny_first_miss(SkinnyOp op, int64_t n, int64_t k);

}  // namespace qwen38::gemm
