// Runs the GDN CUDA kernel source (csrc/gdn/gdn_kernel.cuh) on the host, for machines without a GPU.
//
// The kernel template is compiled by the host compiler with a small emulation of what it uses from
// CUDA: each CTA's threads (the kernel's kThreads) are cooperative user-space threads (ucontext)
// switched round-robin at every barrier; __syncthreads, __syncwarp and the shuffles are CTA-wide
// barriers (valid for this kernel: all warps always execute the same sequence of them); the _rn intrinsics are plain
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

#include <ucontext.h>

#include "emu_io.h"

// ---- the CUDA surface the kernel uses ------------------------------------------------------------
namespace emu {

constexpr int kMaxThreads = 1024;  // the CTA size comes from the kernel (run_cta)
struct Dim3 {
  unsigned x, y, z;
};
Dim3 g_block{0, 0, 0};
int g_cur = 0, g_threads = 0;
ucontext_t g_sched, g_ctx[kMaxThreads];
std::vector<char> g_stack[kMaxThreads];
bool g_done[kMaxThreads];
int g_arrived = 0, g_live = 0;
unsigned g_gen = 0;
float g_xchg[kMaxThreads];
uint64_t g_xchg64[kMaxThreads];
int g_pred[kMaxThreads];
std::function<void()> g_body;
unsigned char* g_smem = nullptr;  // the kernel's shared memory (set by main)
size_t g_smem_size = 0;

inline void yield() { swapcontext(&g_ctx[g_cur], &g_sched); }

inline void barrier() {
  const unsigned gen = g_gen;
  if (++g_arrived == g_live) {
    g_arrived = 0;
    ++g_gen;
    return;
  }
  while (g_gen == gen) yield();
}

void entry() {
  g_body();
  g_done[g_cur] = true;
  if (--g_live > 0 && g_arrived == g_live) {  // the others wait at a barrier this thread left
    g_arrived = 0;
    ++g_gen;
  }
}  // returns to g_sched (uc_link)

void run_cta(Dim3 block, int threads, const std::function<void()>& body) {
  if (threads < 1 || threads > kMaxThreads || threads % 32 != 0) {
    std::fprintf(stderr, "unsupported CTA size %d\n", threads);
    std::exit(2);
  }
  g_block = block;
  g_body = body;
  g_threads = threads;
  g_live = threads;
  g_arrived = 0;
  std::memset(g_smem, 0xff, g_smem_size);  // NaN: shared memory starts as garbage
  for (int t = 0; t < threads; ++t) {
    g_stack[t].resize(1 << 18);
    getcontext(&g_ctx[t]);
    g_ctx[t].uc_stack.ss_sp = g_stack[t].data();
    g_ctx[t].uc_stack.ss_size = g_stack[t].size();
    g_ctx[t].uc_link = &g_sched;
    makecontext(&g_ctx[t], entry, 0);
    g_done[t] = false;
  }
  for (bool any = true; any;) {
    any = false;
    for (int t = 0; t < threads; ++t) {
      if (g_done[t]) continue;
      any = true;
      g_cur = t;
      swapcontext(&g_sched, &g_ctx[t]);
    }
  }
}

}  // namespace emu

#undef __global__
#define __global__
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __shared__
#define __shared__
#define threadIdx (emu::Dim3{unsigned(emu::g_cur), 0u, 0u})
#define blockIdx (emu::g_block)
#define smem_raw emu_smem_raw_unused

inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fmaf(a, b, c); }  // correctly rounded
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __double2float_rn(double a) { return static_cast<float>(a); }
template <typename T> inline T __ldg(const T* p) { return *p; }
inline void __syncthreads() { emu::barrier(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::barrier(); }
inline int __syncthreads_or(int pred) {
  emu::g_pred[emu::g_cur] = pred;
  emu::barrier();
  int any = 0;
  for (int t = 0; t < emu::g_threads; ++t) any |= emu::g_pred[t];
  emu::barrier();
  return any;
}
inline int atomicMin(int* addr, int v) {  // one emulated thread runs at a time
  const int old = *addr;
  if (v < old) *addr = v;
  return old;
}
template <typename V>
inline V __shfl_sync(unsigned, V v, int src) {  // (4- and 8-byte values)
  static_assert(sizeof(V) <= sizeof(uint64_t), "shuffle of a value over 8 bytes");
  const int t = emu::g_cur;
  uint64_t w = 0;
  std::memcpy(&w, &v, sizeof v);
  emu::g_xchg64[t] = w;
  emu::barrier();
  w = emu::g_xchg64[(t & ~31) | (src & 31)];
  emu::barrier();
  V r;
  std::memcpy(&r, &w, sizeof r);
  return r;
}
inline float __shfl_xor_sync(unsigned, float v, int m) {
  const int t = emu::g_cur;
  emu::g_xchg[t] = v;
  emu::barrier();
  const float r = emu::g_xchg[(t & ~31) | ((t & 31) ^ m)];
  emu::barrier();
  return r;
}

// The kernel's `extern __shared__ unsigned char smem_raw[]` becomes a block-scope declaration of
// this namespace-scope array (renamed by the macro above): one CTA runs at a time.
namespace qwen38::gdn {
alignas(16) unsigned char emu_smem_raw_unused[200 * 1024];
}

#include "gdn/gdn_kernel.cuh"

// ---- the driver ------------------------------------------------------------------------------------
namespace {

using namespace qwen38::gdn;
using emu::read_file;
using emu::read_params;
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
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  emu::g_smem = qwen38::gdn::emu_smem_raw_unused;
  emu::g_smem_size = sizeof(qwen38::gdn::emu_smem_raw_unused);
  auto prm = read_params(dir);
  auto get = [&](const char* k) { return prm.count(k) ? prm[k] : std::string("none"); };
  std::map<std::string, std::vector<char>> bufs;
  auto ptr = [&](const char* k) -> void* {
    const std::string f = get(k);
    if (f == "none") return nullptr;
    bufs[k] = read_file(dir + "/" + f);
    return bufs[k].data();
  };
  const std::string ms = get("mode");
  const Mode mode = ms == "chain" ? Mode::kChain : ms == "tree" ? Mode::kTree : ms == "commit" ? Mode::kCommit
                                                                                                 : Mode::kStep;
  Params p;
  p.batch = std::stoi(get("batch"));
  p.tokens = std::stoi(get("tokens"));
  p.pool_rows = std::stoll(get("pool_rows"));
  p.act = dtype_of(get("act"));
  p.scale = std::stof(get("scale"));
  p.splits = get("splits") == "none" ? 1 : std::stoi(get("splits"));  // (kTree: the grid's runs)
  const bool tok = mode != Mode::kStep;
  const int64_t T = tok ? p.tokens : 1;
  p.q = ptr("q");
  p.k = ptr("k");
  p.v = ptr("v");
  p.q_sh = p.k_sh = kHeadK;
  p.q_st = p.k_st = int64_t(kQKHeads) * kHeadK;
  p.q_sb = p.k_sb = T * kQKHeads * kHeadK;
  p.v_sh = kHeadV;
  p.v_st = int64_t(kVHeads) * kHeadV;
  p.v_sb = T * kVHeads * kHeadV;
  p.qk16 = p.v16 = get("vec16") == "1";
  p.g = static_cast<const float*>(ptr("g"));
  p.beta = ptr("beta");
  p.beta_dt = dtype_of(get("beta_dt"));
  p.g_st = p.beta_st = kVHeads;
  p.g_sb = p.beta_sb = T * kVHeads;
  p.raw = get("raw") == "1";
  p.a = ptr("a");
  p.b = ptr("b");
  p.A_log = ptr("A_log");
  p.dt_bias = ptr("dt_bias");
  p.a_sb = p.b_sb = kVHeads;
  p.a_dt = dtype_of(get("a_dt"));
  p.b_dt = dtype_of(get("b_dt"));
  p.alog_dt = dtype_of(get("alog_dt"));
  p.dtb_dt = dtype_of(get("dtb_dt"));
  p.pool = static_cast<float*>(ptr("pool"));
  const bool i64 = get("idx64") == "1";
  p.slots = ptr("slots");
  p.lengths = ptr("lengths");
  p.parents = ptr("parents");
  p.accepted = ptr("accepted");
  p.slots64 = p.lengths64 = p.parents64 = p.accepted64 = i64;
  // the pending commit folded into a verify ("c_*" tensors, all contiguous)
  p.c_k = ptr("c_k");
  if (p.c_k != nullptr) {
    p.civ = true;
    p.c_tokens = std::stoi(get("c_tokens"));
    const int64_t Tc = p.c_tokens;
    p.c_v = ptr("c_v");
    p.c_k_sh = kHeadK;
    p.c_k_st = int64_t(kQKHeads) * kHeadK;
    p.c_k_sb = Tc * kQKHeads * kHeadK;
    p.c_v_sh = kHeadV;
    p.c_v_st = int64_t(kVHeads) * kHeadV;
    p.c_v_sb = Tc * kVHeads * kHeadV;
    p.c_k16 = p.c_v16 = p.qk16;
    p.c_g = static_cast<const float*>(ptr("c_g"));
    p.c_beta = ptr("c_beta");
    p.c_beta_dt = dtype_of(get("c_beta_dt"));
    p.c_g_st = p.c_beta_st = kVHeads;
    p.c_g_sb = p.c_beta_sb = Tc * kVHeads;
    p.c_accepted = ptr("c_accepted");
    p.c_parents = ptr("c_parents");
    p.c_accepted64 = p.c_parents64 = i64;
  }
  const size_t out_elems = size_t(p.batch) * size_t(T) * kVHeads * kHeadV;
  std::vector<uint16_t> out(out_elems, 0xffff);  // NaN in bf16 and fp16: unwritten rows show
  p.out = mode == Mode::kCommit ? nullptr : out.data();
  std::vector<int> heads;
  {
    std::stringstream ss(get("heads"));
    std::string h;
    while (std::getline(ss, h, ',')) heads.push_back(std::stoi(h));
  }
  if (p.act == DType::kBF16) dispatch<__nv_bfloat16>(mode, p, heads);
  else dispatch<__half>(mode, p, heads);
  if (mode != Mode::kCommit) write_file(dir + "/out.bin", out.data(), out.size() * 2);
  write_file(dir + "/pool_out.bin", p.pool, size_t(p.pool_rows) * kVHeads * kHeadK * kHeadV * 4);
  return 0;
}
