// Instantiations and launch of the decode-attention kernels (see attn_kernel.cuh).
#include "attn/attn_kernel.cuh"
#include "common/launch.cuh"

namespace qwen38::attn {
namespace {

template <typename T, int D, int MT, int S>
cudaError_t launch_s(const Params& p, bool pdl, cudaStream_t stream) {
  const auto kernel = attn_decode_kernel<T, D, MT, S>;
  const size_t smem = Layout<D, MT, S>::kBytes;
  size_t room = 0;
  if (const cudaError_t e = dynamic_smem_room(kernel, &room)) return e;
  if (smem > room) return cudaErrorInvalidValue;
  const int tpc = MT * (16 / p.group);
  const dim3 grid(unsigned((p.tokens + tpc - 1) / tpc), unsigned(p.hkv * p.splits), unsigned(p.batch));
  if (const cudaError_t e = launch_kernel(kernel, grid, dim3(kThreads), smem, stream, pdl, p)) return e;
  if (p.splits <= 1) return cudaSuccess;
  const int64_t rows = int64_t(p.batch) * p.tokens * p.hq;
  return launch_kernel(attn_merge_kernel<T, D>, dim3(unsigned((rows + kWarps - 1) / kWarps)), dim3(kThreads), 0,
                       stream, pdl, p);
}

// K/V slots (p.ring, QWEN38_ATTN_SLOTS): 2 (default) or 3, the same bits. Three slots keep two chunk
// loads in flight but need 108 / 118 KB at D 256 (one or two tiles): over GB10's 99 KB, and at two tiles
// one CTA an SM on the H100, where they are much slower from T = 16 (the knob's text and
// benchmarks/results/h100/attn_s41_slots.md give the figures).
template <typename T, int D, int MT>
cudaError_t launch_t(const Params& p, bool pdl, cudaStream_t stream) {
  return p.ring == 3 ? launch_s<T, D, MT, 3>(p, pdl, stream) : launch_s<T, D, MT, 2>(p, pdl, stream);
}

template <typename T, int D>
cudaError_t launch_d(const Params& p, bool pdl, cudaStream_t stream) {
  // a second tile only when one (16 / G tokens) cannot hold the rows: fewer registers and shared
  // memory for the one-token decode
  return p.tokens > 16 / p.group ? launch_t<T, D, 2>(p, pdl, stream) : launch_t<T, D, 1>(p, pdl, stream);
}

template <typename T>
cudaError_t launch_dt(const Params& p, bool pdl, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: return launch_d<T, 64>(p, pdl, stream);
    case 128: return launch_d<T, 128>(p, pdl, stream);
    case 256: return launch_d<T, 256>(p, pdl, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch(const Params& p, bool pdl, cudaStream_t stream) {
  if (p.batch == 0 || p.hq == 0) return cudaSuccess;
  if (p.group < 1 || p.group > kMaxGroup || p.tokens < 1 || p.tokens > kMaxRows || p.batch > 65535 ||
      int64_t(p.hkv) * p.splits > 65535)
    return cudaErrorInvalidValue;
  if (p.splits > 1 && (p.ws == nullptr || p.ws_splits == nullptr)) return cudaErrorInvalidValue;
  if (p.ring != 2 && p.ring != 3) return cudaErrorInvalidValue;
  return p.f16 ? launch_dt<__half>(p, pdl, stream) : launch_dt<__nv_bfloat16>(p, pdl, stream);
}

}  // namespace qwen38::attn
