#include "ops/common_infer.h"

namespace kiln::ops {

void RegisterPoolOps(OpRegistry& r) {}

}  // namespace kiln::ops
