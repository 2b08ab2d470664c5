// Kernels with data-dependent output extents: NonZero and NonMaxSuppression.
// Each writes its result densely at the start of its (upper-bound) output
// buffer and stores the actual shape in KernelArgs::out_shapes.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "backends/cpu/kernel.h"

namespace kiln::cpu {
namespace {

using I64 = std::int64_t;

// Stores the actual output shape; a node planned with a static output (its
// bound is 0, so the result is always empty) runs without a shape record.
Status Report(const KernelArgs& a, Shape actual, const Shape& planned) {
  if (a.out_shapes) {
    a.out_shapes[0] = std::move(actual);
    return Status::Ok();
  }
  if (actual == planned) return Status::Ok();
  return Error(StatusCode::kInternal, "output shape ", ShapeToString(actual), " differs from the planned ",
               ShapeToString(planned), " and the run has no shape record");
}

// Whether element i of `p` (element type t) is non-zero; floats compare by
// value (-0 is zero), everything else by its bytes.
template <typename U>
bool NonZeroBits(const void* p, I64 i, U value_mask) {
  return (static_cast<const U*>(p)[i] & value_mask) != 0;
}

Result<std::unique_ptr<Kernel>> MakeNonZero(const KernelInit& init) {
  const Shape x = init.inputs[0].shape;
  const DType t = init.inputs[0].dtype;
  const I64 n = NumElements(x);
  const auto rank = static_cast<I64>(x.size());
  const I64 rows = std::max<I64>(rank, 1);  // a scalar has one (zero) coordinate, as in ONNX Runtime
  const Shape planned = init.outputs[0].shape;
  std::function<bool(const void*, I64)> nz;
  switch (t) {
    case DType::kFloat32: nz = [](const void* p, I64 i) { return NonZeroBits<std::uint32_t>(p, i, 0x7fffffffu); }; break;
    case DType::kFloat64:
      nz = [](const void* p, I64 i) { return NonZeroBits<std::uint64_t>(p, i, 0x7fffffffffffffffull); };
      break;
    case DType::kFloat16:
    case DType::kBFloat16: nz = [](const void* p, I64 i) { return NonZeroBits<std::uint16_t>(p, i, 0x7fff); }; break;
    default: {
      const std::size_t size = DTypeSize(t);
      if (size != 1 && size != 2 && size != 4 && size != 8) {
        return Error(StatusCode::kUnimplemented, init.node->Describe(), ": element type ", DTypeName(t),
                     " is not supported");
      }
      nz = [size](const void* p, I64 i) {
        const auto* b = static_cast<const std::uint8_t*>(p) + i * size;
        for (std::size_t k = 0; k < size; ++k) {
          if (b[k]) return true;
        }
        return false;
      };
    }
  }
  return MakeFn([x, n, rank, rows, nz, planned](const KernelArgs& a) -> Status {
    const void* in = a.in(0);
    I64 count = 0;
    for (I64 i = 0; i < n; ++i) count += nz(in, i) ? 1 : 0;
    I64* out = a.out_as<I64>(0);
    I64 k = 0;
    std::vector<I64> coord(rows, 0);
    for (I64 i = 0; i < n; ++i) {
      if (nz(in, i)) {
        for (I64 d = 0; d < rows; ++d) out[d * count + k] = coord[d];
        ++k;
      }
      for (I64 d = rank - 1; d >= 0; --d) {  // row-major increment
        if (++coord[d] < x[d]) break;
        coord[d] = 0;
      }
    }
    return Report(a, {rows, count}, planned);
  });
}

// Boxes as corners (y0 <= y1, x0 <= x1) and areas, one array per field,
// so that one candidate is tested against many kept boxes in a loop the
// compiler vectorizes.
struct Corners {
  std::vector<float> y0, x0, y1, x1, area;
  void Clear() {
    for (auto* v : {&y0, &x0, &y1, &x1, &area}) v->clear();
  }
  void Add(const float* b, bool center) {
    float by0, bx0, by1, bx1;
    if (center) {  // [x_center, y_center, width, height]
      bx0 = b[0] - b[2] / 2; bx1 = b[0] + b[2] / 2; by0 = b[1] - b[3] / 2; by1 = b[1] + b[3] / 2;
    } else {       // [y1, x1, y2, x2], either diagonal
      by0 = std::min(b[0], b[2]); by1 = std::max(b[0], b[2]); bx0 = std::min(b[1], b[3]); bx1 = std::max(b[1], b[3]);
    }
    y0.push_back(by0); x0.push_back(bx0); y1.push_back(by1); x1.push_back(bx1);
    area.push_back((bx1 - bx0) * (by1 - by0));
  }
  void Append(const Corners& from, std::size_t k) {
    y0.push_back(from.y0[k]); x0.push_back(from.x0[k]); y1.push_back(from.y1[k]); x1.push_back(from.x1[k]);
    area.push_back(from.area[k]);
  }
};

// ONNX Runtime's rule: boxes that do not overlap, or have no area, never
// suppress each other; otherwise IoU > threshold suppresses. Whether the
// box (a*) is suppressed by any of kept boxes [b, e): each pair is decided
// by the same float operations as one at a time (no contraction), without
// branches, so the loop vectorizes.
__attribute__((always_inline)) inline int AnySuppresses(float ay0, float ax0, float ay1, float ax1, float area_a,
                                                        const float* y0, const float* x0, const float* y1,
                                                        const float* x1, const float* area, std::size_t b,
                                                        std::size_t e, float iou_threshold) {
  int hit = 0;
  for (std::size_t j = b; j < e; ++j) {
    // (Operands in the order of the kept box first, as the rule was first
    // written: std::max/min keep their first operand on NaN.)
    const float ix0 = std::max(x0[j], ax0), ix1 = std::min(x1[j], ax1);
    const float iy0 = std::max(y0[j], ay0), iy1 = std::min(y1[j], ay1);
    const float inter = (ix1 - ix0) * (iy1 - iy0);
    const float uni = area[j] + area_a - inter;
    hit |= static_cast<int>((ix1 > ix0) & (iy1 > iy0) & (inter > 0) & (area_a > 0) & (area[j] > 0) & (uni > 0) &
                            (inter / uni > iou_threshold));
  }
  return hit;
}

__attribute__((target("avx2"))) int AnySuppressesAvx2(float ay0, float ax0, float ay1, float ax1, float area_a,
                                                      const float* y0, const float* x0, const float* y1,
                                                      const float* x1, const float* area, std::size_t b,
                                                      std::size_t e, float iou_threshold) {
  return AnySuppresses(ay0, ax0, ay1, ax1, area_a, y0, x0, y1, x1, area, b, e, iou_threshold);
}

// Whether box `k` of `all` is suppressed by any box of `kept`, tested in
// blocks (a hit ends the scan).
bool Suppressed(const Corners& all, std::size_t k, const Corners& kept, float iou_threshold) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  const float ay0 = all.y0[k], ax0 = all.x0[k], ay1 = all.y1[k], ax1 = all.x1[k], area_a = all.area[k];
  const std::size_t n = kept.y0.size();
  const float *y0 = kept.y0.data(), *x0 = kept.x0.data(), *y1 = kept.y1.data(), *x1 = kept.x1.data(),
              *area = kept.area.data();
  constexpr std::size_t kBlock = 256;
  for (std::size_t b = 0; b < n; b += kBlock) {
    const std::size_t e = std::min(n, b + kBlock);
    const int hit = avx2 ? AnySuppressesAvx2(ay0, ax0, ay1, ax1, area_a, y0, x0, y1, x1, area, b, e, iou_threshold)
                         : AnySuppresses(ay0, ax0, ay1, ax1, area_a, y0, x0, y1, x1, area, b, e, iou_threshold);
    if (hit) return true;
  }
  return false;
}

Result<std::unique_ptr<Kernel>> MakeNonMaxSuppression(const KernelInit& init) {
  const I64 batches = init.inputs[0].shape[0], num_boxes = init.inputs[0].shape[1];
  const I64 classes = init.inputs[1].shape[1];
  const bool center = init.node->GetInt("center_point_box", 0) == 1;
  const bool has_max = init.inputs.size() > 2 && init.inputs[2].present();
  const bool has_iou = init.inputs.size() > 3 && init.inputs[3].present();
  const bool has_score = init.inputs.size() > 4 && init.inputs[4].present();
  const Shape planned = init.outputs[0].shape;
  const I64 bound = NumElements(planned) / 3;
  return MakeFn([=](const KernelArgs& a) -> Status {
    const I64 max_out = has_max ? std::clamp<I64>(*a.in_as<I64>(2), 0, num_boxes) : 0;
    const float iou = has_iou ? *a.in_as<float>(3) : 0.f;
    const float* boxes = a.in_as<float>(0);
    const float* scores = a.in_as<float>(1);
    I64* out = a.out_as<I64>(0);
    I64 selected_total = 0;
    std::vector<I64> order;
    Corners all, kept;
    for (I64 b = 0; b < batches && max_out > 0; ++b) {
      all.Clear();
      for (I64 i = 0; i < num_boxes; ++i) all.Add(boxes + (b * num_boxes + i) * 4, center);
      for (I64 c = 0; c < classes; ++c) {
        const float* s = scores + (b * classes + c) * num_boxes;
        order.clear();
        for (I64 i = 0; i < num_boxes; ++i) {
          if (!has_score || s[i] > *a.in_as<float>(4)) order.push_back(i);
        }
        // Highest score first; equal scores keep the lower index first.
        std::stable_sort(order.begin(), order.end(), [s](I64 l, I64 r) { return s[l] > s[r]; });
        kept.Clear();
        for (I64 i : order) {
          if (static_cast<I64>(kept.y0.size()) >= max_out) break;
          if (Suppressed(all, static_cast<std::size_t>(i), kept, iou)) continue;
          kept.Append(all, static_cast<std::size_t>(i));
          if (selected_total >= bound) {
            return Error(StatusCode::kInternal, "more than the planned ", bound, " selections");
          }
          out[selected_total * 3 + 0] = b;
          out[selected_total * 3 + 1] = c;
          out[selected_total * 3 + 2] = i;
          ++selected_total;
        }
      }
    }
    return Report(a, {selected_total, 3}, planned);
  });
}

}  // namespace

void RegisterDynamicKernels(KernelRegistry& r) {
  r.Register("NonZero", MakeNonZero);
  r.Register("NonMaxSuppression", MakeNonMaxSuppression);
}

}  // namespace kiln::cpu
