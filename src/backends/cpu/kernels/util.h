// Helpers shared by CPU kernel files: type dispatch, broadcasting, threading.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/cpu/kernel.h"

namespace kiln::cpu {

template <typename T> struct Tag { using type = T; };

// Calls f(Tag<T>{}) for the C++ type of `t`; error for other types.
template <typename F>
Status DispatchNumeric(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: return f(Tag<float>{});
    case DType::kFloat64: return f(Tag<double>{});
    case DType::kInt8: return f(Tag<std::int8_t>{});
    case DType::kUInt8: return f(Tag<std::uint8_t>{});
    case DType::kInt16: return f(Tag<std::int16_t>{});
    case DType::kUInt16: return f(Tag<std::uint16_t>{});
    case DType::kInt32: return f(Tag<std::int32_t>{});
    case DType::kUInt32: return f(Tag<std::uint32_t>{});
    case DType::kInt64: return f(Tag<std::int64_t>{});
    case DType::kUInt64: return f(Tag<std::uint64_t>{});
    default: return Error(StatusCode::kUnimplemented, "element type ", DTypeName(t), " is not supported here");
  }
}
// Calls f(Tag<U>{}) with an unsigned integer type of `size` bytes.
template <typename F>
Status DispatchBySize(std::size_t size, F&& f) {
  switch (size) {
    case 1: return f(Tag<std::uint8_t>{});
    case 2: return f(Tag<std::uint16_t>{});
    case 4: return f(Tag<std::uint32_t>{});
    case 8: return f(Tag<std::uint64_t>{});
    default: return Error(StatusCode::kUnimplemented, "element size ", size, " is not supported");
  }
}

// Values of integer input i: the compile-time constant if there is one, else
// read from the argument block (int32 or int64).
inline std::vector<std::int64_t> IntsOf(const KernelInit& init, const KernelArgs& a, int i) {
  if (const HostTensor* t = init.const_input(i)) return t->ToInt64Vector();
  std::vector<std::int64_t> v(static_cast<std::size_t>(NumElements(init.inputs[i].shape)));
  for (std::size_t k = 0; k < v.size(); ++k) {
    v[k] = init.inputs[i].dtype == DType::kInt32 ? a.in_as<std::int32_t>(i)[k] : a.in_as<std::int64_t>(i)[k];
  }
  return v;
}

template <typename F>
Status DispatchFloat(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: return f(Tag<float>{});
    case DType::kFloat64: return f(Tag<double>{});
    default: return Error(StatusCode::kUnimplemented, "element type ", DTypeName(t), " is not supported here (float32/float64 only)");
  }
}

// Broadcast of two inputs to an output shape, with adjacent dims collapsed.
struct BroadcastPlan {
  std::vector<std::int64_t> dims;   // collapsed output dims (at least one)
  std::vector<std::int64_t> sa, sb; // element strides of a and b (0 = broadcast)
  std::int64_t total = 0;
};
BroadcastPlan MakeBroadcastPlan(const Shape& a, const Shape& b, const Shape& out);

// Runs body(begin, end) over [0, n) in equal chunks of at least `grain`
// items (what one thread's share must be to pay for the fork), on as many of
// the kernel threads as there are such chunks: on one (the caller, no fork)
// when n < 2 * grain.
template <typename Body>
void ParallelFor(std::int64_t n, std::int64_t grain, Body&& body) {
  const std::int64_t chunks = n / std::max<std::int64_t>(1, grain);
  const int threads = static_cast<int>(std::min<std::int64_t>(NumThreads(), chunks));
  if (threads <= 1) {
    body(std::int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const std::int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const std::int64_t chunk = (n + nt - 1) / nt;
    const std::int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b < e) body(b, e);
  }
}

// Walks a broadcast plan: fn(out_offset, a_offset, b_offset, inner_len,
// inner_stride_a, inner_stride_b) for each innermost row.
template <typename Fn>
void ForEachRow(const BroadcastPlan& p, Fn&& fn) {
  const std::size_t r = p.dims.size();
  const std::int64_t inner = p.dims[r - 1];
  const std::int64_t rows = inner ? p.total / inner : 0;
  // An empty output (some dim 0): nothing to walk; an outer dim of 0 would
  // divide by zero below (found by fuzzing).
  if (rows == 0) return;
  ParallelFor(rows, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(inner, 1)),
              [&](std::int64_t rb, std::int64_t re) {
    std::vector<std::int64_t> idx(r, 0);
    std::int64_t rem = rb, oa = 0, ob = 0;
    for (int d = static_cast<int>(r) - 2; d >= 0; --d) {
      idx[d] = rem % p.dims[d];
      rem /= p.dims[d];
      oa += idx[d] * p.sa[d];
      ob += idx[d] * p.sb[d];
    }
    for (std::int64_t row = rb; row < re; ++row) {
      fn(row * inner, oa, ob, inner, p.sa[r - 1], p.sb[r - 1]);
      for (int d = static_cast<int>(r) - 2; d >= 0; --d) {
        ++idx[d];
        oa += p.sa[d];
        ob += p.sb[d];
        if (idx[d] < p.dims[d]) break;
        oa -= idx[d] * p.sa[d];
        ob -= idx[d] * p.sb[d];
        idx[d] = 0;
      }
    }
  });
}

// Row-major strides of a shape, in elements.
std::vector<std::int64_t> Strides(const Shape& s);

// A strided view of an input, read in row-major order into a contiguous
// output: out[i...] = in[offset + sum_d i_d * strides_d]. Units: elements.
struct StridedView {
  std::int64_t offset = 0;
  std::vector<std::int64_t> dims, strides;
};

// Drops size-1 dims and merges dims that are contiguous in the input; pads
// with leading (1, stride 0) dims up to `min_dims`.
StridedView CollapseStridedView(const StridedView& v, std::size_t min_dims);

}  // namespace kiln::cpu
