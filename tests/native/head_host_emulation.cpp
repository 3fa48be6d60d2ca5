// Runs the output head's tile kernels (csrc/gemm/head_tiles.cuh: head_tiles_kernel at 128 columns,
// head_narrow_kernel at 64 / 32; then head_kernel.cuh's head_argmax_finish for head_argmax) on the
// host, for machines without a GPU, on the CTA runtime of emu_cta.h / emu_cuda.h and the tensor-core
// models of emu_mma.h (its mma's bits are a model's, not a GPU's). What this checks: the tiles' x and
// weight loaders, the cp.async stage ring, the fragment layouts, the stores and the greedy epilogue,
// against the reference (tests/test_head.py, test_host_emulation_*), and that the column tile width
// and the row count change no bit under the model.
//
//   head_host_emulation DIR
// DIR holds params.txt (m, v, k, f16, cols 128 / 64 / 32, stages, argmax, copies, sched, and optionally
// tiles: T > 0 runs the narrow kernel's balanced tiles, T CTAs of near-equal width) and x.bin
// [m, k], w.bin [v, k] (16-bit); writes y.bin (fp32 [m, v]) or best_val.bin (fp32 [m]) and
// best_idx.bin (int64 [m]).
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
#undef __shared__
#define __shared__ static  // one CTA at a time: a kernel's static shared arrays are shared by its threads

namespace qwen38::gemm {
alignas(128) unsigned char emu_head_smem[128 * 1024];
}

#include "gemm/head_tiles.cuh"

namespace {

using namespace qwen38::gemm;

template <typename T, bool ARGMAX>
void run_tiles(const HeadParams& p, int cols, int stages, int blocks) {
  emu::g_grid_dim[0] = 1, emu::g_grid_dim[1] = unsigned(blocks), emu::g_grid_dim[2] = 1;
  for (int y = 0; y < blocks; ++y) {
    const emu::Dim3 b{0u, unsigned(y), 0u};
    if (cols == 128) {
      if (stages == 4) emu::run_cta(b, prefill::kThreads, [&p]() { head_tiles_kernel<T, ARGMAX, 4>(p); });
      else emu::run_cta(b, prefill::kThreads, [&p]() { head_tiles_kernel<T, ARGMAX, 3>(p); });
    } else if (cols == 64) {
      if (stages == 8) emu::run_cta(b, 128, [&p]() { head_narrow_kernel<T, ARGMAX, 64, 8>(p); });
      else emu::run_cta(b, 128, [&p]() { head_narrow_kernel<T, ARGMAX, 64, 4>(p); });
    } else {
      if (stages == 8) emu::run_cta(b, 64, [&p]() { head_narrow_kernel<T, ARGMAX, 32, 8>(p); });
      else emu::run_cta(b, 64, [&p]() { head_narrow_kernel<T, ARGMAX, 32, 4>(p); });
    }
  }
  emu::g_grid_dim[0] = unsigned(p.m), emu::g_grid_dim[1] = 1;
  if constexpr (ARGMAX)
    for (int r = 0; r < int(p.m); ++r)
      emu::run_cta(emu::Dim3{unsigned(r), 0u, 0u}, 32, [&p, blocks]() { head_argmax_finish(p, blocks); });
}

template <typename T>
void run(const HeadParams& p, bool argmax, int cols, int stages, int blocks) {
  if (argmax) run_tiles<T, true>(p, cols, stages, blocks);
  else run_tiles<T, false>(p, cols, stages, blocks);
}

}  // namespace

int main(int argc, char** argv) {
  emu::RunDir rd(argc, argv);
  emu::use_smem(qwen38::gemm::emu_head_smem, sizeof(qwen38::gemm::emu_head_smem));
  emu::g_early_copies = rd.get("copies") == "early";
  emu::g_prio = rd.get("sched") == "prio";
  HeadParams p;
  p.m = std::stoll(rd.get("m"));
  p.v = std::stoll(rd.get("v"));
  p.k = std::stoll(rd.get("k"));
  p.x_stride = p.k;
  p.x = rd.ptr("x");
  p.w = rd.ptr("w");
  const bool f16 = rd.get("f16") == "1", argmax = rd.get("argmax") == "1";
  const int cols = std::stoi(rd.get("cols")), stages = std::stoi(rd.get("stages"));
  const std::string tiles = rd.get("tiles");
  const int balanced = tiles == "none" ? 0 : std::stoi(tiles);
  p.balanced = balanced > 0 ? 1 : 0;
  const int blocks = balanced > 0 ? balanced : int((p.v + cols - 1) / cols);
  std::vector<float> y(size_t(p.m * p.v), std::nanf("")), ws_val(size_t(blocks) * kHeadMaxRows, std::nanf(""));
  std::vector<int32_t> ws_idx(size_t(blocks) * kHeadMaxRows, -7);
  std::vector<float> best_val(size_t(p.m), std::nanf(""));
  std::vector<int64_t> best_idx(size_t(p.m), -7);
  p.y = y.data();
  p.ws_val = ws_val.data();
  p.ws_idx = ws_idx.data();
  p.best_val = best_val.data();
  p.best_idx = best_idx.data();
  if (f16) run<__half>(p, argmax, cols, stages, blocks);
  else run<__nv_bfloat16>(p, argmax, cols, stages, blocks);
  if (argmax) {
    emu::write_file(rd.dir + "/best_val.bin", best_val.data(), best_val.size() * 4);
    emu::write_file(rd.dir + "/best_idx.bin", best_idx.data(), best_idx.size() * 8);
  } else {
    emu::write_file(rd.dir + "/y.bin", y.data(), y.size() * 4);
  }
  return 0;
}
