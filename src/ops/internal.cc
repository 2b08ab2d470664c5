// Internal (domain "kiln") ops created by passes. None yet beyond fused
// attributes on standard ops.
#include "ops/common_infer.h"

namespace kiln::ops {

void RegisterInternalOps(OpRegistry& r) {}

}  // namespace kiln::ops
