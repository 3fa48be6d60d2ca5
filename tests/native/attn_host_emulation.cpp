// Runs the decode-attention kernels (csrc/attn/attn_kernel.cuh: attn_decode_kernel, then
// attn_merge_kernel when a row can have several splits) on the host, for machines without a GPU, on
// the CTA runtime of emu_cta.h / emu_cuda.h and the tensor-core models of emu_mma.h (its mma's bits
// are a model's, not a GPU's). What this checks: the token table and visible-draft lists, the step
// walk (prefix chunks shared, gathered chunks per token, split ranges), the cp.async slot pipeline
// and its barriers, the fragment layouts of q, K, P and V, the online softmax, the workspace and the
// merge, the padding rows - against the reference (tests/test_attn_emulation.py), and that a verify
// row equals its one-token call after compaction, bit for bit, under the model.
//
//   attn_host_emulation DIR
// DIR holds params.txt (b, t, hq, hkv, d, slots, f16, scale_bits (the fp32 scale_log2's bits),
// copies early/late, sched rr/prio, and the files q, k, v, kv_lens, lengths and mask name; lengths
// and mask may be absent) and the tensors: q [B, T, Hq, D], k, v [B, Hkv, L, D] (16-bit, contiguous),
// kv_lens, lengths [B] int64, mask [B, T, T] uint8; writes o.bin [B, T, Hq, D] (16-bit).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "emu_cta.h"
#include "emu_io.h"
#include "emu_mma.h"
#include "emu_cuda.h"

#include "attn/attn_kernel.cuh"

namespace {

using namespace qwen38::attn;

alignas(128) unsigned char g_smem[128 * 1024];  // (3 K/V slots at D 256: up to 118 KB)

template <typename T, int D, int MT, int S>
void run_split(const Params& p) {
  const int tpc = MT * (16 / p.group);
  const unsigned gx = unsigned((p.tokens + tpc - 1) / tpc), gy = unsigned(p.hkv * p.splits);
  emu::g_grid_dim[0] = gx, emu::g_grid_dim[1] = gy, emu::g_grid_dim[2] = unsigned(p.batch);
  for (unsigned z = 0; z < unsigned(p.batch); ++z)
    for (unsigned y = 0; y < gy; ++y)
      for (unsigned x = 0; x < gx; ++x)
        emu::run_cta(emu::Dim3{x, y, z}, kThreads, [&p]() { attn_decode_kernel<T, D, MT, S>(p); });
  if (p.splits <= 1) return;
  const int64_t rows = int64_t(p.batch) * p.tokens * p.hq;
  const unsigned mx = unsigned((rows + kWarps - 1) / kWarps);
  emu::g_grid_dim[0] = mx, emu::g_grid_dim[1] = 1, emu::g_grid_dim[2] = 1;
  for (unsigned x = 0; x < mx; ++x)
    emu::run_cta(emu::Dim3{x, 0u, 0u}, kThreads, [&p]() { attn_merge_kernel<T, D>(p); });
}

template <typename T, int D, int MT>
void run_mt(const Params& p) {  // p.ring: 2 or 3 K/V slots (the launcher's auto depends on the device)
  if (p.ring == 3) run_split<T, D, MT, 3>(p);
  else run_split<T, D, MT, 2>(p);
}

template <typename T, int D>
void run_d(const Params& p) {
  if (p.tokens > 16 / p.group) run_mt<T, D, 2>(p);  // the launcher's rule (attn_kernel.cu)
  else run_mt<T, D, 1>(p);
}

template <typename T>
void run(const Params& p) {
  if (p.head_dim == 64) run_d<T, 64>(p);
  else if (p.head_dim == 128) run_d<T, 128>(p);
  else run_d<T, 256>(p);
}

}  // namespace

int main(int argc, char** argv) {
  emu::RunDir rd(argc, argv);
  emu::use_smem(g_smem, sizeof(g_smem));
  emu::g_early_copies = rd.get("copies") == "early";
  emu::g_prio = rd.get("sched") == "prio";
  Params p;
  p.batch = std::stoi(rd.get("b"));
  p.tokens = std::stoi(rd.get("t"));
  p.hq = std::stoi(rd.get("hq"));
  p.hkv = std::stoi(rd.get("hkv"));
  p.group = p.hq / p.hkv;
  p.head_dim = std::stoi(rd.get("d"));
  p.slots = std::stoll(rd.get("slots"));
  p.f16 = rd.get("f16") == "1";
  const uint32_t bits = uint32_t(std::stoul(rd.get("scale_bits")));
  std::memcpy(&p.scale_log2, &bits, 4);
  const int64_t d = p.head_dim, L = p.slots;
  p.q = rd.ptr("q");
  p.q_sh = d, p.q_st = p.hq * d, p.q_sb = p.tokens * p.hq * d;
  p.k = rd.ptr("k");
  p.v = rd.ptr("v");
  p.k_sl = p.v_sl = d, p.k_sh = p.v_sh = L * d, p.k_sb = p.v_sb = p.hkv * L * d;
  p.kv_lens = rd.ptr("kv_lens");
  p.kv_lens64 = true;
  p.lengths = rd.ptr("lengths");  // (absent: none)
  p.lengths64 = true;
  p.mask = static_cast<const bool*>(rd.ptr("mask"));
  p.mask_sb = int64_t(p.tokens) * p.tokens, p.mask_st = p.tokens, p.mask_sj = 1;
  if (const std::string r = rd.get("split"); r != "none") {  // "MIN,MAX" (QWEN38_ATTN_SPLIT)
    const size_t comma = r.find(',');
    p.rule.min_chunks = std::stoi(r.substr(0, comma));
    p.rule.max_splits = std::stoi(r.substr(comma + 1));
  }
  p.splits = grid_splits(L, p.rule);
  p.ring = rd.get("ring") == "3" ? 3 : 2;
  const size_t n_out = size_t(p.batch) * p.tokens * p.hq * d;
  std::vector<uint16_t> o(n_out, 0xffffu);  // NaN in both 16-bit formats: unwritten elements show
  p.o = o.data();
  std::vector<float> ws(workspace_floats(p) + 1, std::nanf(""));
  std::vector<int> ws_splits(size_t(p.batch) * p.tokens + 1, -7);
  if (p.splits > 1) p.ws = ws.data(), p.ws_splits = ws_splits.data();
  if (p.f16) run<__half>(p);
  else run<__nv_bfloat16>(p);
  emu::write_file(rd.dir + "/o.bin", o.data(), o.size() * 2);
  return 0;
}
