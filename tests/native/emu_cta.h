// The CTA runtime of the host emulations (tests/native/*_host_emulation.cpp): a kernel's threads run
// as cooperative user-space threads (ucontext), one CTA at a time.
//   cta_barrier()    __syncthreads: every live thread of the CTA
//   warp_barrier()   the live lanes of the caller's warp (__syncwarp and the warp collectives)
//   shfl / shfl_xor / ballot   warp collectives: each lane puts its value in g_slot, a warp barrier,
//                    each lane reads what it needs, a second barrier (no lane overwrites a slot early)
//   cp_async / cp_async_commit / cp_async_wait   a thread's groups of 4- or 16-byte copies: held until its
//                    wait_group lets their group complete ("late", default), or done at issue ("early")
// Scheduling (g_prio): false resumes the threads that can go on in turn; true always the lowest one that
// can, so warp 0 runs as far ahead of the others as the barriers let it (a missing __syncthreads then
// shows as a read of data another warp has not written yet). Shared memory starts as 0xff bytes (NaN
// in every float format) in every CTA.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include <ucontext.h>

namespace emu {

constexpr int kMaxThreads = 1024;
struct Dim3 {
  unsigned x, y, z;
};
inline Dim3 g_block{0, 0, 0};
inline int g_cur = 0, g_threads = 0;
inline unsigned g_block_dim_x = 0, g_grid_dim[3] = {1, 1, 1};  // blockDim.x; gridDim (a driver sets it)
inline ucontext_t g_sched, g_ctx[kMaxThreads];
inline std::vector<char> g_stack[kMaxThreads];
inline bool g_done[kMaxThreads];
inline std::function<void()> g_body;
inline unsigned char* g_smem = nullptr;  // the kernel's shared memory (set by the driver)
inline size_t g_smem_size = 0;
inline bool g_early_copies = false, g_prio = false;

inline int g_cta_arrived = 0, g_cta_live = 0;
inline unsigned g_cta_gen = 0;
inline int g_warp_arrived[kMaxThreads / 32], g_warp_live[kMaxThreads / 32];
inline unsigned g_warp_gen[kMaxThreads / 32];
inline int g_wait_kind[kMaxThreads];  // 0 nothing, 1 the warp's barrier, 2 the CTA's
inline unsigned g_wait_gen[kMaxThreads];

inline void use_smem(unsigned char* smem, size_t bytes) {  // the kernel's shared memory array
  g_smem = smem;
  g_smem_size = bytes;
}

inline void yield() { swapcontext(&g_ctx[g_cur], &g_sched); }

inline void cta_barrier() {
  const unsigned gen = g_cta_gen;
  if (++g_cta_arrived == g_cta_live) {
    g_cta_arrived = 0;
    ++g_cta_gen;
    return;
  }
  g_wait_kind[g_cur] = 2, g_wait_gen[g_cur] = gen;
  while (g_cta_gen == gen) yield();
  g_wait_kind[g_cur] = 0;
}

inline void warp_barrier() {
  const int w = g_cur / 32;
  const unsigned gen = g_warp_gen[w];
  if (++g_warp_arrived[w] == g_warp_live[w]) {
    g_warp_arrived[w] = 0;
    ++g_warp_gen[w];
    return;
  }
  g_wait_kind[g_cur] = 1, g_wait_gen[g_cur] = gen;
  while (g_warp_gen[w] == gen) yield();
  g_wait_kind[g_cur] = 0;
}

inline bool can_run(int t) {
  if (g_done[t]) return false;
  if (g_wait_kind[t] == 1) return g_warp_gen[t / 32] != g_wait_gen[t];
  if (g_wait_kind[t] == 2) return g_cta_gen != g_wait_gen[t];
  return true;
}

// ---- warp collectives ------------------------------------------------------------------------------
struct Slot {  // what a lane gives a collective
  uint32_t u[8];
  float f[4];
  uint64_t w;
  const void* ptr;
};
inline Slot g_slot[kMaxThreads];

template <typename V>
inline V shfl(V v, int src) {  // (values of up to 8 bytes)
  static_assert(sizeof(V) <= sizeof(uint64_t), "shuffle of a value over 8 bytes");
  const int t = g_cur;
  std::memcpy(&g_slot[t].w, &v, sizeof v);
  warp_barrier();
  V r;
  std::memcpy(&r, &g_slot[(t & ~31) | (src & 31)].w, sizeof r);
  warp_barrier();
  return r;
}

template <typename V>
inline V shfl_xor(V v, int m) {
  return shfl(v, (g_cur & 31) ^ m);
}

inline uint32_t ballot(int pred) {
  const int t = g_cur, base = t & ~31;
  g_slot[t].u[0] = pred ? 1u : 0u;
  warp_barrier();
  uint32_t m = 0;
  for (int l = 0; l < 32; ++l) m |= g_slot[base + l].u[0] << l;
  warp_barrier();
  return m;
}

// ---- cp.async ----------------------------------------------------------------------------------------
struct Copy {
  void* dst;
  int size;
  unsigned char bytes[16];
};
inline std::vector<Copy> g_open[kMaxThreads];
inline std::vector<std::vector<Copy>> g_groups[kMaxThreads];

inline void cp_async(void* dst, const void* src, int size, int src_bytes) {  // size 4 or 16; zero-fills
  Copy c{dst, size, {}};
  if (src_bytes > 0) std::memcpy(c.bytes, src, size_t(src_bytes < size ? src_bytes : size));
  if (g_early_copies) {
    std::memcpy(dst, c.bytes, size_t(size));
    return;
  }
  g_open[g_cur].push_back(c);
}
inline void cp_async_commit() {
  g_groups[g_cur].push_back(std::move(g_open[g_cur]));
  g_open[g_cur].clear();
}
inline void cp_async_wait(int n) {
  auto& gs = g_groups[g_cur];
  while (int(gs.size()) > n) {
    for (const Copy& c : gs.front()) std::memcpy(c.dst, c.bytes, size_t(c.size));
    gs.erase(gs.begin());
  }
}

// ---- one CTA -------------------------------------------------------------------------------------------
inline void entry() {
  g_body();
  g_done[g_cur] = true;
  const int w = g_cur / 32;
  if (--g_warp_live[w] > 0 && g_warp_arrived[w] == g_warp_live[w]) {  // lanes wait at a barrier it left
    g_warp_arrived[w] = 0;
    ++g_warp_gen[w];
  }
  if (--g_cta_live > 0 && g_cta_arrived == g_cta_live) {
    g_cta_arrived = 0;
    ++g_cta_gen;
  }
}  // returns to g_sched (uc_link)

inline void run_cta(Dim3 block, int threads, const std::function<void()>& body) {
  if (threads < 1 || threads > kMaxThreads || threads % 32 != 0) {
    std::fprintf(stderr, "unsupported CTA size %d\n", threads);
    std::exit(2);
  }
  g_block = block;
  g_body = body;
  g_threads = threads;
  g_block_dim_x = unsigned(threads);
  g_cta_live = threads;
  g_cta_arrived = 0;
  for (int w = 0; w < threads / 32; ++w) g_warp_live[w] = 32, g_warp_arrived[w] = 0;
  std::memset(g_smem, 0xff, g_smem_size);  // NaN: shared memory starts as garbage
  for (int t = 0; t < threads; ++t) {
    g_stack[t].resize(1 << 18);
    getcontext(&g_ctx[t]);
    g_ctx[t].uc_stack.ss_sp = g_stack[t].data();
    g_ctx[t].uc_stack.ss_size = g_stack[t].size();
    g_ctx[t].uc_link = &g_sched;
    makecontext(&g_ctx[t], entry, 0);
    g_done[t] = false;
    g_wait_kind[t] = 0;
    g_open[t].clear();
    g_groups[t].clear();
  }
  for (int last = threads - 1;;) {
    int next = -1;
    for (int i = 1; i <= threads && next < 0; ++i) {
      const int t = g_prio ? i - 1 : (last + i) % threads;
      if (can_run(t)) next = t;
    }
    if (next < 0) {
      for (int t = 0; t < threads; ++t)
        if (!g_done[t]) {
          std::fprintf(stderr, "deadlock: thread %d waits at a barrier no other thread reaches\n", t);
          std::exit(3);
        }
      return;
    }
    g_cur = last = next;
    swapcontext(&g_sched, &g_ctx[next]);
  }
}

}  // namespace emu
