// CUTLASS 3.x Hopper (sm_90a) grouped GEMM behind cuda/jagged_bmm's instances: one GEMM problem
// per sequence, whose sizes stay on the device (reading the lengths back would be a sync).
//  1. prepare_groups turns offsets into the per-sequence arrays CUTLASS's ptr-array kernel reads
//     (problem shape, operand pointers, strides), writes 0 to the out rows no product covers, and
//     checks every offsets entry into the error record.
//  2. The grouped kernel follows on the same stream: TMA loads (per-sequence descriptors, rebuilt
//     on the device when a CTA moves to another sequence), warp-specialized cooperative wgmma,
//     persistent CTAs over all sequences' tiles in sequence order.
// A sequence with no rows gets M = 0 (no tiles): CUTLASS's mainloop leaves the accumulators
// uninitialized when K = 0, so jagged_jagged_bmm's empty sequences (and every row of
// jagged_dense_bmm when K = 0) are zeroed by step 1 instead.
// Included by the instance files only.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/numeric_types.h>

#include "../gemm/gemm_kernels.cuh"  // gemm::detail::run: CUTLASS's checks, the smem limit, the launch
#include "../jagged_offsets.cuh"
#include "instances.h"

namespace mymetaops {
namespace cuda {
namespace jagged_bmm {
namespace detail {

using cute::_0;
using cute::_1;
using cute::Int;
using cute::Shape;
using RowMajor = cutlass::layout::RowMajor;
using ColumnMajor = cutlass::layout::ColumnMajor;

// 128x256x64, cooperative (2 consumer warpgroups of 64x256 each): N up to 256 (the common width of
// a recsys layer) is one tile, so x's rows are read once per sequence; K step 64 = one 128-byte
// swizzle row of 16-bit elements. No cluster: a sequence's few tiles would round up to clusters.
using Tile = Shape<Int<128>, Int<256>, Int<64>>;
using Cluster = Shape<_1, _1, _1>;
constexpr int kAlign = 8;  // elements: 16-byte TMA rows

// GEMM layouts per operand form (instances.h). CUTLASS's B tag reads B as K x N: RowMajor is N
// contiguous, ColumnMajor K contiguous.
template <Operands kOperands>
struct Layouts {
  using A = RowMajor;
  using B = RowMajor;
};
template <>
struct Layouts<Operands::kDenseK> {
  using A = RowMajor;
  using B = ColumnMajor;
};
template <>
struct Layouts<Operands::kJagged> {
  using A = ColumnMajor;
  using B = RowMajor;
};

template <Operands kOperands, class Element_>
struct Grouped {
  using Element = Element_;
  using L = Layouts<kOperands>;
  using Groups = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // M, N, K per sequence
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, RowMajor*, kAlign,  // no C
      Element, RowMajor*, kAlign, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
      cutlass::epilogue::fusion::LinearCombination<Element, float, void, float>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, typename L::A*, kAlign, Element,
      typename L::B*, kAlign, float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Groups, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using Shape3 = typename Groups::UnderlyingProblemShape;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
};

// The per-sequence arrays, carved out of the launch's workspace (each part 256-byte aligned),
// then CUTLASS's own workspace.
template <class G>
struct Arrays {
  using E = typename G::Element;
  typename G::Shape3* shapes;
  const E** a;
  const E** b;
  E** d;
  typename G::StrideA* stride_a;
  typename G::StrideB* stride_b;
  typename G::StrideD* stride_d;
  void* cutlass;
};

constexpr int64_t kWorkspaceAlign = 256;
inline int64_t aligned(int64_t bytes) {
  return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

template <class G>
int64_t array_bytes(int64_t batch) {
  using E = typename G::Element;
  return aligned(batch * sizeof(typename G::Shape3)) + 3 * aligned(batch * sizeof(E*)) +
         aligned(batch * sizeof(typename G::StrideA)) + aligned(batch * sizeof(typename G::StrideB)) +
         aligned(batch * sizeof(typename G::StrideD));
}

template <class G>
Arrays<G> carve(void* workspace, int64_t batch) {
  using E = typename G::Element;
  char* p = static_cast<char*>(workspace);
  auto take = [&](int64_t bytes) {
    char* here = p;
    if (p != nullptr) p += aligned(bytes);
    return here;
  };
  Arrays<G> g{};
  g.shapes = reinterpret_cast<typename G::Shape3*>(take(batch * sizeof(typename G::Shape3)));
  g.a = reinterpret_cast<const E**>(take(batch * sizeof(E*)));
  g.b = reinterpret_cast<const E**>(take(batch * sizeof(E*)));
  g.d = reinterpret_cast<E**>(take(batch * sizeof(E*)));
  g.stride_a = reinterpret_cast<typename G::StrideA*>(take(batch * sizeof(typename G::StrideA)));
  g.stride_b = reinterpret_cast<typename G::StrideB*>(take(batch * sizeof(typename G::StrideB)));
  g.stride_d = reinterpret_cast<typename G::StrideD*>(take(batch * sizeof(typename G::StrideD)));
  g.cutlass = p;
  return g;
}

constexpr int kPrepareThreads = 128;

// Rows [first, last) of a row-major tensor of row_bytes (a multiple of 16) rows, written 0 by the
// block.
__device__ inline void zero_rows(void* base, int64_t row_bytes, int64_t first, int64_t last) {
  if (last <= first) return;
  uint4* p = reinterpret_cast<uint4*>(static_cast<char*>(base) + first * row_bytes);
  const int64_t n = (last - first) * (row_bytes / 16);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) p[i] = make_uint4(0, 0, 0, 0);
}

// Block b (of max(batch, 1)) fills sequence b's entries and zeroes the out rows it alone covers;
// every thread of the grid checks offsets entries.
template <Operands kOperands, class G, class IndexT>
__global__ void __launch_bounds__(kPrepareThreads) prepare_groups(JaggedBmmArgs p, Arrays<G> g) {
  using E = typename G::Element;
  const auto* offsets = static_cast<const IndexT*>(p.offsets);
  check_offsets(offsets, p.batch, p.total, p.errors, ErrorOp::kJaggedBmm, thread_in_grid(),
                threads_in_grid());
  const int64_t b = blockIdx.x;
  const auto* x = static_cast<const E*>(p.x);
  const auto* y = static_cast<const E*>(p.y);
  E* out = static_cast<E*>(p.out);
  constexpr bool kDense = kOperands != Operands::kJagged;
  const int64_t out_row_bytes = p.n * static_cast<int64_t>(sizeof(E));
  if constexpr (kDense) {  // rows before offsets[0] and from offsets[batch] on (all when batch = 0)
    if (b == 0) zero_rows(out, out_row_bytes, 0, clamped_offset(offsets, 0, p.total));
    if (b == static_cast<int64_t>(gridDim.x) - 1)
      zero_rows(out, out_row_bytes, clamped_offset(offsets, p.batch, p.total), p.total);
  }
  if (b >= p.batch) return;
  const Seq s = sequence(offsets, b, p.total);
  // Rows with a product (K = 0: none, every row 0; the launch then skips the GEMM).
  const int64_t rows = kDense && p.k == 0 ? 0 : s.length < p.max_length ? s.length : p.max_length;
  if (threadIdx.x == 0) {
    g.a[b] = x + s.start * p.x_row_stride;
    g.stride_d[b] = typename G::StrideD{p.n, _1{}, _0{}};
    if constexpr (kDense) {
      g.shapes[b] = typename G::Shape3{static_cast<int>(rows), static_cast<int>(p.n), static_cast<int>(p.k)};
      g.stride_a[b] = typename G::StrideA{p.x_row_stride, _1{}, _0{}};
      g.b[b] = y + b * p.y_batch_stride;
      if constexpr (kOperands == Operands::kDenseN) {
        g.stride_b[b] = typename G::StrideB{_1{}, p.y_k_stride, _0{}};  // (n, k) -> n + k * y_k_stride
      } else {
        g.stride_b[b] = typename G::StrideB{p.y_n_stride, _1{}, _0{}};  // (n, k) -> n * y_n_stride + k
      }
      g.d[b] = out + s.start * p.n;
    } else {
      // K = the rows; none: no tiles (M = 0), the output zeroed below.
      g.shapes[b] = typename G::Shape3{rows > 0 ? static_cast<int>(p.m) : 0, static_cast<int>(p.n),
                                       rows > 0 ? static_cast<int>(rows) : 1};
      g.stride_a[b] = typename G::StrideA{_1{}, p.x_row_stride, _0{}};  // (m, r) -> m + r * ld
      g.b[b] = y + s.start * p.y_k_stride;
      g.stride_b[b] = typename G::StrideB{_1{}, p.y_k_stride, _0{}};    // (n, r) -> n + r * ld
      g.d[b] = out + b * p.m * p.n;
    }
  }
  if constexpr (kDense) {
    zero_rows(out, out_row_bytes, s.start + rows, s.start + s.length);  // past max_length
  } else if (rows == 0) {
    zero_rows(out, out_row_bytes, b * p.m, (b + 1) * p.m);
  }
}

template <Operands kOperands, class Element>
struct Entry {
  using G = Grouped<kOperands, Element>;
  using Gemm = typename G::Gemm;

  static typename Gemm::Arguments arguments(const JaggedBmmArgs& p, const Arrays<G>& g, int device) {
    typename Gemm::Arguments a{};
    a.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    a.problem_shape = {static_cast<int32_t>(p.batch), g.shapes, nullptr};  // sizes on the device only
    a.mainloop = {g.a, g.stride_a, g.b, g.stride_b};
    a.epilogue.ptr_D = g.d;
    a.epilogue.dD = g.stride_d;  // alpha 1, beta 0 (the defaults), no C
    a.hw_info.device_id = device;
    a.hw_info.sm_count = p.sm_count;
    return a;
  }

  static int64_t workspace(const JaggedBmmArgs& p, int device) {
    return array_bytes<G>(p.batch) +
           static_cast<int64_t>(Gemm::get_workspace_size(arguments(p, carve<G>(nullptr, p.batch), device)));
  }

  static LaunchError launch(const JaggedBmmArgs& p, int device, cudaStream_t stream) {
    const Arrays<G> g = carve<G>(p.workspace, p.batch);
    const unsigned blocks = static_cast<unsigned>(p.batch > 0 ? p.batch : 1);
    if (p.offsets_dtype == DType::kInt32) {
      prepare_groups<kOperands, G, int32_t><<<blocks, kPrepareThreads, 0, stream>>>(p, g);
    } else {
      prepare_groups<kOperands, G, int64_t><<<blocks, kPrepareThreads, 0, stream>>>(p, g);
    }
    if (LaunchError err = launch_status()) return err;
    // No product to compute: prepare_groups wrote every 0 (CUTLASS's TMA descriptors need sizes > 0).
    const bool empty = kOperands == Operands::kJagged ? p.m == 0 : p.k == 0;
    if (p.batch == 0 || p.n == 0 || empty) return nullptr;
    return gemm::detail::run<Gemm>(arguments(p, g, device), g.cutlass, device, stream);
  }
};

template <Operands kOperands, bool kHalf>
const Instance& entry() {
  using E = Entry<kOperands, std::conditional_t<kHalf, cutlass::half_t, cutlass::bfloat16_t>>;
  static const Instance instance{&E::workspace, &E::launch};
  return instance;
}

}  // namespace detail
}  // namespace jagged_bmm
}  // namespace cuda
}  // namespace mymetaops
