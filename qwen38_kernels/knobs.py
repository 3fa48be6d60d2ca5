"""QWEN38_* switches, one per kernel path, read at call time so they flip inside one process.

Each knob is an environment variable; ``override`` sets some for a ``with`` block (A/B timing in one
process). KNOBS.md lists the same table; a test keeps the two in step.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Knob:
    name: str
    default: str
    meaning: str


KNOBS: dict[str, Knob] = {k.name: k for k in [
    Knob("QWEN38_FUSED_NORM", "1",
         "1: rms_norm / add_rms_norm / rms_norm_gated / silu_mul run the fused CUDA kernels; 0: the wrappers in "
         "qwen38_kernels.ops call the pure-PyTorch references instead (eager A/B baseline)."),
    Knob("QWEN38_PDL", "1",
         "1: kernels launch with programmatic dependent launch (sm_90+): a kernel is scheduled while "
         "its predecessor finishes and waits (griddepcontrol.wait) before touching memory, hiding "
         "launch latency between back-to-back kernels; 0: plain stream-ordered launches. Same bits."),
    Knob("QWEN38_NORM_STREAM", "1",
         "1: many-row norm calls (rows * H >= 2^20, 16-byte-aligned rows, H in 65..16384) take the "
         "persistent streaming kernel (v5); 0: the v4 launch shapes (the A/B baseline). Same bits."),
    Knob("QWEN38_COMMIT_IN_VERIFY", "1",
         "1: qwen38_kernels.gdn_commit_verify runs the pending GDN commit and the next verify as one kernel "
         "(each state tile read once and written once per round); 0: gdn_commit then the verify op, two "
         "launches (a tile read twice, written once). Same bits."),
    Knob("QWEN38_GDN_TREE_SPLIT", "auto",
         "auto (default): gdn_tree_verify (without a folded commit) splits each sequence's depth-first node order into up to 4 runs verified side by side by separate CTAs, each replaying its first node's ancestors first, as many as the GPU holds at once (one run per 8 nodes at most; 1 where the unsplit grid fills a wave, e.g. at larger batch or on GB10's 48 SMs); 1..4: that many runs. A launch detail for A/B timing: same bits."),
    Knob("QWEN38_GDN_CHECK_INDICES", "1",
         "1: an eager call of a CUDA GDN op copies its index tensors (slots, lengths, parents, accepted) "
         "to the host and validates them as the reference does, raising ValueError naming the argument "
         "(one small synchronising copy; skipped while a CUDA graph is captured); 0: no copy. The kernels "
         "guard themselves either way: nothing out of range is read or written."),
    Knob("QWEN38_ATTN_KERNEL", "1",
         "1 (default): attn_decode on CUDA tensors runs the tensor-core kernels of csrc/attn (CUDA-graph "
         "safe); 0: the pure-PyTorch reference, one row at a time (slow, reads the index values on the host, "
         "not graph safe). Both keep the contract; their bits differ."),
    Knob("QWEN38_ATTN_CHECK_INDICES", "1",
         "(QWEN38_ATTN_KERNEL=1) 1 (default): an eager CUDA attn_decode call copies its index tensors (kv_lens, "
         "lengths, mask) to the host and validates them as the reference does, raising ValueError naming the "
         "argument (one small synchronising copy; skipped while a CUDA graph is captured); 0: no copy, "
         "asynchronous eager calls. The kernel guards itself either way: out-of-range values are clamped "
         "(lengths to [0, T], kv_lens to [length, L]; a row always sees its own key and never a later row's), "
         "nothing outside the cache is read."),
    Knob("QWEN38_ATTN_SPLIT", "auto",
         "(QWEN38_ATTN_KERNEL=1) The split rule of attn_decode's kernels: auto (default): a split holds at least 4 "
         "chunks of 64 keys and a row has at most 64 splits (csrc/attn/attn_launch.h); MIN,MAX: at least MIN "
         "chunks (1..64), at most MAX splits (1..256). A lab knob for A/B timing: the rule cuts a row's keys into "
         "the partial sums the merge adds, so other settings give other bits (rows stay row-invariant under any "
         "one setting)."),
    Knob("QWEN38_ATTN_SLOTS", "2",
         "(QWEN38_ATTN_KERNEL=1) K/V chunk slots of attn_decode's split kernel: 2 (default): one chunk load in "
         "flight; 3: two (where they fit a block: not GB10's 99 KB at D 256, an error there). On the H100 3 took "
         "8192 keys at T = 1 from 25.2 to 23.8 us but 32768 from 59.8 to 61.7 (session 40); after session 41's "
         "cheaper loads it is even at T = 1 and much slower at T >= 16 (one 118-KB CTA an SM: 8192 keys at "
         "T = 16 63.7 -> 105.1 us, benchmarks/results/h100/attn_s41_slots.md). A launch detail for A/B timing: "
         "same bits."),
    Knob("QWEN38_POISON_OUTPUTS", "0",
         "1: the CUDA ops allocate their outputs filled with NaN before the kernel runs, so an element "
         "a kernel never writes shows as NaN (the tests set this); 0: plain allocations."),
    Knob("QWEN38_STRICT_TABLES", "0",
         "1: a weight shape with no tile-table entry raises instead of warning once and taking the "
         "default variant (the tests set this)."),
    Knob("QWEN38_NVFP4_PREFILL", "auto",
         "nvfp4_linear with more than 32 rows (1..32 rows always take the skinny kernel). chunked: the "
         "skinny kernel on 32-row slices (each row bit-identical to its 1-row call; the weight is read "
         "once per 32 rows); dequant: dequantize once to x's dtype (exact) + one fp32-output cuBLAS GEMM "
         "+ epilogue (within the float64 bound, no row invariance, N*K*2 bytes of temporary weight); "
         "mma: the tensor-core kernel of csrc/gemm/nvfp4_prefill_kernel.cu, the weight read once and "
         "decoded in the kernel (K a multiple of 64; within the float64 bound, each row independent of "
         "the others and of the row count, not bit-identical to the 1..32-row kernels; no temporary), on "
         "Hopper in its warpgroup-MMA form (csrc/gemm/nvfp4_wgmma_kernel.cu, same bits; "
         "QWEN38_NVFP4_WGMMA); auto: dequant from a row threshold that depends on the weight shape only: "
         "the tile table's prefill_rows for (N, K) (the sweep's measured crossover), else the built-in "
         "rule (csrc/gemm/nvfp4_linear.cpp, nvfp4_prefill_dequant_rows), chunked below it; instead mma "
         "from 33 rows on a read-bound GPU (compute capability 12 such as GB10) where it serves K, and on "
         "Hopper where the wgmma form serves the call and the weight has N >= 8192 and K <= 6144 (where "
         "it was measured faster, benchmarks/results/h200/prefill_ab_15.md)."),
    Knob("QWEN38_PREFILL_TILE_ROWS", "auto",
         "Rows of one CTA tile of the tensor-core prefill kernels (QWEN38_NVFP4_PREFILL=mma, "
         "QWEN38_FP8_PREFILL=mma): 64, 128 or 256 (256: the NVFP4 wgmma form; the mma.sync kernels run it "
         "as 128); auto: 64 up to 64 rows, else 128 (the wgmma form: 128 up to 128 rows, else 256). "
         "Changes no bit (a row's sum runs over K in the same mma steps whatever the tile); for A/B timing."),
    Knob("QWEN38_NVFP4_WGMMA", "1",
         "1 (default): nvfp4_linear's mma prefill strategy runs its warpgroup-MMA form on Hopper "
         "(compute capability 9.0 with an sm_90a build; csrc/gemm/nvfp4_wgmma_kernel.cu: TMA copies, the "
         "weight decoded into wgmma's register operand) where it serves the call (K a multiple of 64, "
         "16-byte aligned rows); 0: the mma.sync kernel everywhere. Same bits; also lets auto take mma "
         "on Hopper (QWEN38_NVFP4_PREFILL)."),
    Knob("QWEN38_NVFP4_PREFILL_ROWS", "",
         "Empty: the threshold of QWEN38_NVFP4_PREFILL=auto from the tile table or the built-in rule; a "
         "positive integer R: auto takes the dequant strategy from R rows on, for every weight shape "
         "(tuning without a rebuild)."),
    Knob("QWEN38_NVFP4_PREFILL_LT", "1",
         "1 (default): the dequant strategy of the NVFP4 prefill runs one cuBLASLt matmul with the global scale as its alpha (read from device memory) and the bias in its epilogue (fp32, one rounding to the output dtype), where cuBLASLt offers an algorithm for the dtypes and the build found cuBLASLt; 0: the fp32-output GEMM chunks and the epilogue kernel. Both are within the float64 bound; neither is row-invariant (the dequant strategy never is)."),
    Knob("QWEN38_NVFP4_DEPTH", "",
         "Empty: the NVFP4 skinny kernel (1..32 rows) keeps ~96 bytes of weights per thread in flight (ring depth 7, 4 or 3 steps of 128 k for 1, 2 or 4 tiles per warp); an integer 2..8: that many steps in the per-thread cp.async ring (2 = one step ahead), lowered where the shared memory does not fit. A launch detail for A/B timing: same bits."),
    Knob("QWEN38_NVFP4_L2SPAN", "128",
         "128 (default) or 256: the NVFP4 skinny kernel's weight copies carry the L2 fetch-size hint of that many bytes (a miss fills the whole aligned span into L2, so the next steps of a weight row hit L2 and DRAM reads longer runs); 0: plain copies. A launch detail for A/B timing: same bits."),
    Knob("QWEN38_NVFP4_STREAM", "1",
         "1 (default): the NVFP4 skinny path (1..32 rows) uses the register-stream kernel where it serves the shape (K 5120, 6144 or 17408, N a multiple of 8 x the tiles per warp; 2 or 4 tiles per warp at every row count, and 1 at K 5120 with k split 8, the model's weights of 48 to 1024 rows: all of a warp's steps in flight at once; weights straight from global memory into registers); 0: the cp.async ring kernel for every row count. A launch detail for A/B timing: same bits."),
    Knob("QWEN38_NVFP4_STAGED", "auto",
         "auto (default): the NVFP4 register-stream kernel at K = 5120, k split 4 and 4 tiles a warp (the "
         "tables' choice for the model's weights of 6144 rows and more) runs its staged body "
         "(csrc/gemm/nvfp4_stream_kernel.cuh nvfp4_stream_ts: each thread's weight bytes and scale word "
         "through a per-thread cp.async ring of 2 steps in shared memory, 20 KB a CTA, about half the "
         "registers) on compute capability 9 at 1..16 rows when the register form's grid needs more than one "
         "round of CTAs and the staged one's fits in one (H200: 17408x5120 at 1 / 16 rows 26.0 / 31.5 -> 21.6 "
         "/ 30.3 us; benchmarks/lab/nvfp4_ring_t_lab.cu); 1: the staged body wherever it is compiled; 0: "
         "never. A launch detail: same bits."),
    Knob("QWEN38_NVFP4_ONE_GROUP", "auto",
         "auto (default): the NVFP4 register-stream kernel at 2 or 4 tiles a warp runs 1..8 rows with the "
         "x-as-A body (csrc/gemm/nvfp4_stream_kernel.cuh nvfp4_stream_xa, the body of its 9..16-row "
         "instantiation) instead of the transposed one (nvfp4_stream_t) on compute capability 9 when the "
         "register form's grid (no cluster form) needs more than two rounds of CTAs (H200: 34816x5120, "
         "1088 CTAs at 4 an SM; lab, 1 / 4 / 8 rows: 42.8 / 44.2 / 45.2 -> 41.2 / 41.5 / 43.3 us; "
         "benchmarks/lab/nvfp4_ring_t_lab.cu); `xa`: the x-as-A body wherever the kernel serves the call; "
         "`t`: the transposed body. A launch detail: same bits."),
    Knob("QWEN38_NVFP4_XFRAG", "auto",
         "auto (default): on compute capability 9, nvfp4_linear at 9..32 rows (each 32-row slice of 9 rows "
         "or more) through the register-stream kernel at 4 tiles a warp with K = 5120 and k split 4 (the "
         "tables' choice for the model's weights of 6144 rows and more) or K = 6144 / 17408 and k split 8 "
         "(5120x6144, 5120x17408) first copies x into the fragment order (csrc/gemm/stream_common.cuh "
         "activation_frag: the 16 bytes each lane of a warp reads for one word of a group of 8 rows lie in "
         "one 512-byte run, 4 L1 lines instead of 16; a 32-row buffer, K x 64 bytes), then runs the same "
         "body reading the copy, each word stored as the body's mma operands take it (nvfp4_stream_tf_kernel; "
         "H200, 34816x5120 at 16 / 24 / 32 rows 50.2 / 63.3 / 75.9 -> 39.1 / 50.0 / 50.2 us, bench_nvfp4; "
         "benchmarks/lab/nvfp4_xperm_lab.cu); also at 1..8 rows where QWEN38_NVFP4_ONE_GROUP runs the x-as-A "
         "body (auto: 34816x5120 on the H200, 1 / 4 / 8 rows 41.0 / 41.3 / 42.8 -> 38.1 / 37.9 / 38.1 us; "
         "scripts/ab_skinny.py; the transposed body's shapes lose 2-20% with the copy); other devices: "
         "never (not measured); 1: at every row count 1..32 where it serves (1..8 rows through the 2-group "
         "kernel, the x-as-A body), unless QWEN38_NVFP4_STAGED=1; 0: never. A launch detail: same bits."),
    Knob("QWEN38_NVFP4_FOUR_CTAS", "auto",
         "auto (default): on compute capability 9, nvfp4_linear at 17..32 rows in bf16 where the "
         "register-stream kernel reads x in the fragment order (QWEN38_NVFP4_XFRAG) at K = 5120, k split 4 and "
         "4 tiles a warp runs that kernel's form held to 128 registers, 4 CTAs an SM "
         "(csrc/gemm/nvfp4_stream_kernel.cuh nvfp4_stream_tf4_kernel; the default form: 156-168 registers, 3; at "
         "25..32 rows its sm_90a build spills 72 bytes, allowed by scripts/spill_allow.txt; measured faster all the "
         "same: 16384x5120 at 25 / 28 / 32 rows 31.4 / 31.9 / 31.9 -> 29.4 / 29.3 / 29.7 us, 14336x5120 30.5 / 30.5 / "
         "30.9 -> 28.1 / 27.9 / 28.0, session 36) when "
         "its grid fits in one round of CTAs and the default form's does not (H200: 16384x5120 and 14336x5120, "
         "512 and 448 CTAs; at 17 / 24 rows 27.8 / 28.2 -> 25.2 / 25.8 us and 27.1 / 27.3 -> 23.2 / 22.9, "
         "scripts/ab_skinny.py; other shapes lose 4-12% under the cap); 1: wherever compiled; 0: never. A "
         "launch detail: same bits."),
    Knob("QWEN38_NVFP4_XSHARE", "1",
         "1 (default): nvfp4_linear on weights of few rows at K = 5120 and k split 8 (with QWEN38_NVFP4_STREAM=1: N a multiple of 8 up to 128 at 1..32 rows, the model's 48- and 96-row weights; N a multiple of 16 up to 1024 at 9..32 rows, its 1024-row ones) runs the x-shared kernel (csrc/gemm/nvfp4_xshare_kernel.cuh): clusters of 8 CTAs, one per k-split warp, each CTA copying its k range of x into shared memory once for all its tiles, every weight step in flight from the start, the partials sent by st.async and summed in warp order in the cluster's shared memory (H200, x cold, PDL: 48x5120 at 1 / 16 / 32 rows 2.36 / 2.75 / 3.33 us against the stream kernel's 3.01 / 3.72 / 4.66, 1024x5120 at 16 / 32 rows 4.60 / 5.78 against 5.28 / 7.55; benchmarks/lab/xshare_lab.cu); where the device cannot place the clusters, the stream kernel; 0: the stream kernel. A launch detail: same bits."),
    Knob("QWEN38_NVFP4_XSPLIT", "auto",
         "nvfp4_linear at 1..32 rows on the large weights' variants (K = 5120 at k split 4 and 4 tiles a warp; "
         "K = 17408 / 6144 at k split 8 and 4 tiles) through the k-split-across-CTAs kernel "
         "(csrc/gemm/xsplit_kernel.cuh): a cluster of k split CTAs holds the k split, the warps of a CTA are "
         "tile groups sharing one copy of x's k range staged in shared memory, so x crosses L2 once a cluster "
         "instead of once a tile group; the partials are summed in k-split order (the register-stream "
         "kernel's bits). auto (default): on compute capability 9, 10240x5120 at 1..8 rows, where the H200 "
         "timed 14.75 / 16.26 -> 14.16 / 14.92 us at 1 / 8 rows (an H100 16.3 / 18.7 -> 14.1 / 15.0; "
         "benchmarks/results/h200/xsplit_s46.md), and 5120x6144 at 1..16 and 25..32 rows, where the H200 "
         "timed 9.80 / 13.92 / 18.19 -> 9.52 / 10.30 / 14.61 us at 1 / 16 / 32 rows against the product's "
         "path (benchmarks/results/h200/xsplit_s47.md; 17..24 rows slower); not 34816x5120 (11% faster on "
         "an H100, 1-4% slower on the H200), 17408, 16384, 14336, 12288 or 6144 x 5120 or 5120x17408 "
         "(slower), nor the K = 5120 weights at 9..32 rows, where the stream kernel reading x in the "
         "fragment order is faster; elsewhere and on other devices never; 1: wherever compiled and the "
         "device places the clusters; 0: never. A launch detail: same bits."),
    Knob("QWEN38_FP8_PREFILL", "auto",
         "fp8_block_linear at more than 32 rows. chunked: the skinny kernel on 32-row slices (each row bit-identical to its 1-row call; the weight read once per slice); mma: the tensor-core kernel of csrc/gemm/fp8_prefill_kernel.cu, the contract's block arithmetic in tiles of 64 or 128 rows x 128 columns (bf16 or fp16 x; within the float64 bound, each row independent of the others and of the row count, not bit-identical to the 1..32-row kernels); dequant (bf16 x, a build with cuBLASLt; for A/B timing: slower than mma where measured): the weight split once into three bf16 terms summing exactly to fp32(e4m3 * block scale), three cuBLAS GEMMs into one fp32 sum, the epilogue (within the float64 bound, no row invariance, 6 bytes a weight of temporary terms, at most 384 MB at a time); auto (default): mma from the tile table's prefill_rows for the weight shape (the sweep's measured crossover), else from 64 rows (kMmaRows in csrc/gemm/fp8_block_linear.cpp: measured on the H200), 33 on a read-bound GPU (compute capability 12 such as GB10: the weight read once instead of once per slice); chunked below."),
    Knob("QWEN38_FP8_XSPLIT", "auto",
         "fp8_block_linear at 1..32 rows on the large weights' variants (K = 5120 at k split 4 and 4 tiles a "
         "warp; K = 17408 / 6144 at k split 8 and 2 tiles) through the k-split-across-CTAs kernel "
         "(csrc/gemm/xsplit_kernel.cuh; as QWEN38_NVFP4_XSPLIT). auto (default): on compute capability 9, "
         "at K = 17408 (5120x17408: 320 tile groups, each reading all of x) and on 5120x6144 at 17..32 rows, "
         "where an H100 timed 53.5 / 53.4 / 61.7 -> 46.3 / 49.0 / 53.4 us at 17 / 24 / 32 rows (5120x17408) "
         "and 22.1 / 24.9 -> 20.2 / 22.5 at 17 / 32 rows (5120x6144) against the stream kernel reading x in "
         "the fragment order (benchmarks/results/h100/xsplit_s45.md, xsplit_s47.md; slower at 1..16 rows "
         "and on the K = 5120 weights); elsewhere and on other devices never; 1: wherever "
         "compiled and the device places the clusters; 0: never. A launch detail: same bits."),
    Knob("QWEN38_FP8_XFRAG", "auto",
         "auto (default): on compute capability 9, fp8_block_linear at 9..32 rows (each 32-row slice of 9 "
         "rows or more) through the register-stream kernel at K = 5120 and k split 4 (2 and 4 tiles a warp: "
         "the tables' choice for the weights of 6144 rows and more) or K = 6144 / 17408, k split 8 and 2 "
         "tiles (5120x6144, 5120x17408) first copies x into the fragment order, then runs the same body "
         "reading the copy (fp8_stream_tf_kernel), as QWEN38_NVFP4_XFRAG does for nvfp4_linear; other "
         "devices: never (not measured); 1: at every row count 1..32 where it serves (1..8 rows through the "
         "2-group kernel); 0: never. A launch detail: same bits."),
    Knob("QWEN38_FP8_THREE_CTAS", "auto",
         "auto (default): on compute capability 9, fp8_block_linear at 17..24 rows where the register-stream "
         "kernel reads x in the fragment order (QWEN38_FP8_XFRAG) at K = 5120, k split 4 and 4 tiles a warp "
         "runs that kernel's form held to 168 registers, 3 CTAs an SM (csrc/gemm/fp8_stream_kernel.cuh "
         "fp8_stream_tf3_kernel; the default form: 216-222 registers, 2; its sm_90a build spills 16-56 bytes, "
         "allowed by scripts/spill_allow.txt) when that runs the grid in fewer rounds of CTAs (H200: "
         "34816x5120, 17408x5120, 12288x5120 and 10240x5120; at 17 rows 72.1 -> 63.5, 43.2 -> 38.8, 30.0 -> "
         "24.6 and 28.7 -> 21.9 us with bf16 x, benchmarks/results/h200/fp8_wide3_s44.md; 16384x5120, whose "
         "rounds stay 2, lost 33.8 -> 38.3); other devices and the sm_121a build: never; 1: wherever compiled; "
         "0: never. A launch detail: same bits."),
    Knob("QWEN38_FP8_STREAM", "1",
         "1 (default): the FP8 block skinny path (1..32 rows) uses the register-stream kernel where it serves the shape (K 5120, 6144 or 17408, N a multiple of 8 x the tiles per warp; 2 tiles per warp, or 4 at k splits 2 and 4, or 1 at K 5120 with k split 8 (the model's weights of 48 to 1024 rows: all of a warp's steps in flight at once); 17..32 rows with a second m16 tile); narrow: the stream kernel at 1..16 rows only, the skinny kernel at 17..32; 0: the skinny kernel for every row count. A launch detail for A/B timing: same bits."),
    Knob("QWEN38_SPREAD", "1",
         "1 (default): a grid under one wave of the skinny/stream weight kernels and the GDN kernels is launched with enough (unread) dynamic shared memory that no SM holds more than ceil(CTAs / SMs) of it (csrc/common/launch.cuh spread_smem), so it spreads over the SMs evenly whatever else is resident when its CTAs are placed; without it a grid launched early behind its predecessor by PDL fills the slots free first (H200: nvfp4_linear 12288x5120 at 1 row 19.1 us, 16.6 with it, 16.6 without PDL; no other measured shape moved by more than noise); 0: the kernels' own shared memory. A launch detail: same bits."),
    Knob("QWEN38_SKINNY_CLUSTER", "auto",
         "auto (default): the register-stream skinny kernels (nvfp4_linear at k split 8, fp8_block_linear at k split 8 and K = 5120; 1..32 rows) may spread the 8 k-split warps of each output tile over the CTAs of a thread-block cluster; every warp writes its partial sums into the shared memory of the cluster's first CTA, which adds them in warp order. Auto takes, of 1, 2 and 4 CTAs a tile, the one that puts the fewest warps on the busiest SM among those whose grid runs in one wave (ties: the smaller): the model's 48- and 96-row weights (K = 5120) take 4 (a grid of 6 or 12 tiles otherwise reads all its activations through a few SMs: H200, 48x5120 at 32 rows 7.6 us in one CTA a tile, 4.1 in clusters of 4), the 5120-row weights at 1..16 rows take 2 (160 tiles of 8 warps otherwise put two CTAs on some SMs and one on the others: 5120x17408 at 1 row 30.5 -> 26.8 us); 1: one CTA a tile; 2, 4, 8: that many CTAs a tile (capped at the k split; a kernel without the cluster form launches as with 1). Measured with benchmarks/lab/cluster_ab.py. A launch detail: same bits."),
    Knob("QWEN38_HEAD_KERNEL", "tiles",
         "The output head's kernel (head_logits, head_argmax). tiles (default): 32-row x 128-column tiles "
         "on the tensor-core machinery of the prefill kernels (csrc/gemm/head_tiles.cuh: x and the weight "
         "through cp.async stages, the weight stage read as B by ldmatrix); ring: the per-thread weight "
         "ring kernel (csrc/gemm/head_kernel.cuh, K split over warps). Each keeps every row's bits those of "
         "its 1-row call at every M; the two sum in different orders, so their bits differ."),
    Knob("QWEN38_HEAD_STAGES", "auto",
         "(QWEN38_HEAD_KERNEL=tiles, QWEN38_HEAD_COLS=128) The 128-column tiles' cp.async stages of 64 k. auto (default): of 4 stages (80 KB, two CTAs an SM on the H200) and 3 (60 KB, three CTAs an SM), the count whose last wave of 128-column tiles is the fuller (4 on a tie): 4 for the 32768-row draft vocabulary (256 tiles), 3 for lm_head (1940); 3 or 4: that many. A launch detail for A/B timing: same bits."),
    Knob("QWEN38_HEAD_COLS", "64",
         "(QWEN38_HEAD_KERNEL=tiles) The tiles kernel's column tile. 64 (default): head_narrow_kernel (csrc/gemm/head_tiles.cuh), 4-warp CTAs, more and shorter CTAs than 128 columns for the block scheduler to hand to the SMs that finish first (the 32768-row draft vocabulary is one partial wave of 128-column tiles; H200, session 36, cold: 32768 rows at 1 / 16 / 32 rows 80.2 / 81.6 / 82.9 -> 78.8 / 81.1 / 82.4 us, 248320 at 1 / 32 rows 581.4 / 609.9 -> 569.2 / 607.6 against 128 columns); 128: the 8-warp CTAs of the prefill kernels' machinery (QWEN38_HEAD_STAGES); 32: 2-warp CTAs. A logit's sum order does not depend on the tile width: same bits."),
    Knob("QWEN38_HEAD_NARROW_STAGES", "auto",
         "(QWEN38_HEAD_COLS=64 or 32) The narrow tiles' cp.async stages of 64 k. auto (default): 8 where two CTAs of 8 stages fit an SM (the H200: 96 KB each at 64 columns), else 4 (sm_121a's 99 KB holds one of 8, two of 4); 4 or 8: that many. A launch detail for A/B timing: same bits."),
    Knob("QWEN38_HEAD_BALANCE", "0",
         "(QWEN38_HEAD_COLS=64 or 32) 1: as many column tiles as fill whole waves of the resident CTA slots (the fewest multiple of SMs x CTAs an SM that keeps every tile within the column width), tile i taking the column groups of 8 [i G / T, (i + 1) G / T) (G = ceil(V / 8)): the 32768-row draft vocabulary as 528 tiles of 56-64 columns on the H200 (2 waves of 264) instead of 512 of 64 (1.94). 0 (default): ceil(V / cols) tiles. No gain on the H100 (session 40, head_balance_s40.md: the draft vocabulary 116.5 / 119.4 / 120.9 -> 116.1 / 119.2 / 121.2 us at 1 / 16 / 32 rows, lm_head 0.3-0.8% slower), hence off. A launch detail for A/B timing: same bits."),
    Knob("QWEN38_HEAD_DEPTH", "",
         "(QWEN38_HEAD_KERNEL=ring) Empty or 2: the output head's per-thread cp.async weight ring (1..16 rows) holds 2 steps (one in flight; two blocks per SM); 3 or 4: the deepest of that many and fewer steps whose shared memory fits a block; any other value: the default. A launch detail for A/B timing: same bits."),
    Knob("QWEN38_HEAD_RING32", "argmax",
         "(QWEN38_HEAD_KERNEL=ring) The output head at 17..32 rows. argmax (default): head_argmax streams the weights through the per-thread cp.async ring at two blocks per SM (128 registers), head_logits prefetches the next step's weights in registers at one block per SM; 1: both through the ring; 0: neither. Where two ring blocks do not fit an SM (e.g. 99 KB of shared memory), the register prefetch. A launch detail for A/B timing: same bits."),
    Knob("QWEN38_CONV_SILU_F64", "auto",
         "auto (default): the conv kernels evaluate the contract's silu (float64, rounded to fp32) in float64 on GPUs with half-rate FP64 (sm_80, sm_90, sm_100; faster there), elsewhere (GB10, sm_86/89/120/121) in fp32 where that gives the same bits and in float64 for the rest (csrc/conv/silu_exact.cuh; about 1 input in 24,000 of magnitude 2^-10 to 64); 1: always in float64; 0: always the fp32 form. A launch detail for A/B timing: same bits."),
    Knob("QWEN38_CONV_CHECK_INDICES", "1",
         "1: an eager CUDA call of conv_step / conv_chain / conv_tree / conv_commit copies its index "
         "tensors (slots, lengths, parents, accepted) to the host and validates them like the reference "
         "(a small synchronising copy; skipped during CUDA-graph capture); 0: no copy, the kernel's own "
         "guards only (out-of-range indices write nothing and give zero outputs)."),
]}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def get(name: str) -> str:
    if name not in KNOBS:
        raise KeyError(f"unknown knob {name!r}; known: {', '.join(sorted(KNOBS))}")
    return os.environ.get(name, KNOBS[name].default)


def enabled(name: str) -> bool:
    v = get(name).strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"knob {name}={v!r}: expected one of 1/0/true/false/yes/no/on/off")


def in_force() -> dict[str, str]:
    """Every knob with its current value, and whether it differs from the default."""
    return {n: get(n) for n in KNOBS}


@contextlib.contextmanager
def override(**values):
    """``with knobs.override(QWEN38_FUSED_NORM="0"): ...`` sets knobs for the block, then restores."""
    for n in values:
        get(n)  # validates the name
    old = {n: os.environ.get(n) for n in values}
    try:
        for n, v in values.items():
            os.environ[n] = str(int(v)) if isinstance(v, bool) else str(v)
        yield
    finally:
        for n, v in old.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v
