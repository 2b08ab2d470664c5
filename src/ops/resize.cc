#include "ops/common_infer.h"

namespace kiln::ops {

void RegisterResizeOps(OpRegistry& r) {}

}  // namespace kiln::ops
