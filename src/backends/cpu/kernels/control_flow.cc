// If: each branch is a self-contained graph (the lower-subgraphs pass made
// every captured value an input), planned and recorded as its own executor
// when the model loads. A run reads cond and replays the chosen branch with
// the If's inputs (after cond) and outputs as the branch's I/O regions, so
// the branch writes straight into the If's output buffers. With
// data-dependent extents (an If fed NonZero/NonMaxSuppression results, or
// branches that disagree on an extent) the executor passes the actual input
// shapes and the kernel reports the taken branch's output shapes.
#include "plan/memory_plan.h"
#include "runtime/executor.h"

namespace kiln::cpu {
namespace {

class IfKernel final : public Kernel {
 public:
  struct Branch {
    std::shared_ptr<ir::Graph> graph;  // kept alive for the executor
    plan::MemoryPlan plan;
    std::unique_ptr<runtime::Executor> exec;
  };

  static Result<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    auto k = std::make_unique<IfKernel>();
    const ir::Node& n = *init.node;
    for (int b = 0; b < 2; ++b) {
      const char* name = b == 0 ? "then_branch" : "else_branch";
      const ir::Attribute* a = n.FindAttr(name);
      if (!a || !a->g) return Error(StatusCode::kInvalidArgument, "attribute '", name, "' is missing");
      Branch& br = k->branch_[b];
      br.graph = a->g;
      for (auto& sn : br.graph->nodes()) {
        for (const ir::Value* v : sn->inputs()) {
          if (v && v->owner() != br.graph.get()) {
            return Error(StatusCode::kInvalidArgument, "attribute '", name, "': ", sn->Describe(),
                         " reads outer value '", v->name(), "' (branches must be lowered by lower-subgraphs)");
          }
        }
      }
      auto plan = plan::PlanMemory(*br.graph);
      if (!plan.ok()) return plan.status().WithContext(StrCat("attribute '", name, "'"));
      br.plan = std::move(plan).value();
      auto ex = runtime::Executor::Create(*br.graph, br.plan);
      if (!ex.ok()) return ex.status().WithContext(StrCat("attribute '", name, "'"));
      br.exec = std::move(ex).value();
    }
    k->io_.resize(init.inputs.size() - 1 + init.outputs.size());
    return std::unique_ptr<Kernel>(std::move(k));
  }

  Status Run(const KernelArgs& a) override {
    const bool cond = *a.in_as<std::uint8_t>(0) != 0;
    const std::size_t n_cap = static_cast<std::size_t>(a.num_inputs) - 1;
    for (std::size_t i = 0; i < n_cap; ++i) io_[i] = const_cast<void*>(a.in(static_cast<int>(i) + 1));
    for (std::size_t j = n_cap; j < io_.size(); ++j) io_[j] = a.out(static_cast<int>(j - n_cap));
    Branch& br = branch_[cond ? 0 : 1];
    const char* name = cond ? "then_branch" : "else_branch";
    if (a.in_shapes) {  // data-dependent captured values: tell the branch their extents
      std::vector<Shape> shapes(a.in_shapes + 1, a.in_shapes + a.num_inputs);
      Status st = br.exec->SetInputShapes(shapes);
      if (!st.ok()) return st.WithContext(name);
    }
    Status st = br.exec->Run(io_, nullptr);
    if (!st.ok()) return st.WithContext(name);
    if (a.out_shapes) {
      for (std::size_t j = 0; j < br.graph->outputs().size(); ++j) {
        a.out_shapes[j] = br.exec->ValueShape(br.graph->outputs()[j]);
      }
    }
    return st;
  }

 private:
  Branch branch_[2];
  std::vector<void*> io_;
};

}  // namespace

void RegisterControlFlowKernels(KernelRegistry& r) { r.Register("If", IfKernel::Create); }

}  // namespace kiln::cpu
