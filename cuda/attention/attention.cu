// Launchers of the Hopper attention forward (csrc/include/mymetaops/attention.h). A launch is two
// kernels on the stream: a prologue that checks the offsets into the error record, writes the rows
// no CTA covers (out 0, lse -inf), zeroes the tile counter (the workspace) and, for long enough
// sequences, sorts them by length into it; then the persistent TMA + wgmma kernel of fwd_kernel.cuh (one CTA per SM),
// which hands tiles out from that counter in that order.
#include <cuda_runtime.h>

#include <cstdint>

#include <cub/block/block_scan.cuh>

#include "../cuda_utils.cuh"
#include "fwd_kernel.cuh"
#include "launch_common.cuh"
#include "mymetaops/attention.h"

namespace mymetaops {

namespace cuda {
namespace attention {
namespace {

constexpr int kPrologueThreads = 256;
constexpr int kAlignElems = 8;  // 16 bytes: TMA's address and stride granularity
constexpr int64_t kGroupWaves = 2;  // see group_pairs below
// Sort keys are 128-row blocks per sequence, whatever the tiling; sequences of more than 2047
// blocks (262K rows) share the last bucket, where their order among themselves matters little.
constexpr int kSortBlockRows = 128;
constexpr int kOrderBuckets = 2048;
constexpr int kOrderPerThread = kOrderBuckets / kPrologueThreads;
// Sequences a thread of the sorting block keys per round, their loads in flight together: 2048 a
// round. The block runs beside the B per-sequence blocks, which take longer for large B.
constexpr int kOrderLoads = 8;
// Sequences are sorted when max_seq_len spans at least this many 128-row blocks. With at most 4 a
// late long sequence leaves a short tail, and index order ran up to 7% faster at N = 256 and 512
// (run 13); from 8 blocks (N = 1024 and up) the sorted order ran 7-27% faster.
constexpr int64_t kSortMinBlocks = 5;

// Zero out[r0, r1) (all heads) and set lse[:, r0 .. r1) to -inf, by the threads of one block.
__device__ void clear_rows(void* out, float* lse, int64_t r0, int64_t r1, int64_t row_elems, int heads,
                           int64_t total) {
  if (r1 <= r0) return;
  uint4* o = reinterpret_cast<uint4*>(static_cast<uint16_t*>(out) + r0 * row_elems);
  const int64_t vecs = (r1 - r0) * row_elems / kAlignElems;
  for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) o[i] = make_uint4(0, 0, 0, 0);
  if (lse == nullptr) return;
  for (int64_t i = threadIdx.x; i < (r1 - r0) * heads; i += blockDim.x) {
    lse[(i / (r1 - r0)) * total + r0 + i % (r1 - r0)] = -INFINITY;
  }
}

// By the threads of one block: workspace[1 + i] = the sequence of rank i by q blocks, descending (a counting sort; ties in any order). The persistent
// kernel takes (sequence, head) pairs in this order, so the costliest tiles start first and the
// last ones handed out are short (longest processing time first). In index order a long sequence
// late in the batch ran alone at the end: ncu had the SMs busy 75-79% of the kernel on average
// (run 12). Needs max_seq_len > 0.
template <typename IndexT>
__device__ void order_sequences(const IndexT* offsets, int64_t batch, int64_t total, int64_t max_seq_len,
                                int32_t* workspace) {
  using Scan = cub::BlockScan<int32_t, kPrologueThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int32_t next[kOrderBuckets];  // per key: its count, then the next free rank
  for (int k = threadIdx.x; k < kOrderBuckets; k += kPrologueThreads) next[k] = 0;
  __syncthreads();
  // q blocks of sequences b0, b0 + T, ... (kOrderLoads of them, -1 past the batch) as the
  // persistent kernel sees them (tile_at's clamps).
  auto keys = [&](int64_t b0, int (&key)[kOrderLoads]) {
    for (int i = 0; i < kOrderLoads; ++i) {
      const int64_t b = b0 + i * kPrologueThreads;
      if (b >= batch) {
        key[i] = -1;
        continue;
      }
      const int64_t start = min(max(static_cast<int64_t>(offsets[b]), int64_t{0}), total);
      const int64_t end = min(max(static_cast<int64_t>(offsets[b + 1]), int64_t{0}), total);
      const int64_t len = min(max(end - start, int64_t{0}), max_seq_len);
      key[i] = static_cast<int>(min((len + kSortBlockRows - 1) / kSortBlockRows, int64_t{kOrderBuckets - 1}));
    }
  };
  constexpr int64_t kRound = int64_t{kPrologueThreads} * kOrderLoads;
  for (int64_t b0 = threadIdx.x; b0 < batch; b0 += kRound) {
    int key[kOrderLoads];
    keys(b0, key);
    for (int i = 0; i < kOrderLoads; ++i) {
      if (key[i] >= 0) atomicAdd(&next[key[i]], 1);
    }
  }
  __syncthreads();
  // Exclusive sum from the largest key down: a key's first rank is the count of longer sequences.
  int32_t mine[kOrderPerThread];
  for (int i = 0; i < kOrderPerThread; ++i) mine[i] = next[kOrderBuckets - 1 - (threadIdx.x * kOrderPerThread + i)];
  Scan(scan).ExclusiveSum(mine, mine);
  __syncthreads();
  for (int i = 0; i < kOrderPerThread; ++i) next[kOrderBuckets - 1 - (threadIdx.x * kOrderPerThread + i)] = mine[i];
  __syncthreads();
  for (int64_t b0 = threadIdx.x; b0 < batch; b0 += kRound) {
    int key[kOrderLoads];
    keys(b0, key);
    for (int i = 0; i < kOrderLoads; ++i) {
      if (key[i] >= 0) workspace[1 + atomicAdd(&next[key[i]], 1)] = static_cast<int32_t>(b0 + i * kPrologueThreads);
    }
  }
}

// Block b < batch: checks offsets[b + 1] and sequence b's length, clears its rows past
// max_seq_len. Block batch: checks offsets[0], clears the rows outside every sequence, zeroes the
// tile counter and, when `sort` (max_seq_len > 0 then), sorts the sequences (order_sequences).
template <typename IndexT>
__global__ void __launch_bounds__(kPrologueThreads) prologue(const IndexT* offsets, int64_t batch, int64_t total,
                                                             int64_t max_seq_len, void* out, float* lse, int heads,
                                                             int64_t row_elems, int64_t* errors, ErrorOp op,
                                                             int32_t* workspace, bool sort) {
  const int64_t b = blockIdx.x;
  if (b == batch) {
    if (threadIdx.x == 0) workspace[0] = 0;
    if (sort) order_sequences(offsets, batch, total, max_seq_len, workspace);
    const int64_t first = offsets[0];
    if (threadIdx.x == 0 && first != 0) record_error(errors, op, ErrorCode::kOffsetNotAtEnd, 0, first, 0);
    const int64_t lo = min(max(first, int64_t{0}), total);
    const int64_t hi = min(max(static_cast<int64_t>(offsets[batch]), int64_t{0}), total);
    clear_rows(out, lse, 0, lo, row_elems, heads, total);
    clear_rows(out, lse, max(hi, int64_t{0}), total, row_elems, heads, total);
    return;
  }
  const int64_t raw_start = offsets[b], raw_end = offsets[b + 1];
  if (threadIdx.x == 0) {
    if (raw_end < raw_start) {
      record_error(errors, op, ErrorCode::kDecreasingOffset, b + 1, raw_end, 0);
    } else if (b + 1 == batch && raw_end != total) {
      record_error(errors, op, ErrorCode::kOffsetNotAtEnd, b + 1, raw_end, total);
    } else if (raw_end - raw_start > max_seq_len) {
      record_error(errors, op, ErrorCode::kLengthAboveMax, b, raw_end - raw_start, max_seq_len);
    }
  }
  const int64_t start = min(max(raw_start, int64_t{0}), total);
  const int64_t end = max(min(max(raw_end, int64_t{0}), total), start);
  clear_rows(out, lse, start + min(end - start, max(max_seq_len, int64_t{0})), end, row_elems, heads, total);
}

// Blocks of block_m rows in the longest possible sequence: a sequence's used rows never exceed
// min(max_seq_len, total).
int64_t q_blocks(const AttentionForwardArgs& a, int block_m) {
  const int64_t rows = a.max_seq_len < a.total ? a.max_seq_len : a.total;
  return rows > 0 ? (rows + block_m - 1) / block_m : 0;
}

template <typename T, int D, typename IndexT, class Tl>
LaunchError launch_typed(const AttentionForwardArgs& a, cudaStream_t stream) {
  const IndexT* offsets = static_cast<const IndexT*>(a.offsets);
  int32_t* workspace = static_cast<int32_t*>(a.workspace);
  const bool sort = q_blocks(a, kSortBlockRows) >= kSortMinBlocks;
  prologue<IndexT><<<static_cast<unsigned>(a.batch + 1), kPrologueThreads, 0, stream>>>(
      offsets, a.batch, a.total, a.max_seq_len, a.out, a.lse, a.heads, static_cast<int64_t>(a.heads) * D,
      a.errors, a.error_op, workspace, sort);
  if (LaunchError e = launch_status()) return e;
  if (a.batch == 0 || a.total == 0 || a.max_seq_len <= 0) return nullptr;
  if (LaunchError e = bind_device_context()) return e;  // before the TMA descriptors

  using Tr = Traits<T, D, Tl>;
  const int total = static_cast<int>(a.total);
  Params<T, D, IndexT, Tl> p{
      Tr::tma_q(static_cast<const T*>(a.q), total, a.heads, a.q_row_stride, a.q_head_stride),
      Tr::tma_k(static_cast<const T*>(a.k), total, a.heads, a.k_row_stride, a.k_head_stride),
      Tr::tma_v(static_cast<const T*>(a.v), total, a.heads, a.v_row_stride, a.v_head_stride),
      offsets,
      sort ? workspace + 1 : nullptr,
      workspace,
      static_cast<T*>(a.out),
      a.lse,
      a.batch,
      a.total,
      a.max_seq_len,
      0,
      a.heads,
      0,
      1,
      kTileGrab,
      a.kind == AttentionKind::kSoftmax,
      a.causal,
      a.alpha,
      a.inv_max_seq_len};
  p.num_m_blocks = static_cast<int32_t>(q_blocks(a, Tl::kBlockM));
  const int64_t tiles = p.num_m_blocks * a.batch * a.heads;
  p.num_tiles = static_cast<int32_t>(tiles);
  const int64_t sms = a.sm_count > 0 ? a.sm_count : 1;
  const int64_t ctas = tiles < sms ? tiles : sms;  // persistent: one CTA per SM
  if (ctas == 0) return nullptr;
  // Groups of pairs holding about kGroupWaves x the tiles in flight (a pipe's, one CTA per SM) in
  // tiles: about half the tiles are empty under uniform lengths, so the tiles running at once come
  // from one or two groups, whose K/V (<= ~20 MB at D = 128) stay in the 50 MB L2 while every q
  // block of the group streams them. Whole sequences a group (a multiple of heads, rounded down),
  // probably because a row's heads sit side by side in q, k and v: a group splitting a sequence's
  // heads ran 1.02-1.16x slower (33 pairs for 32 at H = 2 and 4, 17 for 16, 9 for 8; run 48).
  const int64_t group = (kGroupWaves * sms * Tl::kPipes + p.num_m_blocks - 1) / p.num_m_blocks;
  const int64_t pairs = a.batch * a.heads;
  const int64_t whole = group / a.heads * a.heads;
  p.group_pairs = static_cast<int32_t>(whole < a.heads ? a.heads : whole > pairs ? pairs : whole);
  if (tiles < kSingleGrabTiles * ctas * Tl::kPipes) p.tile_grab = 1;
  constexpr int smem = sizeof(typename Tr::Smem);
  static_assert(smem <= 227 * 1024, "sm_90 lets a CTA opt into 227 KB of shared memory");
  return launch_with_smem(attention_fwd<T, D, IndexT, Tl>, ctas, smem, stream, p, Tl::kThreads);
}

// 64 x 64 tiles: a pipe per consumer warpgroup, three of them at D = 64 (shared memory and
// registers hold two at D = 128).
template <int D>
using Tiles64x64 = Tiling<64, 64, D == 64 ? 3 : 2>;

// Kernel index -> head dim and tiling (both kinds, both 16-bit dtypes each).
constexpr int kHeadDims[] = {64, 128, 64, 128};
constexpr bool kSmallTiles[] = {false, false, true, true};  // Tiles64x64, else Tiles128x128
const char* const kNames[] = {"hopper_d64_128x128", "hopper_d128_128x128", "hopper_d64_64x64", "hopper_d128_64x64"};
constexpr int kNumKernels = sizeof(kNames) / sizeof(kNames[0]);

bool aligned(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % (kAlignElems * 2) == 0; }
bool stride_ok(int64_t s) { return s > 0 && s % kAlignElems == 0; }

}  // namespace
}  // namespace attention
}  // namespace cuda

const char* const* attention_kernel_names(int32_t* count) {
  *count = cuda::attention::kNumKernels;
  return cuda::attention::kNames;
}

LaunchError attention_supports(const AttentionForwardArgs& a, const AttentionKernelConfig& config) {
  using namespace cuda::attention;
  if (config.kernel < 0 || config.kernel >= kNumKernels) return "native attention: no such kernel index";
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    return "native attention: cannot query the device's compute capability";
  }
  if (major != 9 || minor != 0) return "native attention: the Hopper kernels need an sm_90 device";
  if (a.kind != AttentionKind::kHstu && a.kind != AttentionKind::kSoftmax) return "native attention: unknown kind";
  if (a.dtype != DType::kBFloat16 && a.dtype != DType::kFloat16) return "native attention: dtype must be bf16 or fp16";
  if (a.offsets_dtype != DType::kInt32 && a.offsets_dtype != DType::kInt64) {
    return "native attention: offsets must be int32 or int64";
  }
  if (a.dqk != a.dv || a.dqk != kHeadDims[config.kernel]) {
    return kHeadDims[config.kernel] == 64 ? "native attention: kernel hopper_d64 needs dqk = dv = 64"
                                          : "native attention: kernel hopper_d128 needs dqk = dv = 128";
  }
  // TMA coordinates are int32, and a tile may start up to one tile past the last row.
  if (a.total >= (int64_t{1} << 30) || a.heads <= 0) return "native attention: needs total rows < 2^30, heads >= 1";
  if (q_blocks(a, Tiles64x64<64>::kBlockM) * a.batch * a.heads > (int64_t{1} << 30)) {
    return "native attention: needs (q blocks x sequences x heads) <= 2^30";
  }
  if (!aligned(a.q) || !aligned(a.k) || !aligned(a.v) || !aligned(a.out)) {
    return "native attention: q, k, v and out must be 16-byte aligned (TMA)";
  }
  if (!stride_ok(a.q_row_stride) || !stride_ok(a.q_head_stride) || !stride_ok(a.k_row_stride) ||
      !stride_ok(a.k_head_stride) || !stride_ok(a.v_row_stride) || !stride_ok(a.v_head_stride)) {
    return "native attention: row and head strides must be positive multiples of 8 elements (TMA)";
  }
  return nullptr;
}

// The persistent kernel's tile counter (fwd_kernel.cuh, TileSource) and its sequence order.
int64_t attention_workspace_bytes(const AttentionForwardArgs& a, const AttentionKernelConfig&) {
  return static_cast<int64_t>(sizeof(int32_t)) * (1 + (a.batch > 0 ? a.batch : 0));
}

LaunchError launch_attention_forward(const AttentionForwardArgs& a, const AttentionKernelConfig& config,
                                     void* stream) {
  using namespace cuda::attention;
  if (LaunchError e = attention_supports(a, config)) return e;
  const bool small = kSmallTiles[config.kernel];
  return dispatch_types(a.dtype, kHeadDims[config.kernel], a.offsets_dtype, [&](auto t, auto d, auto i) {
    using T = decltype(t);
    using IndexT = decltype(i);
    constexpr int D = decltype(d)::value;
    auto s = static_cast<cudaStream_t>(stream);
    return small ? launch_typed<T, D, IndexT, Tiles64x64<D>>(a, s) : launch_typed<T, D, IndexT, Tiles128x128>(a, s);
  });
}

}  // namespace mymetaops
