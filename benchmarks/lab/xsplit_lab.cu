// Lab (sm_90a, session 45): the k-split-across-CTAs form of the register-stream kernels (csrc/gemm/xsplit_kernel.cuh:
// a cluster of KS CTAs holds the k split, the warps of a CTA are tile groups sharing one staged copy of x's k
// range) against the product's register-stream launch at the table variant (NVFP4 34816x5120 etc.: k split 4, 4
// tiles a warp; 5120x17408: k split 8, 4 tiles; FP8 the same but 5120x17408 at 2 tiles), 1..32 rows: us per call
// (graph of rotating weight copies, cold x: a copy of x per weight copy, PDL on) and whether every fp32 output
// has the stream kernel's bits.
// The stream kernel is timed reading x row-major and (as the product does from 9 rows) from its fragment-order
// copy, the copy kernel included.
//
//   nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I csrc \
//     benchmarks/lab/xsplit_lab.cu csrc/gemm/nvfp4_stream_kernel.cu csrc/gemm/fp8_stream_kernel.cu \
//     -o build/lab/xsplit_lab
//   build/lab/xsplit_lab [--only nvfp4:34816x5120,fp8:5120x17408] [--rows 1,16,32] [--groups 4]
//                        [--n 17408,16384 (NVFP4 N x 5120 only)] [--fp8-n 10240,6144 (FP8 N x 5120 only)]
//   build/lab/xsplit_lab ... --policy 0|1|2  the xsplit kernels' cluster scheduling policy preference
//   build/lab/xsplit_lab --depth 17408,6144 [--rows 1,8,16]  NVFP4 5120 x K at 1..16 rows: the product's stream
//                                             kernel against its body at 2 / 3 / 4 / 5 steps ahead (run_depth)
//   build/lab/xsplit_lab --profile ROWS [N [K]]   NVFP4 N x K (default 34816 x 5120; K 17408 / 6144 at k split 8):
//                                             a stream launch and an xsplit launch
//                                             (4 groups, 4 stages, depth 2), twice, for ncu
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/launch.cuh"
#include "gemm/fp8_block_linear_launch.h"
#include "gemm/nvfp4_linear_launch.h"
#include "gemm/nvfp4_stream_kernel.cuh"
#include "gemm/xsplit_kernel.cuh"
#include "lab_common.cuh"

using namespace qwen38;
using namespace qwen38::gemm;
using bf16 = __nv_bfloat16;

namespace {

// kind 0: e4m3 bytes, never NaN; 1: fp32 scales in [2^-12, 2^-8) (fp8_lab.cu's data)
__global__ void fill_fp8(uint8_t* p, size_t n, uint32_t seed, int kind) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = lab::mix(i, seed);
    uint8_t v = uint8_t(h);
    if (kind == 0 && (v & 0x7f) == 0x7f) v ^= 1;
    if (kind == 1) {
      const uint32_t word = lab::mix(i / 4, seed);
      const float f = ldexpf(1.0f + float(word % 1024) / 1024.0f, -12 + int((word >> 10) % 4));
      v = reinterpret_cast<const uint8_t*>(&f)[i % 4];
    }
    p[i] = v;
  }
}

struct Form {
  int stages, depth;
  bool xregs = false;  // (NVFP4, 1..16 rows) x read from global by every warp, not staged
};
constexpr Form kForms[] = {{3, 1}, {4, 2}, {2, 2, true}};

// --policy: the xsplit kernels' cluster scheduling policy preference (0 default, 1 spread, 2 load balancing), set
// on each kernel before its first launch (session 47: does the H200's uneven placement of clusters of 4 move?)
int g_policy = 0;
std::vector<int> g_groups = {2, 4};  // --groups: the tile groups a CTA timed
std::map<const void*, int> g_policy_set;  // the policy each kernel was last given
template <typename F>
void set_policy(F fn) {
  const void* key = reinterpret_cast<const void*>(fn);
  if (const auto it = g_policy_set.find(key); it != g_policy_set.end() && it->second == g_policy) return;
  CK(cudaFuncSetAttribute(fn, cudaFuncAttributeClusterSchedulingPolicyPreference, g_policy));
  g_policy_set[key] = g_policy;
}

template <bool kFp8, int K, int KS, int NT, int MT, int S, int D, bool kXRegs = false>
auto kernel_of() {
  if constexpr (kFp8) return fp8_xsplit_kernel<bf16, K, KS, NT, MT, S, D>;
  else return nvfp4_xsplit_kernel<bf16, K, KS, NT, MT, S, D, kXRegs>;
}

template <bool kFp8, int K, int KS, int NT, int MT, int S, int D, typename P, bool kXRegs = false>
void launch_xsplit(const P& p, int groups, bool pdl, cudaStream_t st) {
  auto fn = kernel_of<kFp8, K, KS, NT, MT, S, D, kXRegs>();
  set_policy(fn);
  const size_t smem = xsplit_smem_bytes(KS, MT, S, groups, NT);
  size_t room = 0;
  CK(dynamic_smem_room(fn, &room));
  if (smem > room) {
    std::fprintf(stderr, "smem %zu > room %zu\n", smem, room);
    std::exit(1);
  }
  const int64_t clusters = p.n / (8 * NT * groups);
  CK(launch_kernel_cluster(fn, dim3(unsigned(clusters * KS)), dim3(unsigned(32 * groups)), smem, st, pdl, KS, p));
}

template <bool kFp8, int K, int KS, int NT, typename P>
void launch_x(const P& p, Form f, int groups, bool pdl, cudaStream_t st) {
  const bool wide = p.m > 16;
  if (f.xregs) {
    if constexpr (!kFp8) {
      if (!wide) launch_xsplit<kFp8, K, KS, NT, 1, 2, 2, P, true>(p, groups, pdl, st);
    }
  } else if (f.stages == 3) {
    if (wide) launch_xsplit<kFp8, K, KS, NT, 2, 3, 1>(p, groups, pdl, st);
    else launch_xsplit<kFp8, K, KS, NT, 1, 3, 1>(p, groups, pdl, st);
  } else {
    if (wide) launch_xsplit<kFp8, K, KS, NT, 2, 4, 2>(p, groups, pdl, st);
    else launch_xsplit<kFp8, K, KS, NT, 1, 4, 2>(p, groups, pdl, st);
  }
}

template <bool kFp8, int K, int KS, int NT, int MT, int S, int D>
void print_attrs() {
  cudaFuncAttributes a{};
  auto fn = kernel_of<kFp8, K, KS, NT, MT, S, D>();
  CK(cudaFuncGetAttributes(&a, fn));
  const size_t smem = xsplit_smem_bytes(KS, MT, S, 4, NT);
  size_t room = 0;
  CK(dynamic_smem_room(fn, &room));  // (raises the kernel's dynamic shared memory limit first)
  int occ = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, 128, smem));
  // clusters of KS CTAs the device holds at once (their placement within GPCs)
  cudaLaunchAttribute at{};
  at.id = cudaLaunchAttributeClusterDimension;
  at.val.clusterDim.x = KS;
  at.val.clusterDim.y = at.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(KS * 64));
  cfg.blockDim = dim3(128);
  cfg.dynamicSmemBytes = smem;
  cfg.attrs = &at;
  cfg.numAttrs = 1;
  int clusters[3] = {};
  for (int pol = 0; pol < 3; ++pol) {
    CK(cudaFuncSetAttribute(fn, cudaFuncAttributeClusterSchedulingPolicyPreference, pol));
    CK(cudaOccupancyMaxActiveClusters(&clusters[pol], fn, &cfg));
  }
  g_policy_set.erase(reinterpret_cast<const void*>(fn));
  set_policy(fn);
  std::printf("  %s K %d ks %d nt %d MT %d stages %d depth %d: %d registers, %zu local bytes, %d CTAs of 4 groups "
              "an SM, clusters at once %d / %d / %d (policy default / spread / load balancing)\n",
              kFp8 ? "fp8" : "nvfp4", K, KS, NT, MT, S, D, a.numRegs, a.localSizeBytes, occ, clusters[0], clusters[1],
              clusters[2]);
}

// The data of one weight shape: `copies` weight copies (2x L2 in all), a copy of x per weight copy, fp32 y.
struct Data {
  bool fp8;
  int64_t n, k;
  int copies;
  std::vector<uint8_t*> w, s;
  std::vector<void*> x;
  float* global = nullptr;
  void* y = nullptr;
  void* xfrag = nullptr;
  Data(bool fp8_, int64_t n_, int64_t k_, size_t l2) : fp8(fp8_), n(n_), k(k_) {
    const size_t wbytes = fp8 ? size_t(n) * k : size_t(n) * k / 2;
    const size_t sbytes = fp8 ? size_t((n + 127) / 128) * ((k + 127) / 128) * 4 : size_t(n) * k / 16;
    copies = int(std::max<size_t>(1, 2 * l2 / (wbytes + sbytes) + 1));
    for (int c = 0; c < copies; ++c) {
      uint8_t *a, *b;
      void* xc;
      CK(cudaMalloc(&a, wbytes));
      CK(cudaMalloc(&b, sbytes));
      CK(cudaMalloc(&xc, size_t(32) * k * 2));
      if (fp8) {
        fill_fp8<<<2048, 256>>>(a, wbytes, 17 + c, 0);
        fill_fp8<<<2048, 256>>>(b, sbytes, 71 + c, 1);
      } else {
        lab::fill_nvfp4<<<2048, 256>>>(a, wbytes, 17 + c, 0);
        lab::fill_nvfp4<<<2048, 256>>>(b, sbytes, 71 + c, 1);
      }
      lab::fill_act<<<2048, 256>>>(static_cast<uint16_t*>(xc), size_t(32) * k, 5);
      w.push_back(a);
      s.push_back(b);
      x.push_back(xc);
    }
    CK(cudaMalloc(&global, 4));
    const float gs = 0.01f;
    CK(cudaMemcpy(global, &gs, 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&y, size_t(32) * n * 4));
    CK(cudaMalloc(&xfrag, size_t(32) * k * 2));
    CK(cudaDeviceSynchronize());
  }
  ~Data() {
    for (int c = 0; c < copies; ++c) {
      CK(cudaFree(w[c]));
      CK(cudaFree(s[c]));
      CK(cudaFree(x[c]));
    }
    CK(cudaFree(global));
    CK(cudaFree(y));
    CK(cudaFree(xfrag));
  }
  Nvfp4Launch nvfp4(int c, int64_t m) const {
    Nvfp4Params p;
    p.x = x[c];
    p.w = w[c];
    p.scale = s[c];
    p.global = global;
    p.y = y;
    p.m = m;
    p.n = n;
    p.k = k;
    p.x_stride = k;
    p.out = 2;
    return Nvfp4Launch(p);
  }
  Fp8Launch fp8p(int c, int64_t m) const {
    Fp8BlockParams p;
    p.x = x[c];
    p.w = w[c];
    p.scale = reinterpret_cast<const float*>(s[c]);
    p.y = y;
    p.m = m;
    p.n = n;
    p.k = k;
    p.x_stride = k;
    p.out = 2;
    return Fp8Launch(p);
  }
  double bytes(int64_t m) const {
    const double wb = fp8 ? double(n) * k + double((n + 127) / 128) * ((k + 127) / 128) * 4
                          : double(n) * k / 2 + double(n) * k / 16;
    return wb + double(m) * k * 2 + double(m) * n * 2;
  }
  std::vector<uint8_t> output(int64_t m) const {
    std::vector<uint8_t> out(size_t(m) * n * 4);
    CK(cudaMemcpy(out.data(), y, out.size(), cudaMemcpyDeviceToHost));
    return out;
  }
};

template <bool kFp8, int K, int KS, int NT>
void run_case(int64_t n, const std::vector<int>& rows, double ceiling, size_t l2) {
  print_attrs<kFp8, K, KS, NT, 1, 3, 1>();
  print_attrs<kFp8, K, KS, NT, 1, 4, 2>();
  print_attrs<kFp8, K, KS, NT, 2, 3, 1>();
  print_attrs<kFp8, K, KS, NT, 2, 4, 2>();
  Data d(kFp8, n, K, l2);
  SkinnyVariant v;
  v.ksplit = KS;
  v.nt_narrow = NT;
  v.nt_wide = NT;
  const int calls = std::max(200, 2 * d.copies);
  auto stream_launch = [&](int c, int m, bool frag, bool pdl, cudaStream_t st) {
    if constexpr (kFp8) {
      Fp8Launch q = d.fp8p(c, m);
      if (frag) q.xfrag = d.xfrag;
      CK(launch_fp8_stream(Act::kBF16, q, v, pdl, st));
    } else {
      Nvfp4Launch q = d.nvfp4(c, m);
      if (frag) q.xfrag = d.xfrag;
      CK(launch_nvfp4_stream(Act::kBF16, q, v, pdl, st));
    }
  };
  auto xs_launch = [&](int c, int m, Form f, int groups, bool pdl, cudaStream_t st) {
    if constexpr (kFp8) launch_x<true, K, KS, NT>(static_cast<const Fp8BlockParams&>(d.fp8p(c, m)), f, groups, pdl, st);
    else launch_x<false, K, KS, NT>(static_cast<const Nvfp4Params&>(d.nvfp4(c, m)), f, groups, pdl, st);
  };
  for (int m : rows) {
    auto pct = [&](float us) { return 100.0 * d.bytes(m) / (us * 1e3) / ceiling; };
    const float base = lab::run_or_time([&](int c, cudaStream_t st) { stream_launch(c, m, false, true, st); },
                                        d.copies, calls);
    const float fragged =
        m >= 9 ? lab::run_or_time([&](int c, cudaStream_t st) { stream_launch(c, m, true, true, st); }, d.copies, calls)
               : 0.f;
    lab::run_or_time([&](int c, cudaStream_t st) { stream_launch(c, m, false, false, st); }, d.copies, 0);
    const std::vector<uint8_t> ref = d.output(m);
    std::printf("%s %5lldx%d rows %2d  stream %6.2f us (%4.1f%%)", kFp8 ? "fp8  " : "nvfp4", (long long)n, K, m, base,
                pct(base));
    if (m >= 9) std::printf("  with the x copy %6.2f us (%4.1f%%)", fragged, pct(fragged));
    std::printf("\n");
    for (const Form f : kForms)
      for (int groups : g_groups) {
        if (n % (8 * NT * groups) != 0 || (f.xregs && (kFp8 || m > 16))) continue;
        CK(cudaMemset(d.y, 0xff, size_t(m) * n * 4));
        lab::run_or_time([&](int c, cudaStream_t st) { xs_launch(c, m, f, groups, false, st); }, d.copies, 0);
        const bool same = d.output(m) == ref;
        const float us =
            lab::run_or_time([&](int c, cudaStream_t st) { xs_launch(c, m, f, groups, true, st); }, d.copies, calls);
        std::printf("        xsplit stages %d depth %d groups %d%s  %6.2f us (%4.1f%%)  %s\n", f.stages, f.depth,
                    groups, f.xregs ? " x from global" : "", us, pct(us), same ? "same bits" : "BITS DIFFER");
      }
    std::fflush(stdout);
  }
}

// --depth (session 47): the 5120-row NVFP4 weights at K 17408 / 6144 (k split 8, 4 tiles a warp: 320 CTAs of 4 warps
// in clusters of 2, ~2.4 an SM: ncu found their 1-row kernels bound by the warps' latency, h100/xsplit_s47.md) with
// more weight steps in flight. The product's transposed body (nvfp4_stream_t, 1..8 rows) at kDepth steps ahead,
// held to 3 CTAs of 128 threads an SM (168 registers: the grid still runs in one wave) instead of the product's
// 128-register cap of its 256-thread form; the same arithmetic, so the stream kernel's bits (checked).
// 9..16 rows: the product's path there, x copied into the fragment order (layout kXfragPairedA) and the x-as-A
// body reading it (nvfp4_stream_tf_kernel at 2 groups), the copy kernel included in the timing.
template <int K, int kDepth>
__global__ void __launch_bounds__(128, 3) nvfp4_depth_t_kernel(const Nvfp4Params p) {
  nvfp4_stream_t<bf16, K, 8, 4, 1, false, kDepth>(p);
}
template <int K, int kDepth>
__global__ void __launch_bounds__(128, 3) nvfp4_depth_xaf_kernel(const Nvfp4Params p) {
  nvfp4_stream_xa<bf16, K, 8, 4, 1, true, kDepth>(p);
}

// the depth kernels' dynamic shared memory: the cluster form's partials, 4 tiles x k split 8 x 16 x 8 floats
// (stream_launch.cuh cluster_smem)
constexpr size_t kDepthSmem = size_t(4) * 8 * 16 * 8 * sizeof(float);

// p.m <= 8: the transposed body; else the copy into xfrag (K x 32 bytes at 2 groups), then
// the x-as-A body on it
template <int K, int kDepth>
void launch_depth(const Nvfp4Params& p, void* xfrag, bool pdl, cudaStream_t st) {
  const int64_t tiles = p.n / 32;
  if (p.m <= 8) {
    CK(launch_kernel_cluster(nvfp4_depth_t_kernel<K, kDepth>, dim3(unsigned(tiles * 2)), dim3(128), kDepthSmem, st,
                             pdl, 2, p));
    return;
  }
  constexpr auto copy = stream::xfrag_kernel<uint16_t, stream::kXfragPairedA>;
  const int64_t n16 = p.k * 2;
  CK(launch_kernel(copy, dim3(unsigned((n16 + 255) / 256)), dim3(256), 0, st, pdl, static_cast<const uint16_t*>(p.x),
                   p.m, p.x_stride, p.k, 2, static_cast<uint4*>(xfrag)));
  Nvfp4Params q = p;
  q.x = xfrag;
  CK(launch_kernel_cluster(nvfp4_depth_xaf_kernel<K, kDepth>, dim3(unsigned(tiles * 2)), dim3(128), kDepthSmem, st,
                           pdl, 2, q));
}

template <int K, int kDepth>
void depth_attrs() {
  for (int body = 0; body < 2; ++body) {
    const auto fn = body == 0 ? nvfp4_depth_t_kernel<K, kDepth> : nvfp4_depth_xaf_kernel<K, kDepth>;
    cudaFuncAttributes a{};
    CK(cudaFuncGetAttributes(&a, fn));
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, 128, kDepthSmem));
    std::printf("  nvfp4 K %d ks 8 nt 4, %s, depth %d: %d registers, %zu local bytes, %d CTAs an SM\n", K,
                body == 0 ? "1..8 rows (transposed)" : "9..16 rows (x-as-A, x copied)", kDepth, a.numRegs,
                a.localSizeBytes, occ);
  }
}

template <int K>
void run_depth(const std::vector<int>& rows, double ceiling, size_t l2) {
  depth_attrs<K, 2>();
  depth_attrs<K, 3>();
  depth_attrs<K, 4>();
  depth_attrs<K, 5>();
  Data d(false, 5120, K, l2);
  SkinnyVariant v;
  v.ksplit = 8;
  v.nt_narrow = 4;
  v.nt_wide = 4;
  const int calls = std::max(200, 2 * d.copies);
  using Launch = void (*)(const Nvfp4Params&, void*, bool, cudaStream_t);
  const std::pair<int, Launch> forms[] = {{2, launch_depth<K, 2>}, {3, launch_depth<K, 3>}, {4, launch_depth<K, 4>},
                                          {5, launch_depth<K, 5>}};
  for (int m : rows) {
    if (m > 16) continue;  // (one or two groups of 8 rows)
    auto pct = [&](float us) { return 100.0 * d.bytes(m) / (us * 1e3) / ceiling; };
    auto product = [&](int c, bool pdl, cudaStream_t st) {  // (from 9 rows with the copy, as nvfp4_linear runs it)
      Nvfp4Launch q = d.nvfp4(c, m);
      if (m >= 9) q.xfrag = d.xfrag;
      CK(launch_nvfp4_stream(Act::kBF16, q, v, pdl, st));
    };
    const float base = lab::run_or_time([&](int c, cudaStream_t st) { product(c, true, st); }, d.copies, calls);
    lab::run_or_time([&](int c, cudaStream_t st) { product(c, false, st); }, d.copies, 0);
    const std::vector<uint8_t> ref = d.output(m);
    std::printf("nvfp4  5120x%d rows %2d  stream%s %6.2f us (%4.1f%%)\n", K, m, m >= 9 ? " with the x copy" : "", base,
                pct(base));
    for (const auto& [depth, fn] : forms) {
      CK(cudaMemset(d.y, 0xff, size_t(m) * 5120 * 4));
      lab::run_or_time([&](int c, cudaStream_t st) { fn(d.nvfp4(c, m), d.xfrag, false, st); }, d.copies, 0);
      const bool same = d.output(m) == ref;
      const float us =
          lab::run_or_time([&](int c, cudaStream_t st) { fn(d.nvfp4(c, m), d.xfrag, true, st); }, d.copies, calls);
      std::printf("        depth %d, 3 CTAs of 128 an SM   %6.2f us (%4.1f%%)  %s\n", depth, us, pct(us),
                  same ? "same bits" : "BITS DIFFER");
    }
    std::fflush(stdout);
  }
}

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* c = s; *c;) {
    v.push_back(std::atoi(c));
    while (*c && *c != ',') ++c;
    if (*c == ',') ++c;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const size_t l2 = size_t(prop.l2CacheSize);
  for (int i = 1; i + 1 < argc; ++i)  // (--profile takes --policy too)
    if (std::strcmp(argv[i], "--policy") == 0) g_policy = std::atoi(argv[i + 1]);
  if (argc > 2 && std::strcmp(argv[1], "--profile") == 0) {
    const int m = std::atoi(argv[2]);
    const int n = argc > 3 ? std::atoi(argv[3]) : 34816;
    const int k = argc > 4 ? std::atoi(argv[4]) : 5120;
    if (k != 5120 && k != 17408 && k != 6144) {
      std::fprintf(stderr, "--profile: K must be 5120, 17408 or 6144\n");
      return 2;
    }
    Data d(false, n, k, l2);
    SkinnyVariant v;
    v.ksplit = k == 5120 ? 4 : 8;
    v.nt_narrow = 4;
    v.nt_wide = 4;
    for (int rep = 0; rep < 2; ++rep) {
      CK(launch_nvfp4_stream(Act::kBF16, d.nvfp4(rep, m), v, false, nullptr));
      const auto& q = static_cast<const Nvfp4Params&>(d.nvfp4(rep, m));
      if (k == 5120) launch_x<false, 5120, 4, 4>(q, Form{4, 2}, 4, false, nullptr);
      else if (k == 17408) launch_x<false, 17408, 8, 4>(q, Form{4, 2}, 4, false, nullptr);
      else launch_x<false, 6144, 8, 4>(q, Form{4, 2}, 4, false, nullptr);
    }
    CK(cudaDeviceSynchronize());
    return 0;
  }
  std::string only;
  std::vector<int> rows = {1, 8, 16, 17, 24, 32};
  std::vector<int> ns;     // --n: NVFP4 N x 5120 weights (k split 4, 4 tiles) only
  std::vector<int> fp8ns;  // --fp8-n: FP8 N x 5120 weights (k split 4, 4 tiles) only
  std::string depth;       // --depth 17408,6144: the depth forms of 5120 x K (run_depth)
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
    if (std::strcmp(argv[i], "--rows") == 0) rows = parse_list(argv[i + 1]);
    if (std::strcmp(argv[i], "--n") == 0) ns = parse_list(argv[i + 1]);
    if (std::strcmp(argv[i], "--fp8-n") == 0) fp8ns = parse_list(argv[i + 1]);
    if (std::strcmp(argv[i], "--groups") == 0) g_groups = parse_list(argv[i + 1]);
    if (std::strcmp(argv[i], "--depth") == 0) depth = argv[i + 1];
  }
  const double ceiling = lab::read_ceiling_GBps();
  std::printf("device %s, %d SMs, read ceiling %.0f GB/s; bf16 x, fp32 outputs; us per call, PDL on, cold weights "
              "and x; xsplit cluster policy %d, min blocks %d\n", prop.name, prop.multiProcessorCount, ceiling,
              g_policy, QWEN38_XSPLIT_MIN_BLOCKS);
  if (!depth.empty()) {
    if (depth.find("17408") != std::string::npos) run_depth<17408>(rows, ceiling, l2);
    if (depth.find("6144") != std::string::npos) run_depth<6144>(rows, ceiling, l2);
    return 0;
  }
  if (!ns.empty() || !fp8ns.empty()) {
    for (int n : ns) run_case<false, 5120, 4, 4>(n, rows, ceiling, l2);
    for (int n : fp8ns) run_case<true, 5120, 4, 4>(n, rows, ceiling, l2);
    return 0;
  }
  auto want = [&](const char* c) { return only.empty() || only.find(c) != std::string::npos; };
  if (want("nvfp4:34816x5120")) run_case<false, 5120, 4, 4>(34816, rows, ceiling, l2);
  if (want("fp8:34816x5120")) run_case<true, 5120, 4, 4>(34816, rows, ceiling, l2);
  if (want("nvfp4:5120x17408")) run_case<false, 17408, 8, 4>(5120, rows, ceiling, l2);
  if (want("fp8:5120x17408")) run_case<true, 17408, 8, 2>(5120, rows, ceiling, l2);
  if (want("nvfp4:12288x5120")) run_case<false, 5120, 4, 4>(12288, rows, ceiling, l2);
  if (want("nvfp4:5120x6144")) run_case<false, 6144, 8, 4>(5120, rows, ceiling, l2);
  if (want("fp8:5120x6144")) run_case<true, 6144, 8, 2>(5120, rows, ceiling, l2);
  return 0;
}
