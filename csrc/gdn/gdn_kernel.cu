// Instantiations and launch of the GDN kernels (see gdn_kernel.cuh for the math and the layout).
#include "common/launch.cuh"
#include "gdn/gdn_kernel.cuh"

#include <map>
#include <mutex>
#include <tuple>

namespace qwen38::gdn {
namespace {

// The tree split the launcher picks (Params::splits = 0): as many runs as the GPU holds CTAs for
// at once (the runs work side by side; a second wave would wait for the first), at most
// kMaxSplits and one run per 8 nodes. Occupancy per (device, kernel, shared memory), cached.
template <typename K>
int auto_splits(K kernel, size_t smem, const Params& p) {
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, size_t>, int> resident;  // CTAs the GPU holds at once
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 1;
  int ctas = 0;
  {
    const std::lock_guard<std::mutex> lock(mu);
    const auto key = std::make_tuple(dev, reinterpret_cast<const void*>(kernel), smem);
    const auto it = resident.find(key);
    if (it != resident.end()) {
      ctas = it->second;
    } else {
      int per_sm = 0, sms = 0;
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem) != cudaSuccess ||
          cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
      }
      ctas = per_sm * sms;
      resident.emplace(key, ctas);
    }
  }
  const long per_split = long(col_blocks(Mode::kTree)) * kVHeads * p.batch;  // (the split is the tree's)
  int s = int(ctas / per_split);
  s = s < kMaxSplits ? s : kMaxSplits;
  s = s < p.tokens / 8 ? s : p.tokens / 8;
  return s > 1 ? s : 1;
}

template <Mode MODE, typename T, bool RAW, bool CIV = false>
cudaError_t launch_typed(const Params& p, bool pdl, cudaStream_t stream) {
  auto kernel = gdn_kernel<MODE, T, RAW, CIV>;
  const size_t smem = smem_bytes(MODE, CIV && p.c_tokens > p.tokens ? p.c_tokens : p.tokens);
  // Above the default 48 KB a block must opt in: the attribute is raised once per (kernel, device) to
  // the most a block may use (launch.cuh dynamic_smem_room), never to this call's size - the spread
  // below may launch with more than `smem` (sized against that limit and cached), and an attribute
  // set to a smaller `smem` by a later call made such a launch fail with "invalid argument".
  size_t room = 0;
  if (const cudaError_t err = dynamic_smem_room(kernel, &room)) return err;
  if (smem > room) return cudaErrorInvalidValue;
  Params q = p;
  q.splits = 1;
  if (MODE == Mode::kTree && !CIV) {
    q.splits = p.splits > 0 ? (p.splits < kMaxSplits ? p.splits : kMaxSplits) : auto_splits(kernel, smem, p);
  }
  const dim3 grid(col_blocks(MODE) * q.splits, kVHeads, unsigned(p.batch));
  size_t launch_smem = smem;  // QWEN38_SPREAD (launch.cuh)
  if (const cudaError_t err = spread_smem(kernel, kThreads, smem, int64_t(grid.x) * grid.y * grid.z, &launch_smem))
    return err;
  return launch_kernel(kernel, grid, dim3(kThreads), launch_smem, stream, pdl, q);
}

template <typename T>
cudaError_t launch_mode(Mode mode, const Params& p, bool pdl, cudaStream_t stream) {
  switch (mode) {
    case Mode::kStep:
      return p.raw ? launch_typed<Mode::kStep, T, true>(p, pdl, stream)
                   : launch_typed<Mode::kStep, T, false>(p, pdl, stream);
    case Mode::kChain:
      return p.civ ? launch_typed<Mode::kChain, T, false, true>(p, pdl, stream)
                   : launch_typed<Mode::kChain, T, false>(p, pdl, stream);
    case Mode::kTree:
      return p.civ ? launch_typed<Mode::kTree, T, false, true>(p, pdl, stream)
                   : launch_typed<Mode::kTree, T, false>(p, pdl, stream);
    case Mode::kCommit: return launch_typed<Mode::kCommit, T, false>(p, pdl, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

// Whether the current device runs the build whose tree keeps R in shared memory
// (QWEN38_GDN_TREE_R_SMEM: compute capability below 10, the sm_90a code).
static bool tree_r_smem() {
  int major = 0;
  if (device_cc_major(&major) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;  // (the larger size: a launch that cannot have it fails with an error)
  }
  return major < 10;
}

size_t smem_bytes(Mode mode, int tokens) {
  return smem_total(mode, mode == Mode::kStep ? 1 : tokens, mode == Mode::kTree && tree_r_smem());
}

cudaError_t launch(Mode mode, const Params& p, bool pdl, cudaStream_t stream) {
  if (p.batch == 0) return cudaSuccess;
  if (p.batch > 65535 || p.tokens < 1 || p.tokens > kMaxTreeNodes) return cudaErrorInvalidValue;
  if (p.civ && (p.c_tokens < 1 || p.c_tokens > kMaxTreeNodes || (mode != Mode::kChain && mode != Mode::kTree)))
    return cudaErrorInvalidValue;
  if (p.act == DType::kBF16) return launch_mode<__nv_bfloat16>(mode, p, pdl, stream);
  if (p.act == DType::kF16) return launch_mode<__half>(mode, p, pdl, stream);
  return cudaErrorInvalidValue;
}

}  // namespace qwen38::gdn
