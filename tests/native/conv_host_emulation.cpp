// Runs the causal-conv1d CUDA kernel source (csrc/conv/conv_kernel.cuh) on the host, for machines
// without a GPU. The kernel has no barriers, shuffles or shared memory: each thread's body runs to
// its end, one thread after another, over the launch's grid (conv_grid: 256 channels a block,
// a block row per verify node, a block layer per sequence). The _rn intrinsics are plain IEEE operations (built with
// -ffp-contract=off: no fused multiply-add); exp comes from the host libm, so a value within an ulp
// of an fp32 rounding boundary could round differently than on a GPU (none is expected in a test).
// What this checks is the kernel's indexing, walks, window order and guards, against the reference
// (tests/test_conv.py, test_host_emulation_*).
//
//   conv_host_emulation DIR
// DIR holds params.txt ("key value" lines) and the raw little-endian tensors it names (x.bin,
// state.bin, weight.bin, slots.bin, and lengths.bin / parents.bin / accepted.bin where the mode takes
// them); the emulator writes y.bin (chain, tree, step) and state_out.bin (the whole state) into DIR.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "emu_io.h"

namespace emu {
struct Dim3 {
  unsigned x, y, z;
};
Dim3 g_block{0, 0, 0}, g_thread{0, 0, 0};
}  // namespace emu

#undef __global__
#define __global__
#undef __launch_bounds__
#define __launch_bounds__(...)
#define threadIdx (emu::g_thread)
#define blockIdx (emu::g_block)

inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }

#include "conv/conv_kernel.cuh"

namespace {

using namespace qwen38::conv;
using emu::read_file;
using emu::read_params;
using emu::write_file;

template <typename T, typename W, Mode M>
void run_grid(const Params& p) {
  const dim3 grid = conv_grid(M, p);
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx)
        for (unsigned t = 0; t < unsigned(kThreads); ++t) {
          emu::g_block = {bx, by, bz};
          emu::g_thread = {t, 0, 0};
          conv_kernel<T, W, M>(p);
        }
}

template <typename T, typename W>
void run_mode(Mode m, const Params& p) {
  switch (m) {
    case Mode::kStep: return run_grid<T, W, Mode::kStep>(p);
    case Mode::kChain: return run_grid<T, W, Mode::kChain>(p);
    case Mode::kTree: return run_grid<T, W, Mode::kTree>(p);
    case Mode::kCommit: return run_grid<T, W, Mode::kCommit>(p);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: conv_host_emulation DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  auto prm = read_params(dir);
  auto num = [&](const char* k) { return std::stoll(prm.at(k)); };
  const std::string mode_s = prm.at("mode");
  const Mode mode = mode_s == "step" ? Mode::kStep : mode_s == "chain" ? Mode::kChain
                  : mode_s == "tree" ? Mode::kTree : Mode::kCommit;

  Params p;
  std::vector<char> x = read_file(dir + "/x.bin"), state = read_file(dir + "/state.bin"),
                    weight = read_file(dir + "/weight.bin"), slots = read_file(dir + "/slots.bin");
  std::vector<char> lengths, parents, accepted;
  p.x = x.data();
  p.x_sb = num("x_sb");
  p.x_st = num("x_st");
  p.f16 = num("f16") != 0;
  p.state = state.data();
  p.state_rows = num("state_rows");
  p.weight = weight.data();
  p.weight_f32 = num("weight_f32") != 0;
  p.slots = slots.data();
  p.slots64 = num("slots64") != 0;
  if (num("has_lengths")) {
    lengths = read_file(dir + "/lengths.bin");
    p.lengths = lengths.data();
    p.lengths64 = num("lengths64") != 0;
  }
  if (num("has_parents")) {
    parents = read_file(dir + "/parents.bin");
    p.parents = parents.data();
    p.parents64 = num("parents64") != 0;
    p.parents_sb = num("parents_sb");
  }
  if (num("has_accepted")) {
    accepted = read_file(dir + "/accepted.bin");
    p.accepted = accepted.data();
    p.accepted64 = num("accepted64") != 0;
  }
  p.batch = num("batch");
  p.tokens = num("tokens");
  p.channels = num("channels");
  std::vector<uint16_t> y(size_t(p.batch * p.tokens * p.channels), 0xffffu);  // NaN: every output written
  p.y = mode == Mode::kCommit ? nullptr : y.data();

  if (p.f16) {
    if (p.weight_f32) run_mode<__half, float>(mode, p);
    else run_mode<__half, __half>(mode, p);
  } else {
    if (p.weight_f32) run_mode<__nv_bfloat16, float>(mode, p);
    else run_mode<__nv_bfloat16, __nv_bfloat16>(mode, p);
  }
  if (mode != Mode::kCommit) write_file(dir + "/y.bin", y.data(), y.size() * sizeof(uint16_t));
  write_file(dir + "/state_out.bin", state.data(), state.size());
  return 0;
}
