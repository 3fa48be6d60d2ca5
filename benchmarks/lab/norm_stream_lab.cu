// A/B lab for the norm streaming kernel (csrc/norm/norm_kernel.cuh): times compile-time variants
// of norm_stream_kernel (segments per warp, rows in flight, rolling loads, cache hints, blocks per
// SM) on the benchmark's many-row shapes, bf16, without rebuilding the extension, and checks that
// every variant writes the same bits as the first one of its case. A development tool: the landed
// choice lives in stream_spw / stream_depth / stream_roll / kStreamHint / stream_block_threads, and
// benchmarks/bench_norm.py is the measurement of record. Also times a 16-byte copy: the read+write
// bandwidth a 1:1 stream (rms_norm, add_rms_norm) can reach, next to the read ceiling.
//
//   nvcc -std=c++17 -O3 -arch=sm_90a --expt-relaxed-constexpr -I csrc \
//        benchmarks/lab/norm_stream_lab.cu -o norm_lab && ./norm_lab [rows]
//
// Method as bench_norm: a CUDA graph of launches rotating over argument copies whose total exceeds
// 3x L2 (cold reads), median of replays; the streaming-read ceiling measured in the same process.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "lab_common.cuh"
#include "norm/norm_kernel.cuh"

using namespace qwen38::norm;
using bf16 = __nv_bfloat16;

namespace {

using lab::read_kernel;
using lab::time_graph;

__global__ void fill_kernel(uint16_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    // a bf16 in [-2, 2): sign, exponent 126..127, random mantissa
    p[i] = uint16_t((h & 0x8000u) | ((126u + ((h >> 7) & 1u)) << 7) | (h & 0x7fu));
  }
}

// A copy at the same granularity (16 bytes a thread and step): what a 1:1 read/write stream reaches.
template <int HINT>
__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 u = HINT & 1 ? __ldcs(src + i) : __ldcg(src + i);
    if (HINT & 2) __stcs(dst + i, u);
    else dst[i] = u;
  }
}

// The same copy with U loads per thread in flight before the stores (the Triton copy of the bench
// keeps 8): is the 1:1 limit the DRAM read/write mix or the bytes in flight?
template <int U>
__global__ void copy_unrolled_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride * U) {
    uint4 u[U];
#pragma unroll
    for (int j = 0; j < U; ++j) u[j] = i + j * stride < n ? __ldcs(src + i + j * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < U; ++j)
      if (i + j * stride < n) __stcs(dst + i + j * stride, u[j]);
  }
}

// The streaming read with U loads per thread in flight (the lab's ceiling kernel keeps one).
template <int U>
__global__ void read_unrolled_kernel(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride * U) {
    uint4 u[U];
#pragma unroll
    for (int j = 0; j < U; ++j) u[j] = i + j * stride < n ? __ldcs(p + i + j * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < U; ++j) acc ^= u[j].x ^ u[j].y ^ u[j].z ^ u[j].w;
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

// Writes alone (16-byte stores): the write bandwidth.
__global__ void write_kernel(uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    __stcs(dst + i, make_uint4(unsigned(i), 0, 0, 0));
}

// A bulk-copy (TMA, cp.async.bulk) copy: one thread per block moves CHUNK-byte pieces global ->
// shared -> global through a ring of STAGES buffers (loads complete on an mbarrier, stores are bulk
// groups whose smem reads must finish before a buffer is refilled). Does the copy engine's access
// pattern beat 16-byte LDG/STG on the read/write mix? LOAD_ONLY: the loads alone (bulk read).
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <int CHUNK, int STAGES, bool LOAD_ONLY>
__global__ void __launch_bounds__(32) bulk_copy_kernel(const char* __restrict__ src, char* __restrict__ dst,
                                                       size_t bytes) {
  extern __shared__ __align__(128) char ring[];
  __shared__ __align__(8) uint64_t bar[STAGES];
  if (threadIdx.x != 0) return;
  const size_t nchunks = bytes / CHUNK;
  if (blockIdx.x >= nchunks) return;
  const size_t mine = (nchunks - blockIdx.x + gridDim.x - 1) / gridDim.x;
  for (int s = 0; s < STAGES; ++s)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bar[s])));
  asm volatile("fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;" ::: "memory");
  auto load = [&](size_t j) {
    const int s = int(j % STAGES);
    const char* g = src + (blockIdx.x + j * gridDim.x) * size_t(CHUNK);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(&bar[s])), "r"(CHUNK)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smem_u32(ring + s * CHUNK)),
        "l"(g), "r"(CHUNK), "r"(smem_u32(&bar[s]))
        : "memory");
  };
  auto wait = [&](size_t j) {
    const int s = int(j % STAGES);
    const uint32_t parity = uint32_t(j / STAGES) & 1u;
    uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
          : "=r"(done)
          : "r"(smem_u32(&bar[s])), "r"(parity)
          : "memory");
    }
  };
  for (size_t j = 0; j < mine && j < size_t(STAGES); ++j) load(j);
  for (size_t j = 0; j < mine; ++j) {
    wait(j);
    if (LOAD_ONLY) {
      if (j + STAGES < mine) load(j + STAGES);
      continue;
    }
    char* g = dst + (blockIdx.x + j * gridDim.x) * size_t(CHUNK);
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(g),
                 "r"(smem_u32(ring + int(j % STAGES) * CHUNK)), "r"(CHUNK)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    if (j >= 1 && j - 1 + STAGES < mine) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      load(j - 1 + STAGES);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

void* dalloc(size_t bytes, uint32_t seed) {
  void* p = nullptr;
  CK(cudaMalloc(&p, bytes));
  fill_kernel<<<1024, 256>>>(static_cast<uint16_t*>(p), bytes / 2, seed);
  CK(cudaGetLastError());
  return p;
}

struct Case {
  const char* name;
  Kind kind;
  int64_t rows, hidden, x_stride;
  int copies;
  std::vector<void*> x, res, gate, y, res_out;
  void* weight = nullptr;
  double bytes() const {
    const double act = double(rows) * hidden * 2;
    const int ins = kind == Kind::kRms ? 1 : 2, outs = kind == Kind::kAddRms ? 2 : 1;
    return act * (ins + outs) + hidden * 2;
  }
  Params params(int i) const {
    Params p;
    p.x = x[i];
    p.residual = kind == Kind::kAddRms ? res[i] : nullptr;
    p.gate = kind == Kind::kGated ? gate[i] : nullptr;
    p.weight = weight;
    p.y = y[i];
    p.residual_out = kind == Kind::kAddRms ? res_out[i] : nullptr;
    p.rows = rows;
    p.hidden = hidden;
    p.x_stride = x_stride;
    p.res_stride = hidden;
    p.gate_stride = hidden;
    p.eps = 1e-6f;
    p.zero_centered = kind == Kind::kRms;
    return p;
  }
};

Case make_case(const char* name, Kind kind, int64_t rows, int64_t hidden, int64_t x_stride, size_t l2) {
  Case c{name, kind, rows, hidden, x_stride, 0, {}, {}, {}, {}, {}};
  const size_t per = size_t(rows) * hidden * 2;
  const size_t per_copy = per * (kind == Kind::kRms ? 2 : kind == Kind::kAddRms ? 4 : 3) +
                          size_t(rows) * (x_stride - hidden) * 2;
  c.copies = int(std::max<size_t>(2, (3 * l2 + per_copy - 1) / per_copy));
  for (int i = 0; i < c.copies; ++i) {
    c.x.push_back(dalloc(size_t(rows) * x_stride * 2, 11 + i));
    if (kind == Kind::kAddRms) c.res.push_back(dalloc(per, 101 + i));
    if (kind == Kind::kGated) c.gate.push_back(dalloc(per, 201 + i));
    c.y.push_back(dalloc(per, 0));
    if (kind == Kind::kAddRms) c.res_out.push_back(dalloc(per, 0));
  }
  c.weight = dalloc(size_t(hidden) * 2, 7);
  CK(cudaDeviceSynchronize());
  std::printf("%s x %lld rows (%d copies)\n", name, (long long)rows, c.copies);
  return c;
}

template <Kind KIND, int L, int SPW, int DEPTH, bool ROLL, int HINT = kHintNone>
void run_variant(const Case& c, const char* label, double ceiling, std::vector<uint8_t>& ref, int max_per_sm = 64) {
  auto kernel = norm_stream_kernel<bf16, bf16, KIND, L, SPW, DEPTH, ROLL, HINT>;
  int lanes = 0, segments = 0;
  segments_of(c.hidden, &lanes, &segments);
  if (lanes != L) {
    std::printf("  %-34s skipped (the row has %d lanes per segment)\n", label, lanes);
    return;
  }
  const int warps_per_row = (segments + SPW - 1) / SPW;
  const int threads = stream_threads(L, warps_per_row);
  const int64_t rows_per_block = threads / (L * warps_per_row);
  int sms = 0, per_sm = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, kernel));
  const int64_t needed = (c.rows + rows_per_block - 1) / rows_per_block;
  per_sm = std::min(per_sm, max_per_sm);
  const int64_t grid = std::min<int64_t>(needed, int64_t(sms) * std::max(per_sm, 1));
  auto launch = [&](int i, cudaStream_t s) {
    kernel<<<unsigned(grid), threads, 0, s>>>(c.params(i % c.copies), segments, warps_per_row);
  };
  const int calls = std::max(4 * c.copies, 24);
  const float us = time_graph(calls, launch);
  CK(cudaGetLastError());
  // bits of copy 0's outputs against the case's first variant
  launch(0, 0);
  CK(cudaDeviceSynchronize());
  const size_t per = size_t(c.rows) * c.hidden * 2;
  std::vector<uint8_t> out(per * (c.kind == Kind::kAddRms ? 2 : 1));
  CK(cudaMemcpy(out.data(), c.y[0], per, cudaMemcpyDeviceToHost));
  if (c.kind == Kind::kAddRms) CK(cudaMemcpy(out.data() + per, c.res_out[0], per, cudaMemcpyDeviceToHost));
  const char* bits = "reference";
  if (ref.empty()) ref = out;
  else bits = ref == out ? "same bits" : "BITS DIFFER";
  const double gbs = c.bytes() / (us * 1e3);
  std::printf("  %-34s %8.2f us %7.0f GB/s %5.1f%%  regs %3d  %d blk/SM x %d thr  grid %lld  %s\n", label, us,
              gbs, 100.0 * gbs / ceiling, fa.numRegs, per_sm, threads, (long long)grid, bits);
}

// A 16-byte copy of the same bytes as the case (x -> y; add: x -> y and residual -> residual_out)
// over the same rotating buffers: what a copy reaches at this size, ramp-up and drain included.
void run_copy(const Case& c, double ceiling) {
  if (c.kind == Kind::kGated || c.x_stride != c.hidden) return;
  const size_t per = size_t(c.rows) * c.hidden * 2;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  auto launch = [&](int i, cudaStream_t s) {
    const int j = i % c.copies;
    copy_kernel<2><<<sms * 4, 512, 0, s>>>(static_cast<const uint4*>(c.x[j]), static_cast<uint4*>(c.y[j]), per / 16);
    if (c.kind == Kind::kAddRms)
      copy_kernel<2><<<sms * 4, 512, 0, s>>>(static_cast<const uint4*>(c.res[j]), static_cast<uint4*>(c.res_out[j]),
                                              per / 16);
  };
  const float us = time_graph(std::max(4 * c.copies, 24), launch);
  CK(cudaGetLastError());
  const double gbs = c.bytes() / (us * 1e3);
  std::printf("  %-34s %8.2f us %7.0f GB/s %5.1f%%  (a copy of the same bytes)\n", "copy ld.cg / st.cs", us, gbs,
              100.0 * gbs / ceiling);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t m = argc > 1 ? std::atoll(argv[1]) : 8192;
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const size_t l2 = size_t(prop.l2CacheSize);
  std::printf("device %s, %d SMs, L2 %zu MB, rows %lld\n", prop.name, prop.multiProcessorCount, l2 >> 20,
              (long long)m);

  // the streaming-read ceiling: 2 GiB read once per call, 16-byte loads
  const size_t rb = size_t(2) << 30;
  void* big = dalloc(rb, 3);
  unsigned* sink = nullptr;
  CK(cudaMalloc(&sink, 4));
  const int rblocks = prop.multiProcessorCount * 8;
  const float rus = time_graph(6, [&](int, cudaStream_t s) {
    read_kernel<<<rblocks, 512, 0, s>>>(static_cast<const uint4*>(big), rb / 16, sink);
  });
  const double ceiling = double(rb) / (rus * 1e3);
  std::printf("read ceiling %.0f GB/s\n", ceiling);
  {
    const size_t half = rb / 2;
    auto copy = [&](auto hint, const char* label) {
      constexpr int kH = decltype(hint)::value;
      const float us = time_graph(6, [&](int, cudaStream_t s) {
        copy_kernel<kH><<<rblocks, 512, 0, s>>>(static_cast<const uint4*>(big),
                                               reinterpret_cast<uint4*>(static_cast<char*>(big) + half), half / 16);
      });
      const double gbs = 2.0 * half / (us * 1e3);
      std::printf("copy %-28s %7.0f GB/s read+write (%.1f%% of the read ceiling)\n", label, gbs, 100 * gbs / ceiling);
    };
    copy(std::integral_constant<int, 0>{}, "ld.cg / st");
    copy(std::integral_constant<int, 3>{}, "ld.cs / st.cs");
    copy(std::integral_constant<int, 2>{}, "ld.cg / st.cs");
    const char* bsrc = static_cast<const char*>(big);
    char* bdst = static_cast<char*>(big) + half;
    auto report = [&](const char* label, float us, double moved) {
      const double gbs = moved / (us * 1e3);
      std::printf("%-33s %7.0f GB/s (%.1f%% of the read ceiling)\n", label, gbs, 100 * gbs / ceiling);
    };
    report("read, 4 loads in flight", time_graph(6, [&](int, cudaStream_t s) {
      read_unrolled_kernel<4><<<rblocks, 512, 0, s>>>(static_cast<const uint4*>(big), rb / 16, sink);
    }), double(rb));
    report("read, 8 loads in flight", time_graph(6, [&](int, cudaStream_t s) {
      read_unrolled_kernel<8><<<rblocks / 2, 512, 0, s>>>(static_cast<const uint4*>(big), rb / 16, sink);
    }), double(rb));
    report("write alone (st.cs)", time_graph(6, [&](int, cudaStream_t s) {
      write_kernel<<<rblocks, 512, 0, s>>>(reinterpret_cast<uint4*>(bdst), half / 16);
    }), double(half));
    report("copy .cs, 4 loads in flight", time_graph(6, [&](int, cudaStream_t s) {
      copy_unrolled_kernel<4><<<rblocks, 512, 0, s>>>(reinterpret_cast<const uint4*>(bsrc),
                                                      reinterpret_cast<uint4*>(bdst), half / 16);
    }), 2.0 * half);
    report("copy .cs, 8 loads in flight", time_graph(6, [&](int, cudaStream_t s) {
      copy_unrolled_kernel<8><<<rblocks / 2, 512, 0, s>>>(reinterpret_cast<const uint4*>(bsrc),
                                                          reinterpret_cast<uint4*>(bdst), half / 16);
    }), 2.0 * half);
    auto bulk = [&](auto chunk, auto stages, auto load_only, int per_sm, const char* label) {
      constexpr int kC = decltype(chunk)::value, kS = decltype(stages)::value;
      constexpr bool kL = decltype(load_only)::value;
      auto kernel = bulk_copy_kernel<kC, kS, kL>;
      CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kC * kS));
      const unsigned grid = unsigned(prop.multiProcessorCount * per_sm);
      const size_t n = kL ? rb : half;
      report(label, time_graph(6, [&](int, cudaStream_t s) {
        kernel<<<grid, 32, kC * kS, s>>>(bsrc, bdst, n);
      }), kL ? double(n) : 2.0 * n);
    };
    using std::integral_constant;
    bulk(integral_constant<int, 16384>{}, integral_constant<int, 4>{}, std::true_type{}, 2, "bulk read 16K x4, 2/SM");
    bulk(integral_constant<int, 16384>{}, integral_constant<int, 6>{}, std::true_type{}, 2, "bulk read 16K x6, 2/SM");
    bulk(integral_constant<int, 16384>{}, integral_constant<int, 4>{}, std::false_type{}, 2, "bulk copy 16K x4, 2/SM");
    bulk(integral_constant<int, 16384>{}, integral_constant<int, 6>{}, std::false_type{}, 2, "bulk copy 16K x6, 2/SM");
    bulk(integral_constant<int, 8192>{}, integral_constant<int, 6>{}, std::false_type{}, 4, "bulk copy 8K x6, 4/SM");
    bulk(integral_constant<int, 32768>{}, integral_constant<int, 6>{}, std::false_type{}, 1, "bulk copy 32K x6, 1/SM");
    bulk(integral_constant<int, 10240>{}, integral_constant<int, 8>{}, std::false_type{}, 2, "bulk copy 10K(row) x8, 2/SM");
  }
  CK(cudaFree(big));

  // v5: the kernel before the lab; v6: the landed choice (stream_depth / stream_roll / kStreamHint /
  // stream_block_threads in norm_kernel.cuh); the rest: the alternatives it was chosen over.
  {
    Case c = make_case("rms_norm 5120", Kind::kRms, m, 5120, 5120, l2);
    std::vector<uint8_t> ref;
    run_copy(c, ceiling);
    run_variant<Kind::kRms, 32, 10, 1, false, 0>(c, "spw10 depth1 (v5)", ceiling, ref);
    run_variant<Kind::kRms, 32, 10, 1, true, 3>(c, "spw10 roll .cs (v6)", ceiling, ref);
    run_variant<Kind::kRms, 32, 10, 1, true, 0>(c, "spw10 roll", ceiling, ref);
    run_variant<Kind::kRms, 32, 10, 1, true, 1>(c, "spw10 roll, loads .cs", ceiling, ref);
    run_variant<Kind::kRms, 32, 10, 1, true, 2>(c, "spw10 roll, stores .cs", ceiling, ref);
    run_variant<Kind::kRms, 32, 10, 1, true, 3>(c, "spw10 roll .cs, 3 blk/SM", ceiling, ref, 3);
    run_variant<Kind::kRms, 32, 5, 1, true, 3>(c, "spw5 roll .cs (2 warps/row)", ceiling, ref);
    run_variant<Kind::kRms, 32, 5, 2, false, 3>(c, "spw5 depth2 .cs (2 warps/row)", ceiling, ref);
  }
  {
    Case c = make_case("add_rms_norm 5120", Kind::kAddRms, m, 5120, 5120, l2);
    std::vector<uint8_t> ref;
    run_copy(c, ceiling);
    run_variant<Kind::kAddRms, 32, 5, 1, false, 0>(c, "spw5 depth1 (v5)", ceiling, ref);
    run_variant<Kind::kAddRms, 32, 5, 1, false, 3>(c, "spw5 depth1 .cs (v6)", ceiling, ref);
    run_variant<Kind::kAddRms, 32, 5, 1, true, 0>(c, "spw5 roll", ceiling, ref);
    run_variant<Kind::kAddRms, 32, 5, 1, true, 3>(c, "spw5 roll .cs", ceiling, ref);
    run_variant<Kind::kAddRms, 32, 2, 1, true, 3>(c, "spw2 roll .cs (5 warps/row)", ceiling, ref);
  }
  {
    Case c = make_case("rms_norm q slice 24x256 of 512", Kind::kRms, m * 24, 256, 512, l2);
    std::vector<uint8_t> ref;
    run_variant<Kind::kRms, 16, 1, 2, false, 0>(c, "depth2 (v5)", ceiling, ref);
    run_variant<Kind::kRms, 16, 1, 1, true, 3>(c, "roll .cs (v6)", ceiling, ref);
    run_variant<Kind::kRms, 16, 1, 1, false, 0>(c, "depth1", ceiling, ref);
    run_variant<Kind::kRms, 16, 1, 3, false, 3>(c, "depth3 .cs", ceiling, ref);
    run_variant<Kind::kRms, 16, 1, 1, true, 3>(c, "roll .cs, 3 blk/SM", ceiling, ref, 3);
  }
  {
    Case c = make_case("rms_norm_gated 48x128", Kind::kGated, m * 48, 128, 128, l2);
    std::vector<uint8_t> ref;
    run_variant<Kind::kGated, 8, 1, 2, false, 0>(c, "depth2", ceiling, ref);
    run_variant<Kind::kGated, 8, 1, 2, false, 3>(c, "depth2 .cs (v6)", ceiling, ref);
    run_variant<Kind::kGated, 8, 1, 1, false, 3>(c, "depth1 .cs", ceiling, ref);
    run_variant<Kind::kGated, 8, 1, 1, true, 3>(c, "roll .cs", ceiling, ref);
  }
  return 0;
}
