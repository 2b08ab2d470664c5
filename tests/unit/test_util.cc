#include "test_util.h"

#include "ops/op_registry.h"

namespace kiln::test {

void SetLatestVersions(ir::Graph& g) {
  for (auto& n : g.nodes()) {
    if (const ops::OpDef* d = ops::OpRegistry::Get().Find(n->op_type(), n->domain())) {
      n->set_since_version(d->versions.back());
    }
  }
}

}  // namespace kiln::test
