// Launch of the register-stream kernels (nvfp4_stream_kernel.cuh, fp8_stream_kernel.cuh): both are
// compiled for the model's K values (5120, 6144, 17408) with the k splits their tables use, bf16
// and fp16, and picked at run time by (K, k split, tiles per warp, m16 tiles).
//
// Of: a traits type with `template <typename T, int K, int KS, int NT, int MT> static constexpr
// auto fn` (the kernel instantiation), `kWide` (17..32 rows compiled: NT 2 or 4, and 1 at K 5120
// with k split 8, with a second m16 tile), `kKs8Nt4` (4 tiles per warp compiled at k split 8, at
// either row range), `template <int K, int KS> kClusters` (the kernel carries the cluster form:
// stream_common.cuh) and `template <int KS, int NT, int MT> kWaveFit` (the launch takes the blocks
// an SM by wave_fit below). 1 tile per warp is compiled at K 5120 with k split 8 at both row ranges.
// `template <int K, int KS, int NT> kStagedServes`: a staged form is compiled for that kernel (then
// `staged_fn`, same arguments as `fn`, and `template <int KS, int NT> kStagedBytes`, its dynamic
// shared memory; use_staged below picks it).
// `template <int K, int KS, int NT> kFragServes`: the kernel also reads x in its fragment order (then
// `frag_fn`, and `kFragLayout`, the layout of x it reads (stream_common.cuh kXfrag*), same arguments
// as `fn`; P has the buffer, xfrag and xfrag_from; frag below).
// `kOneGroupXa`: 1..8 rows may run the 2-group instantiation (the x-as-A body; use_one_group_xa below).
// `template <typename T, int K, int KS, int NT, int MT> kFour`: the fragment-order kernel of MT groups
// also has a form held to more CTAs an SM (4 for NVFP4, 3 for FP8; then `four_fn`, same arguments as `fn`,
// and `kFourByRounds`, the rule of auto; P has `four`; use_four below).
// `kRowGroups`: the kernels at 2 and 4 tiles a warp are compiled per group count of 8 rows of x,
// ceil(M / 8) = 1..4 (the transposed kernels, fp8_stream_t_kernel and nvfp4_stream_t_kernel), passed
// as the MT argument; the others per m16 tile.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "common/launch.cuh"
#include "gemm/nvfp4_linear_launch.h"
#include "gemm/skinny_variants.h"
#include "gemm/stream_common.cuh"  // xfrag_kernel

namespace qwen38::gemm {

template <typename Of, typename P>
struct StreamLaunch {
  using Fn = cudaError_t (*)(const P&, bool, cudaStream_t);

  // The dynamic shared memory the cluster form sums its partials in (NT x KS x MT*16 x 8 floats, in
  // the cluster's first CTA; none without a cluster).
  static size_t cluster_smem(int cl, int ks, int ntmt) { return cl > 1 ? size_t(ntmt) * ks * 16 * 8 * sizeof(float) : 0; }

  // CTAs of a cluster sharing one output tile's KS warps (QWEN38_SKINNY_CLUSTER, p.cluster > 0: that
  // count capped at KS). Auto: of 1, 2 and 4 (up to KS) the one that puts the fewest warps on the
  // busiest SM, ceil(CTAs / SMs) x warps a CTA (ties: the smaller cluster), among those whose grid
  // runs in one wave (the kernel's occupancy with the spread's shared memory, and every cluster
  // placed at once: cudaOccupancyMaxActiveClusters). Two cases gain:
  //  - a grid of few tiles (the model's 48- to 1024-row weights) reads all its activations through
  //    a few SMs: at 32 rows each tile reads 32 x K x 2 bytes (327 KB at K = 5120). H200
  //    (benchmarks/lab/cluster_ab.py): 48x5120 at 32 rows 7.62 us in one CTA a tile, 4.11 in
  //    clusters of 4 (4.32 of 8);
  //  - 160 tiles of 8 warps (the 5120-row weights at 4 tiles a warp) put two CTAs on 28 SMs and one
  //    on the others; at 1..16 rows auto takes clusters of 2 (320 CTAs of 4 warps, at most 3 an SM):
  //    5120x17408 at 1 / 16 rows 30.5 / 33.7 -> 26.8 / 31.8 us, 5120x6144 13.3 / 15.4 -> 12.4 /
  //    14.4; at 17..32 rows likewise since the 4-tile kernel is held to 168 registers
  //    (nvfp4_stream_kernel.cuh): 5120x17408 at 17 / 32 rows 52.9 / 58.8 -> 40.6 / 47.0 us.
  // A grid of clusters that does not fit at once runs in two waves (1024x5120 at 4 tiles a warp:
  // 6.64 us in clusters of 2, 11.9 of 4; 5120x6144 at 4 tiles: 12.4 / 17.5 in clusters of 2 / 4).
  // The first call per (kernel, device, tiles, QWEN38_SPREAD) queries; later calls read a cache.
  template <typename... KArgs>
  static cudaError_t cluster_of(void (*fn)(KArgs...), const P& p, int ks, int ntmt, int64_t tiles, int* out) {
    if (p.cluster > 0) {
      *out = p.cluster < ks ? p.cluster : ks;
      return cudaSuccess;
    }
    static std::mutex mu;
    static std::map<std::tuple<const void*, int, int64_t, bool>, int> cache;
    int dev = 0;
    if (cudaError_t e = cudaGetDevice(&dev)) return e;
    // (the spread's shared memory enters the occupancy queries)
    const auto key = std::make_tuple(reinterpret_cast<const void*>(fn), dev, tiles, spread_enabled());
    return cached_query(mu, cache, key, out, [&](int* best) {
      int sms = 0;
      if (cudaError_t e = device_sms(&sms)) return e;
      *best = 1;
      int64_t best_warps = (tiles + sms - 1) / sms * ks;
      for (int c = 2; c <= ks && c <= kAutoClusterMax; c *= 2) {
        const int64_t ctas = tiles * c;
        const int threads = 32 * ks / c;
        size_t smem = 0;
        if (cudaError_t e = spread_smem(fn, threads, cluster_smem(c, ks, ntmt), ctas, &smem)) return e;
        int occ = 0, fit = 0;
        if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, threads, smem)) return e;
        if (ctas > int64_t(occ) * sms) break;
        // a device or driver that cannot place clusters answers with an error: no cluster then
        if (max_active_clusters(fn, dim3(unsigned(ctas)), dim3(unsigned(threads)), smem, c, &fit) != cudaSuccess) {
          (void)cudaGetLastError();
          break;
        }
        if (fit < tiles) break;
        const int64_t warps = (ctas + sms - 1) / sms * (ks / c);
        if (warps < best_warps) *best = c, best_warps = warps;
      }
      return cudaSuccess;
    });
  }
  static constexpr int kAutoClusterMax = 4;

  // wave_fit's rule: of b = 2 .. occ blocks an SM, the one minimizing ceil(blocks / (sms b)) b (ties:
  // the larger b); 0 when occ <= 2.
  static constexpr int wave_fit_blocks(int64_t blocks, int sms, int occ) {
    if (occ <= 2) return 0;
    int best = 0;
    int64_t best_load = -1;
    for (int b = 2; b <= occ; ++b) {
      const int64_t per_wave = int64_t(sms) * b, load = (blocks + per_wave - 1) / per_wave * b;
      if (best_load < 0 || load <= best_load) best = b, best_load = load;
    }
    return best;
  }
  // the H200 cases measured (benchmarks/results/h200/stream_waves_lab_16*.txt: 132 SMs, the NVFP4
  // 17..32-row k-split-4 kernel at up to 3 an SM; grids of 34816, 17408, 16384, 14336, 12288, 10240
  // and 6144 rows at 4 tiles a warp)
  static_assert(wave_fit_blocks(1088, 132, 3) == 3 && wave_fit_blocks(544, 132, 3) == 3 &&
                    wave_fit_blocks(512, 132, 3) == 2 && wave_fit_blocks(448, 132, 3) == 2 &&
                    wave_fit_blocks(384, 132, 3) == 3 && wave_fit_blocks(320, 132, 3) == 3 &&
                    wave_fit_blocks(192, 132, 3) == 2 && wave_fit_blocks(1088, 132, 2) == 0,
                "wave_fit's rule no longer picks the measured choices");

  // kWaveFit kernels on compute capability 9 (where measured): the blocks per SM, b, that puts the
  // fewest blocks on an SM over the grid's waves, ceil(G / (SMs b)) b, among 2 .. the kernel's
  // occupancy (ties: the larger b; wave_fit_blocks above); 0 (no cap) elsewhere or when the
  // occupancy is 2 or less. With the NVFP4 17..32-row kernels at up to 3 an SM
  // (nvfp4_stream_kernel.cuh) on 132 SMs: 1088 blocks (34816x5120) take 3 (3 waves of 3 against 5
  // of 2), 544 (17408x5120) 3 (a tie), 512 (16384x5120) 2 (two waves either way), 384 (12288x5120)
  // 3 (one wave). A launch detail that changes no bit. The first call per (kernel, device, threads,
  // smem, blocks) queries; later calls read a cache.
  template <typename... KArgs>
  static cudaError_t wave_fit(void (*fn)(KArgs...), int threads, size_t smem, int64_t blocks, int* out) {
    static std::mutex mu;
    static std::map<std::tuple<const void*, int, int, size_t, int64_t>, int> cache;
    int dev = 0;
    if (cudaError_t e = cudaGetDevice(&dev)) return e;
    const auto key = std::make_tuple(reinterpret_cast<const void*>(fn), dev, threads, smem, blocks);
    return cached_query(mu, cache, key, out, [&](int* best) {
      int major = 0, sms = 0, occ = 0;
      *best = 0;
      if (cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) return e;
      if (major != 9) return cudaSuccess;
      if (cudaError_t e = device_sms(&sms)) return e;
      if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, threads, smem)) return e;
      *best = wave_fit_blocks(blocks, sms, occ);
      return cudaSuccess;
    });
  }

  // A launch rule measured on compute capability 9 only: there *out = rule(SMs), elsewhere false;
  // the first call per (rule, kernel, device, grid) queries, later calls read a cache (one cache per
  // rule: each call site's lambda is its own type).
  template <typename Rule>
  static cudaError_t cc9_rule(const void* fn, int64_t tiles, bool* out, Rule&& rule) {
    static std::mutex mu;
    static std::map<std::tuple<const void*, int, int64_t>, bool> cache;
    int dev = 0;
    if (cudaError_t e = cudaGetDevice(&dev)) return e;
    return cached_query(mu, cache, std::make_tuple(fn, dev, tiles), out, [&](bool* use) {
      int major = 0, sms = 0;
      *use = false;
      if (cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) return e;
      if (major != 9) return cudaSuccess;
      if (cudaError_t e = device_sms(&sms)) return e;
      return rule(sms, use);
    });
  }

  // The staged form (nvfp4_stream_ts_kernel, nvfp4_stream_kernel.cuh), where compiled
  // (Of::kStagedServes): p.staged 1 takes it, 0 never; -1 (auto) at 1..16 rows (MT: groups of 8
  // rows, 1 or 2) on compute capability 9 when the register form's grid needs more than one round of
  // CTAs (its occupancy x SMs < the grid) and the staged form's fits in one. On the H200 (132 SMs)
  // that is 17408x5120 (544 CTAs: 4 an SM registered, 8 / 6 staged; bench_nvfp4, 1 / 8 / 16 rows
  // 26.0 / 27.4 / 31.5 -> 21.6 / 24.0 / 30.3 us); 34816x5120 fits neither way (8 an SM staged: 1056 < 1088). Not
  // at 17..32 rows: there wave_fit already takes the register form's waves (2 or 3 blocks an SM),
  // as fast as the staged form's one round where measured (16384x5120 at 24 / 32 rows 32.5 / 38.4
  // us, staged 33.4 in the lab / 38.6 in the library; 14336x5120 32.2 / 38.2, staged 33.2 / 37.5).
  // A launch detail that changes no bit. The first call per (kernel, device, grid) queries; later
  // calls read a cache.
  template <typename T, int K, int KS, int NT, int MT>
  static cudaError_t use_staged(const P& p, int64_t tiles, bool* out) {
    *out = p.staged > 0;
    if (p.staged >= 0 || MT > 2) return cudaSuccess;
    return one_round_only(Of::template fn<T, K, KS, NT, MT>, 0, Of::template staged_fn<T, K, KS, NT, MT>,
                          Of::template kStagedBytes<KS, NT>, 32 * KS, tiles, out);
  }
  // cc9_rule over the slots (occupancy x SMs) of kernel a (the default form) and kernel b (the other form):
  // test(slots_a, slots_b) decides whether b runs the grid of `tiles` CTAs
  template <typename FA, typename FB, typename Test>
  static cudaError_t slots_rule(FA a, size_t a_smem, FB b, size_t b_smem, int threads, int64_t tiles, bool* out,
                                Test&& test) {
    return cc9_rule(reinterpret_cast<const void*>(b), tiles, out, [&](int sms, bool* use) {
      int occ_a = 0, occ_b = 0;
      if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_a, a, threads, a_smem)) return e;
      if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_b, b, threads, b_smem)) return e;
      *use = test(int64_t(occ_a) * sms, int64_t(occ_b) * sms);
      return cudaSuccess;
    });
  }
  // The staged and NVFP4's 4-CTA forms: the grid fits in one round of kernel b and not of kernel a
  template <typename FA, typename FB>
  static cudaError_t one_round_only(FA a, size_t a_smem, FB b, size_t b_smem, int threads, int64_t tiles,
                                    bool* out) {
    return slots_rule(a, a_smem, b, b_smem, threads, tiles, out,
                      [tiles](int64_t sa, int64_t sb) { return sa < tiles && sb >= tiles; });
  }
  template <typename T, int K, int KS, int NT, int MT>
  static cudaError_t staged(const P& p, int64_t tiles, bool pdl, cudaStream_t stream) {
    auto fn = Of::template staged_fn<T, K, KS, NT, MT>;
    const dim3 grid{unsigned(tiles)}, block{unsigned(32 * KS)};
    const size_t need = Of::template kStagedBytes<KS, NT>;
    int cap = 0;  // blocks an SM: QWEN38_SPREAD (launch.cuh)
    if (cudaError_t e = spread_cap(grid.x, &cap)) return e;
    size_t smem = need;
    if (cudaError_t e = cap_smem(fn, int(block.x), need, cap, &smem)) return e;
    return launch_kernel_cluster(fn, grid, block, smem, stream, pdl, 1, p);
  }

  // Of::kOneGroupXa: at 1..8 rows (one group of 8 rows of x) the register form may run the x-as-A
  // body (the 2-group instantiation, nvfp4_t_runs_xa) instead of the transposed one: p.one_group 1
  // takes it, 0 never; -1 (auto) on compute capability 9 when the register form's grid (no cluster
  // form) needs more than two rounds of CTAs (its occupancy x SMs x 2 < the grid). On the H200 that
  // is 34816x5120 (1088 CTAs, 4 an SM: 2.06 rounds), where the x-as-A body was faster in three lab
  // runs (benchmarks/lab/nvfp4_ring_t_lab.cu, nvfp4_ring_t_lab_s21_1g.txt: 41.2 / 41.5 / 43.3 us
  // against 42.8 / 44.2 / 45.2 at 1 / 4 / 8 rows; why is not understood); every grid of two rounds or
  // fewer ran the transposed body faster (nvfp4_stream_kernel.cuh nvfp4_t_runs_xa). A launch detail
  // that changes no bit. The first call per (kernel, device, grid) queries; later calls read a cache.
  template <typename T, int K, int KS, int NT>
  static cudaError_t use_one_group_xa(const P& p, int64_t tiles, bool* out) {
    *out = p.one_group > 0;
    if (p.one_group >= 0 || Of::template kClusters<K, KS>) return cudaSuccess;
    auto reg = Of::template fn<T, K, KS, NT, 1>;
    return cc9_rule(reinterpret_cast<const void*>(reg), tiles, out, [&](int sms, bool* use) {
      int occ = 0;
      if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, reg, 32 * KS, 0)) return e;
      *use = int64_t(occ) * sms * 2 < tiles;
      return cudaSuccess;
    });
  }

  // Of::kFragServes<K, KS, NT>: the kernel also reads x in its fragment order (stream_common.cuh
  // activation_frag; Of::frag_fn, the same bits): where the caller passes a buffer for it (p.xfrag of
  // Nvfp4Launch; nvfp4_linear.cpp: QWEN38_NVFP4_XFRAG) and the call has p.xfrag_from rows or more
  // (and the staged body is not forced), a copy kernel writes x in that order into p.xfrag
  // (xfrag_kernel: ceil(M / 8) groups, at least 2: 1..8 rows run the 2-group instantiation, the
  // x-as-A body) and the kernel reads it.
  template <typename T, int K, int KS, int NT, int MT>
  static cudaError_t frag(const P& p, bool pdl, cudaStream_t stream) {
    constexpr int G = MT < 2 ? 2 : MT;
    const int64_t n16 = p.k * G;  // uint4s of the copy (stream_common.cuh xfrag_kernel)
    constexpr auto copy = stream::xfrag_kernel<uint16_t, Of::template kFragLayout<T, K, KS, NT, G>>;
    if (cudaError_t e = launch_kernel(copy, dim3(unsigned((n16 + 255) / 256)), dim3(256), 0, stream, pdl,
                                      static_cast<const uint16_t*>(p.x), p.m, p.x_stride, p.k, G,
                                      static_cast<uint4*>(p.xfrag)))
      return e;
    P q = p;
    q.x = p.xfrag;
    if constexpr (Of::template kFour<T, K, KS, NT, G>) {
      bool four = false;
      if (cudaError_t e = use_four<T, K, KS, NT, G>(p, p.n / (8 * NT), &four)) return e;
      if (four) return launch_registered<K, KS, NT, G>(Of::template four_fn<T, K, KS, NT, G>, q, pdl, stream);
    }
    return launch_registered<K, KS, NT, G>(Of::template frag_fn<T, K, KS, NT, G>, q, pdl, stream);
  }

  // Of::kFour: the fragment-order kernel's form held to 4 CTAs an SM (nvfp4_stream_tf4_kernel,
  // nvfp4_stream_kernel.cuh): p.four 1 takes it, 0 never; -1 (auto) on compute capability 9 when its
  // grid fits in one round of CTAs (its occupancy x SMs >= the grid) and the default form's does not.
  // On the H200 (132 SMs) that is 16384x5120 and 14336x5120 at 17..32 rows (512 and 448 CTAs: 528 at
  // 4 an SM, 396 at 3; scripts/ab_skinny.py, 17 / 24 rows: 27.8 / 28.2 -> 25.2 / 25.8 us and 27.1 /
  // 27.3 -> 23.2 / 22.9; forced elsewhere 4-12% slower, ab_s24_four_ctas.txt); wave_fit then takes 4
  // an SM (one round). A launch detail that changes no bit. The first call per (kernel, device, grid)
  // queries; later calls read a cache.
  // With Of::kFourByRounds (FP8's 3-CTA form, fp8_stream_kernel.cuh fp8_stream_tf3_kernel) auto takes the
  // form where it runs the grid in fewer rounds of CTAs than the default form (fewer_rounds below).
  template <typename T, int K, int KS, int NT, int MT>
  static cudaError_t use_four(const P& p, int64_t tiles, bool* out) {
    *out = p.four > 0;
    if (p.four >= 0) return cudaSuccess;
    if constexpr (Of::kFourByRounds)
      return fewer_rounds(Of::template frag_fn<T, K, KS, NT, MT>, Of::template four_fn<T, K, KS, NT, MT>, 32 * KS,
                          tiles, out);
    else
      return one_round_only(Of::template frag_fn<T, K, KS, NT, MT>, 0, Of::template four_fn<T, K, KS, NT, MT>, 0,
                            32 * KS, tiles, out);
  }
  // FP8's 3-CTA form: kernel b runs the grid in fewer rounds (ceil(tiles / slots)) than kernel a, both without
  // dynamic shared memory
  template <typename FA, typename FB>
  static cudaError_t fewer_rounds(FA a, FB b, int threads, int64_t tiles, bool* out) {
    return slots_rule(a, 0, b, 0, threads, tiles, out, [tiles](int64_t sa, int64_t sb) {
      return sa > 0 && sb > 0 && (tiles + sb - 1) / sb < (tiles + sa - 1) / sa;
    });
  }

  template <typename T, int K, int KS, int NT, int MT>
  static cudaError_t one(const P& p, bool pdl, cudaStream_t stream) {
    const int64_t tiles = p.n / (8 * NT);
    if constexpr (Of::template kFragServes<K, KS, NT>) {
      static_assert(Of::kRowGroups && NT > 1, "MT counts groups of 8 rows here");
      bool staged_forced = false;
      if constexpr (Of::template kStagedServes<K, KS, NT>) staged_forced = p.staged == 1;
      if (p.xfrag != nullptr && p.m >= p.xfrag_from && !staged_forced) return frag<T, K, KS, NT, MT>(p, pdl, stream);
    }
    if constexpr (Of::template kStagedServes<K, KS, NT>) {
      bool st = false;
      if (cudaError_t e = use_staged<T, K, KS, NT, MT>(p, tiles, &st)) return e;
      if (st) return staged<T, K, KS, NT, MT>(p, tiles, pdl, stream);
    }
    if constexpr (Of::kOneGroupXa && Of::kRowGroups && NT > 1 && MT == 1) {
      bool xa = false;
      if (cudaError_t e = use_one_group_xa<T, K, KS, NT>(p, tiles, &xa)) return e;
      // (and with x in the fragment order where the caller asks for it at these rows, p.xfrag_one_group:
      // H200, 34816x5120 at 1 / 4 / 8 rows 41.0 / 41.3 / 42.8 -> 38.1 / 37.9 / 38.1 us, where the
      // transposed body's shapes lose 2-20% with the copy; scripts/ab_skinny.py, session 23)
      if constexpr (Of::template kFragServes<K, KS, NT>)
        if (xa && p.xfrag != nullptr && p.xfrag_one_group) return frag<T, K, KS, NT, 2>(p, pdl, stream);
      if (xa) return registered<T, K, KS, NT, 2>(p, pdl, stream);
    }
    return registered<T, K, KS, NT, MT>(p, pdl, stream);
  }
  // the register form's launch (cluster_of, spread, wave_fit)
  template <typename T, int K, int KS, int NT, int MT>
  static cudaError_t registered(const P& p, bool pdl, cudaStream_t stream) {
    return launch_registered<K, KS, NT, MT>(Of::template fn<T, K, KS, NT, MT>, p, pdl, stream);
  }
  template <int K, int KS, int NT, int MT, typename... KArgs>
  static cudaError_t launch_registered(void (*fn)(KArgs...), const P& p, bool pdl, cudaStream_t stream) {
    const int64_t tiles = p.n / (8 * NT);
    constexpr int kMt = reduce_mt<NT, MT>();  // m16 tiles of the partials
    int cl = 1;
    if constexpr (Of::template kClusters<K, KS>)
      if (cudaError_t e = cluster_of(fn, p, KS, NT * kMt, tiles, &cl)) return e;
    const dim3 grid(unsigned(tiles * cl)), block(unsigned(32 * KS / cl));
    const size_t need = cluster_smem(cl, KS, NT * kMt);
    int cap = 0;  // blocks an SM: QWEN38_SPREAD (launch.cuh), then wave_fit
    if (cudaError_t e = spread_cap(grid.x, &cap)) return e;
    if constexpr (Of::template kWaveFit<KS, NT, MT>) {
      int fit = 0;
      if (cudaError_t e = wave_fit(fn, int(block.x), need, grid.x, &fit)) return e;
      if (fit > 0 && (cap == 0 || fit < cap)) cap = fit;
    }
    size_t smem = need;
    if (cudaError_t e = cap_smem(fn, int(block.x), need, cap, &smem)) return e;
    return launch_kernel_cluster(fn, grid, block, smem, stream, pdl, cl, p);
  }

  // the m16 tiles of the partials of an instantiation (MT: groups of 8 rows with kRowGroups at NT > 1)
  template <int NT, int MT>
  static constexpr int reduce_mt() { return Of::kRowGroups && NT > 1 ? (MT > 2 ? 2 : 1) : MT; }
  // kRowGroups at NT > 1: the instantiation for `g` groups of 8 rows (1..4; pick's m16-tile count
  // then only says which row range g lies in)
  template <typename T, int K, int KS, int NT>
  static Fn by_groups(int g) {
    if (g <= 2) return g == 1 ? one<T, K, KS, NT, 1> : one<T, K, KS, NT, 2>;
    return g == 3 ? one<T, K, KS, NT, 3> : one<T, K, KS, NT, 4>;
  }
  template <typename T, int K, int KS, int NT, int MT>
  static Fn one_of(int g) {
    if constexpr (Of::kRowGroups) return by_groups<T, K, KS, NT>(g);
    else return one<T, K, KS, NT, MT>;
  }

  // (ksplit, nt, m16 tiles, groups of 8 rows) -> an instantiation, or null when not compiled for K
  template <typename T, int K>
  static Fn pick(int ks, int nt, int mt, int g) {
    if (nt == 1) {  // 1 tile a warp: K 5120 at k split 8 only (the model's 48- to 1024-row weights)
      if constexpr (K == 5120)
        if (ks == 8) {
          if (mt == 1) return one<T, K, 8, 1, 1>;
          if constexpr (Of::kWide) return one<T, K, 8, 1, 2>;
        }
      return nullptr;
    }
    if (mt == 2) {
      if constexpr (Of::kWide) {
        if (nt != 2 && nt != 4) return nullptr;
        if constexpr (K == 5120) {
          if (ks == 2) return nt == 4 ? one_of<T, K, 2, 4, 2>(g) : one_of<T, K, 2, 2, 2>(g);
          if (ks == 4) return nt == 4 ? one_of<T, K, 4, 4, 2>(g) : one_of<T, K, 4, 2, 2>(g);
        }
        if (ks != 8) return nullptr;
        if constexpr (Of::kKs8Nt4)
          if (nt == 4) return one_of<T, K, 8, 4, 2>(g);
        return nt == 2 ? one_of<T, K, 8, 2, 2>(g) : nullptr;
      } else {
        return nullptr;
      }
    }
    if constexpr (K == 5120) {  // k splits 2 and 4 serve K = 5120 only (the tables' choices)
      if (ks == 2) return nt == 4 ? one_of<T, K, 2, 4, 1>(g) : nt == 2 ? one_of<T, K, 2, 2, 1>(g) : nullptr;
      if (ks == 4) return nt == 4 ? one_of<T, K, 4, 4, 1>(g) : nt == 2 ? one_of<T, K, 4, 2, 1>(g) : nullptr;
    }
    if (ks != 8) return nullptr;
    if constexpr (Of::kKs8Nt4)
      if (nt == 4) return one_of<T, K, 8, 4, 1>(g);
    return nt == 2 ? one_of<T, K, 8, 2, 1>(g) : nullptr;
  }

  template <typename T>
  static Fn pick_k(int64_t k, int ks, int nt, int mt, int g) {
    if (k == 5120) return pick<T, 5120>(ks, nt, mt, g);
    if (k == 6144) return pick<T, 6144>(ks, nt, mt, g);
    if (k == 17408) return pick<T, 17408>(ks, nt, mt, g);
    return nullptr;
  }

  // 1..16 rows: one m16 tile and the variant's nt_narrow; 17..32: two and nt_wide
  template <typename Q>
  static int tiles_m(const Q& p) { return p.m <= 16 ? 1 : 2; }
  template <typename Q>
  static int tiles_n(const Q& p, const SkinnyVariant& v) { return p.m <= 16 ? v.nt_narrow : v.nt_wide; }

  // the instantiation serving a call, or null (rows, N not a multiple of 8 NT, K or variant not compiled)
  template <typename Q>  // P or the kernels' parameters it extends (reads m, n, k)
  static Fn find(Act act, const Q& p, const SkinnyVariant& v) {
    const int nt = tiles_n(p, v), mt = tiles_m(p), g = int((p.m + 7) / 8);
    if (p.m < 1 || p.m > kSkinnyMaxRows || p.n <= 0 || p.n % (8 * nt) != 0) return nullptr;
    return act == Act::kBF16 ? pick_k<__nv_bfloat16>(p.k, v.ksplit, nt, mt, g)
                             : pick_k<__half>(p.k, v.ksplit, nt, mt, g);
  }

  template <typename Q>
  static bool serves(const Q& p, const SkinnyVariant& v) { return find(Act::kBF16, p, v) != nullptr; }

  static cudaError_t launch(Act act, const P& p, const SkinnyVariant& v, bool pdl, cudaStream_t stream) {
    const Fn fn = find(act, p, v);
    return fn == nullptr ? cudaErrorInvalidValue : fn(p, pdl, stream);
  }
};

}  // namespace qwen38::gemm
