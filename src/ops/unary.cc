#include "ops/common_infer.h"

namespace kiln::ops {

void RegisterUnaryOps(OpRegistry& r) {}

}  // namespace kiln::ops
