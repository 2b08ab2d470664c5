#include "runtime/executor.h"

#include <cstdlib>
#include <cstring>
#include <unordered_map>

namespace kiln::runtime {

Executor::~Executor() { std::free(arena_); }

Result<std::unique_ptr<Executor>> Executor::Create(const ir::Graph& graph,
                                                   const plan::MemoryPlan& plan,
                                                   bool check_bounds) {
  // check_bounds: one guarded allocation per arena tensor (views share their
  // source's), instead of the shared arena.
  std::unordered_map<const ir::Value*, GuardedBuffer*> guarded_of;
  std::vector<std::unique_ptr<GuardedBuffer>> owned_guarded;
  auto guarded = [&](const ir::Value* v, std::uint64_t size) -> GuardedBuffer* {
    auto it = guarded_of.find(v);
    if (it != guarded_of.end()) return it->second;
    auto b = std::make_unique<GuardedBuffer>();
    b->bytes.assign(size + 2 * GuardedBuffer::kGuard, GuardedBuffer::kPattern);
    b->size = size;
    b->name = v->name();
    GuardedBuffer* raw = b.get();
    guarded_of[v] = raw;
    owned_guarded.push_back(std::move(b));
    return raw;
  };
  std::unique_ptr<Executor> ex(new Executor());
  const std::size_t num_regions =
      plan::kRegionIoBase + graph.inputs().size() + graph.outputs().size();
  ex->region_refs_.resize(num_regions);
  ex->bases_.assign(num_regions, nullptr);
  ex->arena_size_ = plan.arena_size;
  ex->arena_ = static_cast<std::uint8_t*>(
      std::aligned_alloc(plan::kAlignment, (plan.arena_size + plan::kAlignment) / plan::kAlignment * plan::kAlignment));
  if (!ex->arena_) return Error(StatusCode::kInternal, "cannot allocate arena of ", plan.arena_size, " bytes");
  std::memset(ex->arena_, 0, plan.arena_size);
  ex->bases_[plan::kRegionArena] = ex->arena_;

  for (auto& node : graph.nodes()) {
    if (node->GetInt(plan::kAliasAttr, 0) == 1) {  // view: shares its input's bytes
      if (check_bounds) {
        auto it = guarded_of.find(node->input(0));
        if (it != guarded_of.end()) guarded_of[node->output(0)] = it->second;
      }
      continue;
    }
    Task task;
    task.node = node.get();
    task.num_inputs = node->num_inputs();
    cpu::KernelInit init;
    init.node = node.get();
    const auto task_index = static_cast<std::uint32_t>(ex->tasks_.size());
    auto bind = [&](const ir::Value* v, std::uint32_t slot) -> Status {
      auto it = plan.placements.find(v->name());
      if (v->is_constant()) {
        task.ptrs[slot] = const_cast<void*>(v->constant()->data());
        return Status::Ok();
      }
      if (it == plan.placements.end()) {
        return Error(StatusCode::kCorrupt, node->Describe(), ": value '", v->name(), "' has no placement");
      }
      const plan::Placement& p = it->second;
      if (p.region <= plan::kRegionConst || static_cast<std::size_t>(p.region) >= num_regions) {
        return Error(StatusCode::kCorrupt, "value '", v->name(), "' placed in invalid region ", p.region);
      }
      std::uint64_t bytes = static_cast<std::uint64_t>(NumElements(v->shape())) * DTypeSize(v->dtype());
      if (p.size != bytes || (p.region == plan::kRegionArena &&
                              (p.offset > plan.arena_size || p.size > plan.arena_size - p.offset))) {
        return Error(StatusCode::kCorrupt, "value '", v->name(), "' placement [", p.offset, ", +",
                     p.size, ") does not fit region ", p.region);
      }
      if (check_bounds && p.region == plan::kRegionArena) {
        GuardedBuffer* b = guarded(v, p.size);
        task.ptrs[slot] = b->data();
        if (slot >= static_cast<std::uint32_t>(node->num_inputs())) task.guarded_outputs.push_back(b);
        return Status::Ok();
      }
      ex->region_refs_[p.region].push_back({task_index, slot, p.offset});
      task.ptrs[slot] = p.region == plan::kRegionArena ? ex->arena_ + p.offset : nullptr;
      return Status::Ok();
    };
    task.ptrs.assign(node->num_inputs() + node->num_outputs(), nullptr);
    for (int i = 0; i < node->num_inputs(); ++i) {
      const ir::Value* v = node->input(i);
      cpu::TensorDesc d;
      if (v) {
        d = {v->dtype(), v->shape()};
        KILN_RETURN_IF_ERROR(bind(v, static_cast<std::uint32_t>(i)));
      }
      init.inputs.push_back(d);
      init.const_inputs.push_back(v && v->is_constant() ? v->constant().get() : nullptr);
    }
    for (int j = 0; j < node->num_outputs(); ++j) {
      const ir::Value* v = node->output(j);
      init.outputs.push_back({v->dtype(), v->shape()});
      KILN_RETURN_IF_ERROR(bind(v, static_cast<std::uint32_t>(node->num_inputs() + j)));
    }
    KILN_ASSIGN_OR_RETURN(task.kernel, cpu::CreateKernel(init));
    ex->tasks_.push_back(std::move(task));
  }
  ex->guarded_ = std::move(owned_guarded);
  return ex;
}

Status Executor::Run(const std::vector<void*>& io, ExecutionStats* stats) {
  std::uint64_t refreshed = 0;
  for (std::size_t i = 0; i < io.size(); ++i) {
    const std::size_t r = plan::kRegionIoBase + i;
    auto* base = static_cast<std::uint8_t*>(io[i]);
    if (bases_[r] == base) continue;
    bases_[r] = base;
    for (const SlotRef& s : region_refs_[r]) {
      tasks_[s.task].ptrs[s.slot] = base + s.offset;
      ++refreshed;
    }
  }
  for (Task& t : tasks_) {
    cpu::KernelArgs args{t.ptrs.data(), t.num_inputs};
    Status st = t.kernel->Run(args);
    if (!st.ok()) return st.WithContext(t.node->Describe());
    for (GuardedBuffer* b : t.guarded_outputs) {
      for (std::uint64_t i = 0; i < GuardedBuffer::kGuard; ++i) {
        const bool before = b->bytes[i] != GuardedBuffer::kPattern;
        const bool after = b->bytes[GuardedBuffer::kGuard + b->size + i] != GuardedBuffer::kPattern;
        if (before || after) {
          return Error(StatusCode::kInternal, t.node->Describe(), " wrote out of bounds of tensor '",
                       b->name, "' (", b->size, " bytes): guard byte ", before ? "before" : "after",
                       " the buffer was overwritten");
        }
      }
    }
  }
  if (stats) {
    stats->tasks_run = tasks_.size();
    stats->slots_refreshed = refreshed;
  }
  return Status::Ok();
}

}  // namespace kiln::runtime
