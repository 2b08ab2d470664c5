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

// Copies `bytes` from ptrs[0] to ptrs[out_index]: device memory, or mapped
// pinned host memory (kiln.MemcpyToHost / MemcpyFromHost, Identity, views
// the memory plan did not alias). 16 bytes at a time where both addresses
// and the size allow.
extern "C" __global__ void kiln_copy(void* const* ptrs, long long bytes, int out_index) {
  const char* src = static_cast<const char*>(ptrs[0]);
  char* dst = static_cast<char*>(ptrs[out_index]);
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

// ---- row kernels: one warp per row, lanes striding the row ----

__device__ __forceinline__ float kiln_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float kiln_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Softmax / LogSoftmax along len of [outer, len, inner]: row r is
// (r / inner, r % inner), its elements inner apart. Whole warps run the
// loop together (the row loop bound is uniform per warp), so the shuffles
// see every lane.
extern "C" __global__ void kiln_softmax(void* const* ptrs, KilnRowParams p) {
  const float* x = static_cast<const float*>(ptrs[0]);
  float* y = static_cast<float*>(ptrs[1]);
  const long long rows = p.outer * p.inner;
  const int lane = threadIdx.x & 31;
  const long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
  const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
  for (long long r = warp; r < rows; r += warps) {
    const long long base = kiln_row_base(p, r);
    float m = __int_as_float(0xff800000);  // -inf
    for (long long j = lane; j < p.len; j += 32) m = fmaxf(m, x[base + j * p.inner]);
    m = kiln_warp_max(m);
    float s = 0.f;
    for (long long j = lane; j < p.len; j += 32) s += expf(x[base + j * p.inner] - m);
    s = kiln_warp_sum(s);
    const float ls = logf(s);
    for (long long j = lane; j < p.len; j += 32) {
      const float v = x[base + j * p.inner] - m;
      y[base + j * p.inner] = p.log ? v - ls : expf(v) / s;
    }
  }
}

// LayerNormalization over rows of len: mean, then the centred variance
// (two passes), y = (x - mean) / sqrt(var + epsilon) * scale + bias.
extern "C" __global__ void kiln_layernorm(void* const* ptrs, KilnRowParams p) {
  const float* x = static_cast<const float*>(ptrs[0]);
  const float* scale = static_cast<const float*>(ptrs[1]);
  const float* bias = p.has_bias ? static_cast<const float*>(ptrs[2]) : nullptr;
  float* y = static_cast<float*>(ptrs[p.y_index]);
  const int lane = threadIdx.x & 31;
  const long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
  const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
  for (long long r = warp; r < p.outer; r += warps) {
    const float* xr = x + r * p.len;
    float* yr = y + r * p.len;
    float s = 0.f;
    for (long long j = lane; j < p.len; j += 32) s += xr[j];
    const float mean = kiln_warp_sum(s) / (float)p.len;
    float q = 0.f;
    for (long long j = lane; j < p.len; j += 32) {
      const float d = xr[j] - mean;
      q += d * d;
    }
    const float inv = 1.f / sqrtf(kiln_warp_sum(q) / (float)p.len + p.epsilon);
    for (long long j = lane; j < p.len; j += 32) {
      const float b = bias ? bias[j * p.bias_stride] : 0.f;
      yr[j] = (xr[j] - mean) * inv * scale[j * p.scale_stride] + b;
    }
  }
}

// Transpose of elements of elem_bytes.
extern "C" __global__ void kiln_transpose(void* const* ptrs, KilnTransposeParams p) {
  const char* x = static_cast<const char*>(ptrs[0]);
  char* y = static_cast<char*>(ptrs[1]);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n;
       i += (long long)blockDim.x * gridDim.x) {
    const long long o = kiln_transpose_offset(p, i);
    switch (p.elem_bytes) {
      case 1: y[i] = x[o]; break;
      case 2: reinterpret_cast<unsigned short*>(y)[i] = reinterpret_cast<const unsigned short*>(x)[o]; break;
      case 4: reinterpret_cast<unsigned int*>(y)[i] = reinterpret_cast<const unsigned int*>(x)[o]; break;
      default: reinterpret_cast<unsigned long long*>(y)[i] = reinterpret_cast<const unsigned long long*>(x)[o];
    }
  }
}

// ---- data movement and types ----

// Where(cond, x, y) with broadcasting; x / y of elem_bytes (p.op).
extern "C" __global__ void kiln_where(void* const* ptrs, KilnEwParams p) {
  const unsigned char* cond = static_cast<const unsigned char*>(ptrs[0]);
  const char* x = static_cast<const char*>(ptrs[1]);
  const char* y = static_cast<const char*>(ptrs[2]);
  char* out = static_cast<char*>(ptrs[3]);
  const int eb = p.op;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n;
       i += (long long)blockDim.x * gridDim.x) {
    long long oc, ox, oy;
    kiln_ew_offsets3(p, i, &oc, &ox, &oy);
    const char* src = cond[oc] ? x + ox * eb : y + oy * eb;
    switch (eb) {
      case 1: out[i] = *src; break;
      case 2: reinterpret_cast<unsigned short*>(out)[i] = *reinterpret_cast<const unsigned short*>(src); break;
      case 4: reinterpret_cast<unsigned int*>(out)[i] = *reinterpret_cast<const unsigned int*>(src); break;
      default: reinterpret_cast<unsigned long long*>(out)[i] = *reinterpret_cast<const unsigned long long*>(src);
    }
  }
}

// Cast of p.n elements: `types` = from * 16 + to (KilnCastType codes).
extern "C" __global__ void kiln_cast(void* const* ptrs, KilnEwParams p, int types) {
  const int from = types >> 4, to = types & 15;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n;
       i += (long long)blockDim.x * gridDim.x) {
    kiln_cast_at(ptrs[0], from, ptrs[1], to, i);
  }
}

// Less / LessOrEqual / Greater / GreaterOrEqual / Equal (p.op) on float32
// or int64 (`type`), with broadcasting; bool out.
extern "C" __global__ void kiln_compare_kernel(void* const* ptrs, KilnEwParams p, int type) {
  unsigned char* out = static_cast<unsigned char*>(ptrs[2]);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n;
       i += (long long)blockDim.x * gridDim.x) {
    long long oa, ob;
    kiln_ew_offsets(p, i, &oa, &ob);
    out[i] = type == kKilnCmpI64
                 ? kiln_compare(p.op, static_cast<const long long*>(ptrs[0])[oa], static_cast<const long long*>(ptrs[1])[ob])
                 : kiln_compare(p.op, static_cast<const float*>(ptrs[0])[oa], static_cast<const float*>(ptrs[1])[ob]);
  }
}

extern "C" __global__ void kiln_gather(void* const* ptrs, KilnGatherParams p) {
  const char* data = static_cast<const char*>(ptrs[0]);
  const void* indices = ptrs[1];
  char* out = static_cast<char*>(ptrs[2]);
  const int eb = p.elem_bytes;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n;
       i += (long long)blockDim.x * gridDim.x) {
    const long long slot = kiln_gather_index_slot(p, i);
    const long long idx = p.idx64 ? static_cast<const long long*>(indices)[slot] : static_cast<const int*>(indices)[slot];
    const long long src = kiln_gather_source(p, i, idx);
    for (int b = 0; b < eb; ++b) out[i * eb + b] = src < 0 ? 0 : data[src * eb + b];
  }
}

// A convolution's bias after cuDNN: y[n, k, hw] += b[k] (NCHW).
extern "C" __global__ void kiln_conv_bias(void* const* ptrs, long long n, long long channels, long long hw,
                                          int b_index, int y_index) {
  const float* b = static_cast<const float*>(ptrs[b_index]);
  float* y = static_cast<float*>(ptrs[y_index]);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
    y[i] += b[(i / hw) % channels];
  }
}

// Pooling (ew_common.h's kiln_pool_at), one thread per output element.
extern "C" __global__ void kiln_pool(void* const* ptrs, KilnPoolParams p) {
  const float* x = static_cast<const float*>(ptrs[0]);
  float* y = static_cast<float*>(ptrs[1]);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n;
       i += (long long)blockDim.x * gridDim.x) {
    y[i] = kiln_pool_at(p, x, i);
  }
}
