#include "ops/window.h"

#include "common/checked.h"

namespace kiln::ops {

Result<Window> ComputeWindow(const ir::Node& node, const Shape& in,
                             const std::vector<std::int64_t>& kernel, bool allow_ceil) {
  const std::size_t n = in.size();
  auto fail = [&](const auto&... args) {
    return Error(StatusCode::kInvalidArgument, node.Describe(), ": ", args...);
  };
  Window w;
  w.kernel = kernel;
  w.strides = node.GetInts("strides", std::vector<std::int64_t>(n, 1));
  w.dilations = node.GetInts("dilations", std::vector<std::int64_t>(n, 1));
  std::vector<std::int64_t> pads = node.GetInts("pads", std::vector<std::int64_t>(2 * n, 0));
  if (kernel.size() != n) return fail("kernel has ", kernel.size(), " spatial dims, input has ", n);
  if (w.strides.size() != n) return fail("attribute 'strides' has ", w.strides.size(), " values, expected ", n);
  if (w.dilations.size() != n) return fail("attribute 'dilations' has ", w.dilations.size(), " values, expected ", n);
  if (pads.size() != 2 * n) return fail("attribute 'pads' has ", pads.size(), " values, expected ", 2 * n);
  // Every value within 1..kMaxTensorBytes (pads 0..), and the dilated kernel
  // extent too: then no sum or product below can overflow.
  auto range = [&](const char* attr, std::int64_t v, std::int64_t lo) -> Status {
    if (v < lo || v > kMaxTensorBytes) {
      return fail("attribute '", attr, "' value ", v, " is out of range (expected ", lo, "..", kMaxTensorBytes, ")");
    }
    return Status::Ok();
  };
  w.ext.assign(n, 1);
  for (std::size_t i = 0; i < n; ++i) {
    KILN_RETURN_IF_ERROR(range("strides", w.strides[i], 1));
    KILN_RETURN_IF_ERROR(range("dilations", w.dilations[i], 1));
    KILN_RETURN_IF_ERROR(range("kernel_shape", kernel[i], 1));
    KILN_RETURN_IF_ERROR(range("pads", pads[i], 0));
    KILN_RETURN_IF_ERROR(range("pads", pads[i + n], 0));
    std::int64_t ext = 0;
    if (!CheckedMul(w.dilations[i], kernel[i] - 1, &ext) || ext >= kMaxTensorBytes) {
      return fail("kernel extent dilations x (kernel_shape - 1) + 1 = ", w.dilations[i], " x ", kernel[i] - 1,
                  " + 1 on spatial dim ", i, " is larger than ", kMaxTensorBytes);
    }
    w.ext[i] = ext + 1;
  }
  const std::string auto_pad = node.GetString("auto_pad", "NOTSET");
  const bool ceil_mode = allow_ceil && node.GetInt("ceil_mode", 0) != 0;
  w.pads_begin.assign(n, 0);
  w.pads_end.assign(n, 0);
  w.out.assign(n, -1);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t ext = w.ext[i];
    if (in[i] < 0) continue;
    if (auto_pad == "NOTSET") {
      w.pads_begin[i] = pads[i];
      w.pads_end[i] = pads[i + n];
      const std::int64_t span = in[i] + pads[i] + pads[i + n] - ext;
      if (span < 0) return fail("kernel extent ", ext, " exceeds padded input ", in[i] + pads[i] + pads[i + n], " on spatial dim ", i);
      w.out[i] = (ceil_mode ? (span + w.strides[i] - 1) / w.strides[i] : span / w.strides[i]) + 1;
      // A window may not start in the end padding (ONNX / PyTorch rule).
      if (ceil_mode && (w.out[i] - 1) * w.strides[i] >= in[i] + pads[i]) --w.out[i];
    } else if (auto_pad == "VALID") {
      if (in[i] < ext) return fail("kernel extent ", ext, " exceeds input ", in[i], " on spatial dim ", i);
      w.out[i] = (in[i] - ext) / w.strides[i] + 1;
      if (ceil_mode) w.out[i] = (in[i] - ext + w.strides[i] - 1) / w.strides[i] + 1;
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      w.out[i] = (in[i] + w.strides[i] - 1) / w.strides[i];
      const std::int64_t total = std::max<std::int64_t>(0, (w.out[i] - 1) * w.strides[i] + ext - in[i]);
      const std::int64_t small = total / 2, big = total - small;
      w.pads_begin[i] = auto_pad == "SAME_UPPER" ? small : big;
      w.pads_end[i] = auto_pad == "SAME_UPPER" ? big : small;
    } else {
      return fail("attribute 'auto_pad' has invalid value '", auto_pad,
                  "' (expected NOTSET, SAME_UPPER, SAME_LOWER or VALID)");
    }
  }
  return w;
}

}  // namespace kiln::ops
