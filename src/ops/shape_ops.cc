#include "ops/common_infer.h"

namespace kiln::ops {

void RegisterShapeOps(OpRegistry& r) {}

}  // namespace kiln::ops
