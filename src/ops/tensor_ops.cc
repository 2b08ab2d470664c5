#include "ops/common_infer.h"

namespace kiln::ops {

void RegisterTensorOpsOps(OpRegistry& r) {}

}  // namespace kiln::ops
