// Runs the GDN CUDA kernel source (csrc/gdn/gdn_kernel.cuh) on the host, for machines without a GPU.
//
// The kernel template is compiled by the host compiler with a small emulation of what it uses from
// CUDA (the CTA runtime of emu_cta.h): each CTA's threads (the kernel's kThreads) are cooperative
// user-space threads (ucontext) switched at every barrier; __syncthreads is the CTA barrier,
// __syncwarp and the shuffles the warp's; the _rn intrinsics are plain
// IEEE float operations (built with -ffp-contract=off: no fused multiply-add). Transcendentals come
// from the host libm, not CUDA's, so a value within an ulp of an fp32 rounding boundary could round
// differently than on a GPU. What this checks is the kernel's indexing, staging, shared-memory
// layout, tree replay and guards, against the reference (tests/test_gdn.py, test_host_emulation_*).
//
//   gdn_host_emulation DIR
// DIR holds params.txt ("key value" lines) and the raw little-endian tensors it names; the emulator
// writes out.bin (the output, when the mode has one) and pool_out.bin (the whole pool) into DIR.
// Only the v heads listed under "heads" run (every column block and sequence of them).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "emu_cta.h"
#include "emu_io.h"

#include "emu_cuda.h"
#define smem_raw emu_smem_raw_unused

// The kernel's `extern __shared__ unsigned char smem_raw[]` becomes a block-scope declaration of
// this namespace-scope array (renamed by the macro above): one CTA runs at a time.
namespace qwen38::gdn {
alignas(16) unsigned char emu_smem_raw_unused[200 * 1024];
}

#include "gdn/gdn_kernel.cuh"

// ---- the driver ------------------------------------------------------------------------------------
namespace {

using namespace qwen38::gdn;
using emu::write_file;

DType dtype_of(const std::string& s) {
  if (s == "bf16") return DType::kBF16;
  if (s == "f16") return DType::kF16;
  if (s == "f32") return DType::kF32;
  return DType::kF64;
}

template <Mode MODE, typename T, bool RAW, bool CIV = false>
void run_grid(const Params& p, const std::vector<int>& heads) {
  const unsigned ctas = unsigned(col_blocks(MODE) * (MODE == Mode::kTree && !CIV && p.splits > 1 ? p.splits : 1));
  for (unsigned b = 0; b < unsigned(p.batch); ++b)
    for (int h : heads)
      for (unsigned cb = 0; cb < ctas; ++cb)
        emu::run_cta(emu::Dim3{cb, unsigned(h), b}, kThreads, [&p]() { gdn_kernel<MODE, T, RAW, CIV>(p); });
}

template <typename T>
void dispatch(Mode mode, const Params& p, const std::vector<int>& heads) {
  switch (mode) {
    case Mode::kStep:
      if (p.raw) run_grid<Mode::kStep, T, true>(p, heads);
      else run_grid<Mode::kStep, T, false>(p, heads);
      break;
    case Mode::kChain:
      if (p.civ) run_grid<Mode::kChain, T, false, true>(p, heads);
      else run_grid<Mode::kChain, T, false>(p, heads);
      break;
    case Mode::kTree:
      if (p.civ) run_grid<Mode::kTree, T, false, true>(p, heads);
      else run_grid<Mode::kTree, T, false>(p, heads);
      break;
    case Mode::kCommit: run_grid<Mode::kCommit, T, false>(p, heads); break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  emu::RunDir rd(argc, argv);
  emu::use_smem(qwen38::gdn::emu_smem_raw_unused, sizeof(qwen38::gdn::emu_smem_raw_unused));
  const std::string ms = rd.get("mode");
  const Mode mode = ms == "chain" ? Mode::kChain : ms == "tree" ? Mode::kTree : ms == "commit" ? Mode::kCommit
                                                                                                 : Mode::kStep;
  Params p;
  p.batch = std::stoi(rd.get("batch"));
  p.tokens = std::stoi(rd.get("tokens"));
  p.pool_rows = std::stoll(rd.get("pool_rows"));
  p.act = dtype_of(rd.get("act"));
  p.scale = std::stof(rd.get("scale"));
  p.splits = rd.get("splits") == "none" ? 1 : std::stoi(rd.get("splits"));  // (kTree: the grid's runs)
  const bool tok = mode != Mode::kStep;
  const int64_t T = tok ? p.tokens : 1;
  p.q = rd.ptr("q");
  p.k = rd.ptr("k");
  p.v = rd.ptr("v");
  p.q_sh = p.k_sh = kHeadK;
  p.q_st = p.k_st = int64_t(kQKHeads) * kHeadK;
  p.q_sb = p.k_sb = T * kQKHeads * kHeadK;
  p.v_sh = kHeadV;
  p.v_st = int64_t(kVHeads) * kHeadV;
  p.v_sb = T * kVHeads * kHeadV;
  p.qk16 = p.v16 = rd.get("vec16") == "1";
  p.g = static_cast<const float*>(rd.ptr("g"));
  p.beta = rd.ptr("beta");
  p.beta_dt = dtype_of(rd.get("beta_dt"));
  p.g_st = p.beta_st = kVHeads;
  p.g_sb = p.beta_sb = T * kVHeads;
  p.raw = rd.get("raw") == "1";
  p.a = rd.ptr("a");
  p.b = rd.ptr("b");
  p.A_log = rd.ptr("A_log");
  p.dt_bias = rd.ptr("dt_bias");
  p.a_sb = p.b_sb = kVHeads;
  p.a_dt = dtype_of(rd.get("a_dt"));
  p.b_dt = dtype_of(rd.get("b_dt"));
  p.alog_dt = dtype_of(rd.get("alog_dt"));
  p.dtb_dt = dtype_of(rd.get("dtb_dt"));
  p.pool = static_cast<float*>(rd.ptr("pool"));
  const bool i64 = rd.get("idx64") == "1";
  p.slots = rd.ptr("slots");
  p.lengths = rd.ptr("lengths");
  p.parents = rd.ptr("parents");
  p.accepted = rd.ptr("accepted");
  p.slots64 = p.lengths64 = p.parents64 = p.accepted64 = i64;
  // the pending commit folded into a verify ("c_*" tensors, all contiguous)
  p.c_k = rd.ptr("c_k");
  if (p.c_k != nullptr) {
    p.civ = true;
    p.c_tokens = std::stoi(rd.get("c_tokens"));
    const int64_t Tc = p.c_tokens;
    p.c_v = rd.ptr("c_v");
    p.c_k_sh = kHeadK;
    p.c_k_st = int64_t(kQKHeads) * kHeadK;
    p.c_k_sb = Tc * kQKHeads * kHeadK;
    p.c_v_sh = kHeadV;
    p.c_v_st = int64_t(kVHeads) * kHeadV;
    p.c_v_sb = Tc * kVHeads * kHeadV;
    p.c_k16 = p.c_v16 = p.qk16;
    p.c_g = static_cast<const float*>(rd.ptr("c_g"));
    p.c_beta = rd.ptr("c_beta");
    p.c_beta_dt = dtype_of(rd.get("c_beta_dt"));
    p.c_g_st = p.c_beta_st = kVHeads;
    p.c_g_sb = p.c_beta_sb = Tc * kVHeads;
    p.c_accepted = rd.ptr("c_accepted");
    p.c_parents = rd.ptr("c_parents");
    p.c_accepted64 = p.c_parents64 = i64;
  }
  const size_t out_elems = size_t(p.batch) * size_t(T) * kVHeads * kHeadV;
  std::vector<uint16_t> out(out_elems, 0xffff);  // NaN in bf16 and fp16: unwritten rows show
  p.out = mode == Mode::kCommit ? nullptr : out.data();
  std::vector<int> heads;
  {
    std::stringstream ss(rd.get("heads"));
    std::string h;
    while (std::getline(ss, h, ',')) heads.push_back(std::stoi(h));
  }
  if (p.act == DType::kBF16) dispatch<__nv_bfloat16>(mode, p, heads);
  else dispatch<__half>(mode, p, heads);
  if (mode != Mode::kCommit) write_file(rd.dir + "/out.bin", out.data(), out.size() * 2);
  write_file(rd.dir + "/pool_out.bin", p.pool, size_t(p.pool_rows) * kVHeads * kHeadK * kHeadV * 4);
  return 0;
}
