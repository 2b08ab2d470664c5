#include "device/device.h"

#include "ir/graph.h"

namespace kiln::device {

bool Device::SupportsNode(const ir::Node& node, const std::vector<DType>& input_dtypes) const {
  return SupportsOp(node.op_type(), node.domain(), input_dtypes);
}

}  // namespace kiln::device
