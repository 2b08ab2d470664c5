// Helpers shared by the unary, elementwise and reduce op families and their
// CPU kernels: type sets with the half types, opset<7 broadcasting, reduce axes.
#pragma once

#include <algorithm>

#include "ops/common_infer.h"

namespace kiln::ops {

inline const std::set<DType>& HalfTypes() {
  static const std::set<DType> s = {DType::kFloat16, DType::kBFloat16};
  return s;
}
inline std::set<DType> Union(std::initializer_list<std::set<DType>> sets) {
  std::set<DType> out;
  for (const auto& s : sets) out.insert(s.begin(), s.end());
  return out;
}
// float32/64 + float16/bfloat16; all numeric + half types.
inline const std::set<DType>& FloatHalfTypes() {
  static const std::set<DType> s = Union({FloatTypes(), HalfTypes()});
  return s;
}
inline const std::set<DType>& NumericHalfTypes() {
  static const std::set<DType> s = Union({NumericTypes(), HalfTypes()});
  return s;
}

// Binary ops before opset 7 broadcast only with broadcast=1, and then align
// B's dims with A's from `axis` (default: B is a suffix of A). Returns B's
// shape padded with trailing 1s so NumPy broadcasting gives that result.
inline Shape LegacyBroadcastB(const ir::Node& n, const Shape& a, const Shape& b) {
  if (n.since_version() >= 7 || n.GetInt("broadcast", 0) == 0) return b;
  const auto ra = static_cast<std::int64_t>(a.size()), rb = static_cast<std::int64_t>(b.size());
  const std::int64_t axis = n.GetInt("axis", ra - rb);
  Shape out = b;
  for (std::int64_t i = axis + rb; i < ra; ++i) out.push_back(1);
  return out;
}

// Which dims of a rank-`rank` input a Reduce* node reduces. `axes` is the
// axes input's data, or null to use the `axes` attribute. Empty axes = all
// dims, or none with noop_with_empty_axes=1. Errors name the node.
inline Result<std::vector<bool>> ReduceMask(const ir::Node& n, std::size_t rank,
                                            const std::vector<std::int64_t>* axes_in) {
  const std::vector<std::int64_t> axes = axes_in ? *axes_in : n.GetInts("axes");
  const char* what = axes_in ? "input 1 (axes)" : "attribute 'axes'";
  const auto r = static_cast<std::int64_t>(rank);
  std::vector<bool> mask(rank, axes.empty() && n.GetInt("noop_with_empty_axes", 0) == 0);
  for (std::int64_t a : axes) {
    if (a < -r || a >= r) {
      return Error(StatusCode::kInvalidArgument, n.Describe(), ": ", what, " has axis ", a,
                   ", out of range for rank ", rank, " (expected ", -r, "..", r - 1, ")");
    }
    if (a < 0) a += r;
    if (mask[a]) {
      return Error(StatusCode::kInvalidArgument, n.Describe(), ": ", what, " names axis ", a,
                   " more than once");
    }
    mask[a] = true;
  }
  return mask;
}

}  // namespace kiln::ops
