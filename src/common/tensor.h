// HostTensor: an immutable-shape tensor in host memory, used for constants
// (weights), folded values and CLI I/O. Its bytes are either owned or borrowed
// from a keep-alive owner (a mapped file, a model), so weights can be addressed
// in place.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace kiln {
namespace device { class Device; }

// Element i of a raw array of `dtype` as a double (bool: 0 or 1; types
// without a numeric reading: 0). HostTensor::GetAsDouble reads through this.
double ElementAsDouble(DType dtype, const void* data, std::int64_t i);

class HostTensor {
 public:
  HostTensor() = default;
  // Owned, zero-filled storage.
  HostTensor(DType dtype, Shape shape);
  // Borrowed storage kept alive by `owner`.
  HostTensor(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> owner);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  std::int64_t numel() const { return NumElements(shape_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * DTypeSize(dtype_); }
  const void* data() const { return data_; }
  // Mutable access; only valid for owned tensors (asserted).
  void* mutable_data();
  template <typename T> const T* data_as() const { return static_cast<const T*>(data_); }
  template <typename T> T* mutable_data_as() { return static_cast<T*>(mutable_data()); }
  bool owned() const { return owned_ != nullptr; }
  // Non-null: the bytes are memory of this device (external weights copied
  // to a device), which host code may read only where the device is
  // host-addressable; null: host memory.
  ::kiln::device::Device* device() const { return device_; }
  void set_device(::kiln::device::Device* d) { device_ = d; }
  // True: the bytes are clean pages of a read-only file mapping (a mapped
  // .kiln's weights partition, a mapped weight file), which the kernel may
  // drop from memory and read again from the file (ReleasePages).
  bool file_pages() const { return file_pages_; }
  void set_file_pages(bool v) { file_pages_ = v; }
  // For a kernel that packed this constant into its own copy and no longer
  // reads it: drops the resident pages lying wholly inside the bytes where
  // file_pages() (madvise MADV_DONTNEED; a later read faults them in from
  // the file again, so other readers still see the same bytes), so the
  // packed copy does not double the weights' memory. A no-op otherwise.
  void ReleasePages() const;

  // Reads element i converted to double / int64 (for shape arithmetic, folding).
  double GetAsDouble(std::int64_t i) const;
  std::int64_t GetAsInt64(std::int64_t i) const;
  std::vector<std::int64_t> ToInt64Vector() const;

 private:
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  std::shared_ptr<std::vector<std::uint8_t>> owned_;
  std::shared_ptr<const void> owner_;
  const void* data_ = nullptr;
  ::kiln::device::Device* device_ = nullptr;
  bool file_pages_ = false;
};

using HostTensorPtr = std::shared_ptr<const HostTensor>;

// Half-precision conversions (IEEE binary16 and bfloat16).
float HalfToFloat(std::uint16_t h);
std::uint16_t FloatToHalf(float f);
float BFloat16ToFloat(std::uint16_t h);
std::uint16_t FloatToBFloat16(float f);

}  // namespace kiln
