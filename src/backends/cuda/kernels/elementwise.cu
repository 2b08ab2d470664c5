// The CUDA device's elementwise kernels, compiled at run time by NVRTC for
// the device's architecture (backends/cuda/cuda_kernels.cc; CMake embeds
// this file and ew_common.h as strings). Every kernel reads its tensor
// addresses from the argument block in device memory (`ptrs`: inputs, then
// outputs), so a recorded graph follows rewritten blocks; shapes and op
// parameters are passed by value. Grid-stride loops: any grid size is right.
#include "ew_common.h"

extern "C" __global__ void kiln_unary(void* const* ptrs, KilnEwParams p) {
  const float* x = static_cast<const float*>(ptrs[0]);
  float* y = static_cast<float*>(ptrs[1]);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n;
       i += (long long)blockDim.x * gridDim.x) {
    y[i] = kiln_unary_op(p, x[i]);
  }
}

extern "C" __global__ void kiln_binary(void* const* ptrs, KilnEwParams p) {
  const float* a = static_cast<const float*>(ptrs[0]);
  const float* b = static_cast<const float*>(ptrs[1]);
  float* c = static_cast<float*>(ptrs[2]);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n;
       i += (long long)blockDim.x * gridDim.x) {
    long long oa, ob;
    kiln_ew_offsets(p, i, &oa, &ob);
    c[i] = kiln_binary_op(p, a[oa], b[ob]);
  }
}

// Copies `bytes` from ptrs[0] to ptrs[1]: device memory, or mapped pinned
// host memory (kiln.MemcpyToHost / MemcpyFromHost, Identity). 16 bytes at a
// time where both addresses and the size allow.
extern "C" __global__ void kiln_copy(void* const* ptrs, long long bytes) {
  const char* src = static_cast<const char*>(ptrs[0]);
  char* dst = static_cast<char*>(ptrs[1]);
  const long long step = (long long)blockDim.x * gridDim.x;
  const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (((reinterpret_cast<unsigned long long>(src) | reinterpret_cast<unsigned long long>(dst) |
        static_cast<unsigned long long>(bytes)) & 15) == 0) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (long long i = first; i < bytes / 16; i += step) d[i] = s[i];
  } else {
    for (long long i = first; i < bytes; i += step) dst[i] = src[i];
  }
}

// MatMul / Gemm (backends/cuda/gemm_params.h): the per-batch matrix
// addresses for cublasGemmBatchedEx, from the bases in the argument block
// (A = ptrs[0], B = ptrs[1], Y = ptrs[y_index]): arrays[0, batch) = B's
// (cuBLAS's first operand), [batch, 2 batch) = A's, [2 batch, 3 batch) = Y's.
// p.sa / p.sb: A's and B's strides over the batch dims, in matrices.
extern "C" __global__ void kiln_gemm_pointers(void* const* ptrs, KilnEwParams p, long long a_mat, long long b_mat,
                                              long long y_mat, int y_index, void** arrays) {
  const float* a = static_cast<const float*>(ptrs[0]);
  const float* b = static_cast<const float*>(ptrs[1]);
  float* y = static_cast<float*>(ptrs[y_index]);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n;
       i += (long long)blockDim.x * gridDim.x) {
    long long oa, ob;
    kiln_ew_offsets(p, i, &oa, &ob);
    arrays[i] = const_cast<float*>(b + ob * b_mat);
    arrays[p.n + i] = const_cast<float*>(a + oa * a_mat);
    arrays[2 * p.n + i] = y + i * y_mat;
  }
}

// Gemm's bias: Y = C broadcast to [M, N] (p.sb: C's strides), before the
// GEMM accumulates beta * Y.
extern "C" __global__ void kiln_gemm_bias(void* const* ptrs, KilnEwParams p, int c_index, int y_index) {
  const float* c = static_cast<const float*>(ptrs[c_index]);
  float* y = static_cast<float*>(ptrs[y_index]);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n;
       i += (long long)blockDim.x * gridDim.x) {
    long long oa, ob;
    kiln_ew_offsets(p, i, &oa, &ob);
    y[i] = c[ob];
  }
}
