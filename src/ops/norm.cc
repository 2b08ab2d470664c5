#include "ops/common_infer.h"

namespace kiln::ops {

void RegisterNormOps(OpRegistry& r) {}

}  // namespace kiln::ops
