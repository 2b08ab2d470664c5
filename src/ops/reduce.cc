#include "ops/common_infer.h"

namespace kiln::ops {

void RegisterReduceOps(OpRegistry& r) {}

}  // namespace kiln::ops
