// Host side of the CUDA MatMul/Gemm kernel, without CUDA: how a row-major
// ONNX product maps onto cuBLAS's column-major batched GEMM with pointer
// arrays (tested in every build by running the plan through a host
// emulation of the GEMM).
//
// Row-major Y (M x N) = op(A) (M x K) * op(B) (K x N) is, read
// column-major, Y^T = op(B)^T op(A)^T: cuBLAS's first operand is B, its
// second A, with m = N, n = M.
//
// Two ways to run it. Where every operand's matrices are evenly spaced over
// the batch (the batch dims all present or all broadcast; a constant 2-D B
// lets A's batch fold into M), it is one cublasGemmEx or
// cublasGemmStridedBatchedEx on the addresses of the argument block's host
// mirror (`strided`): cuBLAS then picks its kernels knowing the pointers'
// alignment and may split K, which its pointer-array entry cannot (measured
// on an H100: BERT-base's 60 projection GEMMs 258 us each through the
// pointer arrays, ~37 through cublasGemmEx). Such a kernel declares that it
// reads host addresses, so the executor records again when a binding it
// reads moves. Otherwise (numpy broadcasting of part of the batch dims) a
// small kernel reads the bases from the argument block and writes per-batch
// pointer arrays into the workspace, which cublasGemmBatchedEx reads at run
// time, so refreshed buffers need no re-recording.
#pragma once

#include "backends/cuda/ew_common.h"
#include "common/status.h"
#include "ir/graph.h"

namespace kiln::cuda {

struct GemmPlan {
  bool first_t = false, second_t = false;  // cuBLAS's op on its first (B) / second (A) operand
  long long m = 0, n = 0, k = 0;           // cuBLAS's: m = N, n = M, k = K
  long long ld_first = 0, ld_second = 0, ld_out = 0;
  float alpha = 1.f, beta = 0.f;           // beta applies only with a bias (Gemm's C)
  long long batch = 1;                     // output matrices
  KilnEwParams batch_bcast{};              // over the batch dims: sa = A's stride, sb = B's (in matrices)
  long long a_mat = 0, b_mat = 0, y_mat = 0;  // elements per matrix
  bool has_bias = false;                   // Gemm with C and beta != 0: Y starts as C broadcast
  KilnEwParams bias{};                     // n = M * N; sb = C's strides over [M, N]
  int c_index = 2, y_index = 2;            // argument-block slots of C and Y (Y: after the inputs; set by the kernel)
  bool strided = false;                    // evenly spaced matrices: cublasGemm(StridedBatched)Ex
  long long stride_first = 0, stride_second = 0, stride_out = 0;  // elements between batch matrices
  // The pointer arrays, then cuBLAS's own workspace (256-byte aligned).
  static constexpr std::size_t kBlasWorkspace = std::size_t{8} << 20;
  std::size_t arrays_bytes() const { return (static_cast<std::size_t>(3 * batch) * sizeof(void*) + 255) / 256 * 256; }
  std::size_t workspace_bytes() const { return arrays_bytes() + kBlasWorkspace; }
};

// ONNX MatMul (numpy semantics: 1-D operands promoted and their dim dropped,
// batch dims broadcast) and Gemm (transA, transB, alpha, beta, optional C
// broadcast to [M, N]). Shapes are the kernel's static ones; `c` empty and
// `has_c` false when Gemm has no C. Errors name the node; dims beyond
// cuBLAS's int range or an empty reduction (K = 0) are refused.
Result<GemmPlan> MatMulPlan(const ir::Node& node, const Shape& a, const Shape& b, const Shape& out);
Result<GemmPlan> GemmOpPlan(const ir::Node& node, const Shape& a, const Shape& b, bool has_c, const Shape& c,
                            const Shape& out);

}  // namespace kiln::cuda
